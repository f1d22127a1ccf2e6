"""Rank 5, tune: the tuner's search (``search``, ``task``, ``log``, ``closing``),
first-use tuning (``first_use``, ``shortlist``), where a plan's tiles came from
(``provenance``), the ranking check (``shortlist_check``) and ``tiledmm tune``
(``command``); the device's measured ceilings and each backend's per-call host cost
(``calibrate``, ``host_cost``: ``tiledmm calibrate``) and first-use calibration
(``first_calibration``). Imports core and below; never interop or dask.
"""
