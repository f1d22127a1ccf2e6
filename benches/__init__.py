"""The benchmark suite (``pytest benches/``, ``bash benches/h200.sh``) and, below it, the
studies and probes behind the docs' numbers. Run everything as modules from the
repository root: ``python -m benches.studies.shapes``.
"""
