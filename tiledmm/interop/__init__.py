"""Rank 5, interop: array kinds and the one route decision (``kinds``), the bridge
for foreign arrays (``bridge``), torch's fast path (``torchpath``), 16-bit tensor-core
products (``halfprec``). Imports core and below; never dask.
"""
