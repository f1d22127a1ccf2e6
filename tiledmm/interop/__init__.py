"""Rank 5, interop: array kinds and the one route decision (``kinds``), the bridge
for foreign arrays (``bridge``), torch's fast path (``torchpath``), ordering within the
caller's CUDA stream (``streams``), 16-bit tensor-core products (``halfprec``), numpy's ufunc
keywords (``keyword_matmul``, ``ufunc_keywords``). Imports core and below; never dask.
"""
