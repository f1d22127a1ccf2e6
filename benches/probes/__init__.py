"""Probes: device-level experiments (profiler counters, raw kernel screens, one-off
comparisons) behind statements in docs/. Nothing in tests/ or the package depends on
them. Run as ``python -m benches.probes.<name>``.
"""
