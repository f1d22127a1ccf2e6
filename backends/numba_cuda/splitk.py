"""numba-cuda's split-K launch pair: the K slices into a workspace, then the reduction kernel
(:mod:`.skinny` generates its body) into the output, on the engine's ``Launcher``."""

from __future__ import annotations

import sys
from typing import Any

from . import engine as nb
from .codegen import KernelSpec
from .skinny import REDUCE_THREADS

__all__ = ["launch_split"]


def launch_split(launches: Any, launch: Any, a: Any, b: Any, c: Any, m: int, n: int, k: int,
                 bt: tuple, cupy_ws: bool) -> None:  # fmt: skip
    """``launch`` (a split-K kernel, S slices) over ``bt``'s batch into a workspace
    [S][batch][m][n] (``cupy_ws``: a CuPy array, from CuPy's pool; else a Numba array), then
    the reduction into ``c`` (its launcher cached in ``launches`` per dtype and grid)."""
    sk, z, nb1, mn = launch.spec.split_k, bt[0], bt[1], m * n
    size = sk * z * mn
    if size >= 1 << 32:
        raise ValueError(
            f"numba-cuda's split-K workspace ({sk} x {z} x {m}x{n} elements) is past 32-bit "
            "indexing: use fewer K slices (split_k) or the cupy backend"
        )
    ws = sys.modules["cupy"].empty(size, c.dtype) if cupy_ws else nb.device_array(size, c.dtype)
    launch(a, b, ws, m, n, k, (z * sk, nb1, *bt[2:6], nb1 * mn, mn))
    dtype, blocks = launch.spec.dtype, -(-mn // REDUCE_THREADS)
    spec = KernelSpec("reduce", dtype, 1, REDUCE_THREADS)
    red = launches.get_or_make(("reduce", dtype, blocks, nb.device_id()),
                               lambda: nb.Launcher(spec, (blocks, 1)))  # fmt: skip
    red(ws, ws, c, m, n, sk, (z, nb1, nb1 * mn, mn, z * mn, 0, bt[6], bt[7]))
