"""Rank 0, util: the helpers every wing may use: a bounded LRU cache (``lru``), cached
user files (``store``), locked atomic writes (``atomicfile``), the one error metric
(``accuracy``), the CLI's argument parsers (``args``) and exit statuses (``exits``).
Imports nothing of tiledmm.
"""
