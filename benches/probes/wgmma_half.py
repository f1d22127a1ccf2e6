"""float16 / bfloat16 through ``wgmma`` (``wgmma.cu`` built with HALF 1 / 2): an experiment
``benches/probes/wgmma_probe.py`` runs in its child processes (variants whose defines have HALF).

Builds with the library's ``WgmmaKernel`` (``backends/cupy_cuda/wgmma.py``, the path 16-bit
wgmma plans take). A row-major and B row-major go to the kernel as they are (no pack: wgmma
reads 16-bit B N-major through its transpose bit), f32 accumulators, 16-bit result; N and K
multiples of 8 (16-byte rows), edges zero-filled by cp.async, stores guarded. Checked against
a float64 product of the 16-bit inputs (NaN-poisoned output), timed beside the vendor GEMM on
the same data (float16: cupy.matmul; bfloat16: torch.matmul when torch is there).
"""

from __future__ import annotations

import statistics

#: shapes with N and K multiples of 8 (16-byte rows); the kernel zero-fills the rest
SHAPES = [(384, 512, 192), (97, 136, 40), (4096, 4096, 4096), (8192, 8192, 8192),
          (1000, 3000, 776), (4095, 4088, 4000)]  # fmt: skip


def build(cp, defs: dict):
    """The library's build of ``defs`` (``WgmmaKernel``: its ``wgmma_gemm_h`` launch, operands
    as they are where their rows are 16-byte aligned), with its register count for the probe's
    table."""
    from cupy.cuda import driver
    from tiledmm_backends.cupy_cuda.wgmma import WgmmaKernel

    kern = WgmmaKernel(cp, defs)
    kern.regs = driver.funcGetAttribute(getattr(driver, "CU_FUNC_ATTRIBUTE_NUM_REGS", 4),
                                        kern.gemm.ptr)  # fmt: skip
    return kern


def _bf16_bits(cp, x):
    """float32 -> bfloat16 bits (round to nearest even) as uint16."""
    u = x.view(cp.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)


def _f64(cp, x, bf16: bool):
    if bf16:
        return (x.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
    return x.astype(cp.float64)


def _vendor(cp, a, b, bf16: bool):
    """(callable giving the vendor's 16-bit result as this module's storage, name) or None."""
    if not bf16:
        return (lambda: cp.matmul(a, b)), "cupy.matmul"
    try:
        import torch

        ta = torch.from_dlpack(a.view(cp.int16)).view(torch.bfloat16)
        tb = torch.from_dlpack(b.view(cp.int16)).view(torch.bfloat16)

        def run():
            return cp.from_dlpack(torch.matmul(ta, tb).view(torch.int16)).view(cp.uint16)

        return run, "torch.matmul"
    except Exception:  # noqa: BLE001 - no vendor bf16 GEMM here
        return None


def measure(cp, kern, row: dict, seed: int, errors, timed) -> None:
    """Check and time one shape (``errors``, ``timed``: the probe's helpers; ``timed(fn)`` is
    the CuPy backend's ``timings()``)."""
    m, n, k = row["shape"]
    bf16 = kern.defs.get("HALF") == 2
    rng = cp.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=cp.float32)
    b = rng.standard_normal((k, n), dtype=cp.float32)
    if bf16:
        a, b = _bf16_bits(cp, a), _bf16_bits(cp, b)
    else:
        a, b = a.astype(cp.float16), b.astype(cp.float16)
    ref = _f64(cp, a, bf16) @ _f64(cp, b, bf16)
    vend = _vendor(cp, a, b, bf16)
    row["vendor_err"] = row["vendor_tflops"] = row["frac"] = row["gemm_frac"] = float("nan")
    if vend:
        row["vendor"] = vend[1]
        row["vendor_err"], row["vendor_maxerr"], _ = errors(cp, _f64(cp, vend[0](), bf16), ref)
    c = cp.full((m, n), 0xFFFF, cp.uint16) if bf16 else cp.full((m, n), cp.nan, cp.float16)
    kern(a, b, c)
    cp.cuda.runtime.deviceSynchronize()
    row["err"], row["maxerr"], row["nans"] = errors(cp, _f64(cp, c, bf16), ref)
    tol = 3 * row["vendor_err"] if vend else 1e-2  # no vendor: a loose absolute check
    row["ok"] = row["nans"] == 0 and row["err"] <= tol + 1e-6
    del ref
    if m * n * k < 1 << 30:
        return
    fl = 2.0 * m * n * k
    tt = statistics.median(timed(lambda: kern(a, b, c)))
    row.update(tflops=fl / tt / 1e12, gemm_tflops=fl / tt / 1e12)
    if vend:
        vt = statistics.median(timed(vend[0]))
        row.update(vendor_tflops=fl / vt / 1e12, frac=vt / tt, gemm_frac=vt / tt)
