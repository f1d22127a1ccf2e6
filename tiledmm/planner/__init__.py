"""Rank 3, planner: the kernel families and a backend's tiles (``geometry``), plans
(``plans``, ``make``, ``mma``) and a class's tiles fitted to one product (``shapefit``).
Pure: imports util, device and model.
"""
