"""Rank 9, report: the README tables and figures, and the model check
(``python -m tiledmm.report.modelcheck``; the Hopper kernel's rows: ``hoppercheck``).
"""
