"""Rank 3, planner: the kernel families and a backend's tiles (``geometry``), plans
(``plans``, ``make``, ``mma``; ``hopper``: the Hopper 16-bit kernel's decision, configurations and
plans) and a class's tiles fitted to one product (``shapefit``).
Pure: imports util, device and model.
"""
