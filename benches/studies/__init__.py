"""Studies: measurements through tiledmm's front door and the backends' own
``timings()`` (shape classes, tile choice, per-call overhead, the tensor-core rung).
Run as ``python -m benches.studies.<name>``.
"""
