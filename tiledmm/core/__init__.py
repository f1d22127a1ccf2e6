"""Rank 4, core: the Backend contract (``backend``, ``hookspecs``), the registry, the
tuning database, dispatch (backend and kernel choice, plan caches), numpy's semantics and
the engine (one native product, its hot path).
"""
