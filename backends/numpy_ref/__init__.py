"""NumPy blocked-CPU reference backend: the embedded default and the executable geometry.

Each family walks exactly the plan's tiles (grid, block tile, K steps) and zero-pads edge tiles
into packed buffers the way a GPU block fills shared memory. What differs is the innermost
product, since Python cannot loop per element:

- naive:    each output is a dot product of a row of A and a column of B read straight from
            the operands (broadcast multiply + sum over K, no reuse across outputs);
- tiled:    cache blocking: A and B tiles are packed (the "shared memory" is the core's cache)
            and each tile product is a compiled sum-of-products (``numpy.einsum``, no BLAS);
- register: the same blocking with large, L2-sized tiles whose product is NumPy's BLAS
            ``matmul`` (its register-blocked micro-kernel stands in for the thread micro-tile).

So naive -> tiled shows what cache blocking buys, and tiled -> register what register tiling
buys, on this CPU. The compiled CPU kernels live in the OpenCL (PoCL) backend and the
numba-cpu plugin; this one is the reference for correctness and geometry.
"""

from __future__ import annotations

import numpy as np

from tiledmm import Backend, Geometry, hookimpl

__all__ = ["NumpyBackend", "register_backends"]


class NumpyBackend(Backend):
    name = "numpy"
    aliases = ("cpu", "reference")
    kernels = ("naive", "tiled", "register")
    priority = 0

    def geometry(self, kernel, dtype, device):
        s = np.dtype(dtype).itemsize
        l2 = device.cache("L2") or 1 << 20
        if kernel == "naive":
            return Geometry((16, 64, 1), source="numpy reference: 16x64 outputs per block")
        if kernel == "tiled":
            return Geometry((64, 64, 64), source="numpy reference: 64^3 packed tiles")
        t = 512  # largest square tile whose A and B tiles fit the per-core L2
        while t > 32 and 2 * t * t * s > l2:
            t //= 2
        return Geometry((t, t, t), (8, 8), source="numpy reference: L2-sized tiles")

    def search_space(self, kernel, dtype, device):
        """What ``tiledmm tune`` and first-use tuning may try: the block tiles each family
        walks (the thread tile only sizes the planner's work-items here). The planner drops
        those over the device's limits (threads per block, tiles over the per-core L2)."""
        src = "numpy reference search space"
        if kernel == "naive":
            return [Geometry((bm, bn, 1), source=src) for bm in (4, 8, 16, 32, 64)
                    for bn in (16, 32, 64, 128, 256)]  # fmt: skip
        if kernel == "tiled":
            return [Geometry((bm, bn, bk), source=src) for bm in (16, 32, 64, 128)
                    for bn in (16, 32, 64, 128) for bk in (32, 64, 128, 256)]  # fmt: skip
        return [Geometry((bm, bn, bk), (8, 8), source=src) for bm in (64, 128, 256, 512)
                for bn in (64, 128, 256, 512) for bk in (64, 128, 256, 512)]  # fmt: skip

    def run(self, plan, a, b, out):
        fam = plan.kernel
        if fam == "naive":
            _naive(plan, a, b, out)
        else:
            _blocked(plan, a, b, out, np.matmul if fam == "register" else _einsum, fam == "tiled")

    def run_batched(self, plan, a, b, out):
        """The whole batch at once: the same tile walk on stacks of tiles (broadcast views of
        ``a`` and ``b``: no copies), so each tile step is one batched product."""
        batch = out.shape[:-2]
        a = np.broadcast_to(a, batch + a.shape[-2:])
        b = np.broadcast_to(b, batch + b.shape[-2:])
        self.run(plan, a, b, out)
        return True


def _einsum(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.einsum("...ik,...kj->...ij", x, y, out=out)  # optimize=False: compiled loops, no BLAS


def _naive(plan, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    bm, bn, _ = plan.block_tile
    m, n = out.shape[-2:]
    bt = np.swapaxes(b, -1, -2)  # a column of B as a row view (no copy: naive gets no packing)
    for i0 in range(0, m, bm):
        rows = a[..., i0 : i0 + bm, None, :]
        for j0 in range(0, n, bn):
            cols = bt[..., None, j0 : j0 + bn, :]
            out[..., i0 : i0 + bm, j0 : j0 + bn] = (rows * cols).sum(axis=-1)


def _pack(buf: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Copy a (possibly edge) tile into a zeroed tile buffer, like a block filling shared memory."""
    h, w = src.shape[-2:]
    buf[..., :h, :w] = src
    if h < buf.shape[-2]:
        buf[..., h:, :] = 0
    if w < buf.shape[-1]:
        buf[..., :h, w:] = 0
    return buf


def _tile(buf: np.ndarray, src: np.ndarray, pack: bool) -> np.ndarray:
    """The tile to multiply: edge tiles are always packed (zero-filled). Interior tiles are
    packed for einsum (contiguous operands run 1.3x faster) but go to BLAS as views: BLAS packs
    them itself, and our extra copy cost a third of the time at 2048^3."""
    return src if not pack and src.shape == buf.shape else _pack(buf, src)


def _blocked(plan, a: np.ndarray, b: np.ndarray, out: np.ndarray, tile_product, pack) -> None:
    bm, bn, bk = plan.block_tile
    m, n = out.shape[-2:]
    k = a.shape[-1]
    dt, z = out.dtype, out.shape[:-2]  # z: the batch (stacks of tiles), () for one product
    sa, sb = np.empty(z + (bm, bk), dt), np.empty(z + (bk, bn), dt)
    acc, prod = np.empty(z + (bm, bn), dt), np.empty(z + (bm, bn), dt)
    for i0 in range(0, m, bm):  # grid y
        for j0 in range(0, n, bn):  # grid x
            if k == 0:
                acc.fill(0)
            for k0 in range(0, k, bk):  # the block's K loop over staged tiles
                ta = _tile(sa, a[..., i0 : i0 + bm, k0 : k0 + bk], pack)
                tb = _tile(sb, b[..., k0 : k0 + bk, j0 : j0 + bn], pack)
                if k0 == 0:
                    tile_product(ta, tb, out=acc)
                else:
                    acc += tile_product(ta, tb, out=prod)
            h, w = min(bm, m - i0), min(bn, n - j0)
            out[..., i0 : i0 + h, j0 : j0 + w] = acc[..., :h, :w]  # drop the padding


@hookimpl
def register_backends(register):
    register(NumpyBackend())
