"""Rank 8, bench: sweeps, results files, machine facts, calibration and the Dask
benchmarks.
"""
