"""numba-cpu: the three tiledmm kernel families compiled by Numba for the host CPU.

A third-party plugin: it uses only tiledmm's public contract (``Backend``, ``Geometry``,
``hookimpl``, the plan's fields, ``host_cpu``). Numba is imported on the first ``run``, never
when tiledmm loads plugins; an interrupted first import leaves nothing half imported, the
threading layer is a fork-safe one unless the user chose another, and launches go one at a
time where that layer is not thread-safe (``runtime.py``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from tiledmm import Backend, DeviceSpec, Geometry, hookimpl

from . import runtime

__all__ = ["NumbaCpuBackend", "register_backends", "MICRO_ROWS"]
__version__ = "0.1.0"
MICRO_ROWS = 4  # TM of the register family: the unrolled micro-tile height (kernels.py)


class NumbaCpuBackend(Backend):
    """Numba ``njit(parallel=True)`` kernels on the host; one BM x BN block per core at a time."""

    name = "numba-cpu"
    aliases = ("cpu",)
    kernels = ("naive", "tiled", "register")
    # below the numpy backend (0): its BLAS-backed register family measured faster on the same
    # CPU (0.77 against 0.44 of numpy.matmul at 1024^3, benches/results/epyc-2c-cpu.json), and
    # this one JIT-compiles on first use, so "auto" and "cpu" should not land here by a tie
    priority = -5

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("numba") is None:
            return "numba is not installed (pip install numba)"
        return runtime.fork_problem()

    def geometry(self, kernel: str, dtype: str, device: DeviceSpec) -> Geometry | None:
        """Tiles from the per-core caches: L1 for the tiled family, L2 for the register one."""
        s = np.dtype(dtype).itemsize
        l1 = device.cache("L1") or 32 * 1024
        l2 = device.cache("L2") or 1 << 20
        if kernel == "naive":
            return Geometry((16, 64, 1), source="numba-cpu: 16x64 outputs per parallel block")
        if kernel == "tiled":
            bn = 128
            bk = _pow2_at_most(l1 // 2 // (bn * s), 8, 64)  # the B tile takes half of L1
            return Geometry((32, bn, bk), source="numba-cpu: B tile in half of L1")
        # Wide B panels (fewer passes over each C strip) measured best on the 2-core EPYC:
        # 128x512x64 reached 0.38-0.41 of numpy.matmul at 1024-2048^3, 64x256x128 0.25-0.32.
        bn = 512 if s <= 4 else 256
        bk = _pow2_at_most(l2 // 4 // (bn * s), 16, 512)  # the B panel takes a quarter of L2
        return Geometry(
            (128, bn, bk), (4, bn), source="numba-cpu: B panel in a quarter of L2, 4 x BN tile"
        )

    def search_space(self, kernel: str, dtype: str, device: DeviceSpec) -> list[Geometry]:
        """What ``tiledmm tune`` may try: block tiles around the cache-sized defaults; for the
        register family, micro-tiles of 4 rows (``MICRO_ROWS``) by TN dividing BN: only
        tiles :meth:`plan_problem` accepts (a test holds it)."""
        src = "numba-cpu search space"
        if kernel == "naive":
            return [Geometry((bm, bn, 1), source=src) for bm in (4, 8, 16, 32)
                    for bn in (16, 32, 64, 128)]  # fmt: skip
        if kernel == "tiled":
            return [Geometry((bm, bn, bk), source=src) for bm in (16, 32, 64)
                    for bn in (64, 128, 256) for bk in (8, 16, 32, 64)]  # fmt: skip
        return [
            Geometry((bm, bn, bk), (MICRO_ROWS, tn), source=src)
            for bm in (32, 64, 128, 256)
            for bn in (128, 256, 512)
            for bk in (32, 64, 128, 256)
            for tn in (32, 64, bn)
            if bn % tn == 0 and (tn != bn or tn not in (32, 64))
        ]

    def plan_problem(self, plan: Any) -> str | None:
        """The register kernel computes 4 x TN micro-tiles (``MICRO_ROWS``): thread_tile must
        be (4, TN), TN dividing BN, BM a multiple of 4. The other families take any tiles."""
        bm, bn, _ = plan.block_tile
        tm, tn = plan.thread_tile
        if plan.kernel == "register" and (tm != MICRO_ROWS or bn % tn or bm % MICRO_ROWS):
            return (
                f"numba-cpu's register kernel computes {MICRO_ROWS} x TN micro-tiles: "
                f"thread_tile must be ({MICRO_ROWS}, TN) with TN dividing BN and BM a multiple "
                f"of {MICRO_ROWS}; got block {plan.block_tile}, thread {plan.thread_tile}"
            )
        return None

    def run(self, plan: Any, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if not out.flags.writeable:
            raise ValueError("output array is read-only")  # numpy.matmul's words
        bm, bn, bk = plan.block_tile
        why = self.plan_problem(plan)
        if why:
            raise ValueError(why)
        why = runtime.fork_problem()
        if why:
            raise RuntimeError(why)
        fn = runtime.kernels().kernel(plan.kernel, out.dtype)  # numba: imported on first use
        with runtime.launch_lock():
            fn(a, b, out, bm, bn, bk, plan.thread_tile[1])

    def compile_probe(self, kernel: str, defines: dict[str, int], source: str | None = None):
        """``register_block`` (`tiledmm calibrate`'s loop probe, ``tiledmm.tune.loop_probe``):
        the register kernel on ``(A, B, C)`` with ``defines``' BM, BN, BK and TN, one block per
        BM x BN of C (one block: one core). No other probe on this backend."""
        if kernel != "register_block" or source is not None:
            return None
        dtype = np.dtype("float64" if defines.get("REAL_BYTES") == 8 else "float32")
        fn = runtime.kernels().kernel("register", dtype)
        bm, bn, bk, tn = (int(defines[k]) for k in ("BM", "BN", "BK", "TN"))

        def launch(groups: int, args: tuple) -> None:
            a, b, c = args
            with runtime.launch_lock():
                fn(a, b, c, bm, bn, bk, tn)

        return launch


def _pow2_at_most(limit: int, lo: int, hi: int) -> int:
    t = lo
    while t * 2 <= min(limit, hi):
        t *= 2
    return t


@hookimpl
def register_backends(register) -> None:
    register(NumbaCpuBackend())
