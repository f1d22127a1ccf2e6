"""Rank 8, bench: sweeps, results files, machine facts and the Dask benchmarks (the
calibration's measurements live in ``tiledmm.tune.calibrate``, which first use runs too).
"""
