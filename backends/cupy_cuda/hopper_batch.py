"""Batches on the Hopper kernel (16-bit or TF32) in one launch (issue 38): NumPy's
broadcast batch axes reduced to one stride per operand, the kernel's 3-D tensor maps over the
stack (``kernels/hopper_gemm.cu``: the persistent tiles run over every matrix's tiles).

:func:`stack_view` turns an operand into one matrix (shared by the batch: a 2-D operand, a
batch of size-one axes, or a broadcast view with stride 0) or a 3-D stack one stride apart;
:func:`run_batched` launches once, copying operands whose rows or matrices TMA cannot address
(16-byte rule) into an aligned stack first, and computing into a fresh stack where ``out`` is
laid out otherwise (TF32: B is not copied, its B^T pack reads any strides,
``hopper_tf32``). A batch that broadcasts in part (``(2, 1, m, k) @ (1, 3, k, n)``) is left
to the per-matrix loop.
"""

from __future__ import annotations

from typing import Any

from . import hopper

__all__ = ["stack_view", "tma_stack", "run_batched"]


def stack_view(cp: Any, x: Any, batch: tuple[int, ...]) -> Any | None:
    """``x`` (``(..., rows, cols)``, broadcast against the batch shape ``batch``) as one matrix
    (2-D: shared by the batch) or a 3-D stack of ``prod(batch)`` matrices one stride apart, as a
    view; None where its batch axes broadcast only in part or do not collapse to one stride."""
    lead, rows_cols = x.shape[:-2], x.shape[-2:]
    if all(d == 1 for d in lead):
        return x.reshape(rows_cols) if lead else x
    extra = len(batch) - len(lead)
    if extra < 0 or tuple(lead) != tuple(batch[extra:]) or any(d != 1 for d in batch[:extra]):
        return None
    shape, strides = [], []
    for d, s in zip(lead, x.strides[:-2], strict=True):
        if d == 1:
            continue
        if strides and strides[-1] != s * d:
            return None
        shape.append(d)
        strides.append(s)
    if strides and strides[-1] == 0:  # a broadcast view: one matrix
        return cp.lib.stride_tricks.as_strided(x, rows_cols, x.strides[-2:])
    count = 1
    for d in shape:
        count *= d
    return cp.lib.stride_tricks.as_strided(x, (count, *rows_cols), (strides[-1], *x.strides[-2:]))


def tma_stack(cp: Any, x: Any) -> Any:
    """A 2-D operand or 3-D stack that TMA reads in place, else a copy with 16-byte aligned rows
    (and matrices)."""
    if x.ndim == 2:
        return hopper.tma_operand(cp, x)
    inner = hopper.tma_ready(x.shape[1:], x.strides[1:], x.data.ptr, x.itemsize)
    if inner and x.strides[0] > 0 and x.strides[0] % 16 == 0:
        return x
    nb, rows, cols = x.shape
    y = cp.empty((nb, rows, hopper.padded_ld(cols, x.itemsize)), x.dtype)[:, :, :cols]
    y[...] = x
    return y


def run_batched(cp: Any, plan: Any, a: Any, b: Any, out: Any, cfg: dict | None = None) -> bool:
    """``out[...] = a @ b`` over NumPy's broadcast batch axes in one launch of the Hopper
    kernel (``out`` has the full batch shape); False where the batch axes do not reduce to
    one stride per operand (the per-matrix loop then runs)."""
    if not str(hopper.device_info(cp)[1]).startswith("9"):
        return False
    batch = tuple(out.shape[:-2])
    xa, xb = stack_view(cp, a, batch), stack_view(cp, b, batch)
    c3 = stack_view(cp, out, batch)
    if xa is None or xb is None or c3 is None:
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    if not m or not n or 0 in batch:
        return True
    if not k:
        out.fill(0)
        return True
    c3 = c3 if c3.ndim == 3 else c3.reshape((1, m, n))
    nb, (cb, c0, c1), s = c3.shape[0], c3.strides, c3.itemsize
    plain = hopper.stores_in_place(m, n, c0, c1, s) and cb % s == 0
    plain = plain and (nb == 1 or cb >= m * n * s or cb >= c0 * m)
    xb = tma_stack(cp, xb) if plan.dtype in hopper.DTYPES else xb  # TF32: packed to B^T
    hopper.launch_into(cp, plan, tma_stack(cp, xa), xb, c3, plain, (a, b), cfg)
    return True
