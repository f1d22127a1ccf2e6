"""Tensor-core ``mma`` kernels (backends/kernels/mma.cl) on a CUDA GPU, against cuBLAS.

    python -m benches.probes.mma --out $OUT/h200-mma.json        (after bash .whl/setup.sh)

Compiles ``mma.cl`` with CuPy (NVRTC) straight from this checkout (``mma_spec`` by path; it imports
only tiledmm's padding rule),
for a few tile configurations per kind (f64 DMMA, f16/bf16 with f32 accumulate, TF32), checks
each against a float64 host reference on sampled rows (NaN-poisoned output first), then times it
through the CuPy backend's ``timings()`` (CUDA events, each call behind the backend's spin
kernel; median after warm-up) beside cupy.matmul on the same data in the same run
(bf16: cupy if it has the dtype, else torch; TF32: CUPY_TF32=1 / torch allow_tf32). Prints a
table and writes pytest-benchmark JSON rows. Compile errors are printed (NVRTC log) and
skipped; each kind runs in its own process with a time budget (no new work after it) and a hard
timeout, so a CUDA error or a hang in one kind cannot stop the others and the run always ends
(about 3 minutes; --scale multiplies the budgets). Last, an attempt to build the same source
through NVIDIA's OpenCL with inline PTX (recorded, not timed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "1")  # float32 matmul here is only the TF32 yardstick

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file: benches/probes/mma.py)
KDIR = ROOT / "backends" / "kernels"
_spec = importlib.util.spec_from_file_location("mma_spec", KDIR / "mma_spec.py")
ms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ms)  # type: ignore[union-attr]

T0 = time.monotonic()

# (name, kind, BM, BN, BK, warps_m, warps_n, stages, fragment shape or None, extra)
# fmt: off
CONFIGS = {
    "f64": [
        ("128x128x16/4x2/16x8x8/s3", "f64", 128, 128, 16, 4, 2, 3, (16, 8, 8), {}),
        ("128x64x16/4x2/16x8x8/s3/mb2", "f64", 128, 64, 16, 4, 2, 3, (16, 8, 8), {"min_blocks": 2}),
        ("128x64x16/4x2/16x8x8/s4/mb2", "f64", 128, 64, 16, 4, 2, 4, (16, 8, 8), {"min_blocks": 2}),
        ("128x64x16/4x2/16x8x4/s3", "f64", 128, 64, 16, 4, 2, 3, (16, 8, 4), {}),
        ("128x128x16/4x2/16x8x4/s3", "f64", 128, 128, 16, 4, 2, 3, (16, 8, 4), {}),
        ("128x128x16/4x2/8x8x4/s3", "f64", 128, 128, 16, 4, 2, 3, (8, 8, 4), {}),
        ("128x128x16/4x2/16x8x16/s3", "f64", 128, 128, 16, 4, 2, 3, (16, 8, 16), {}),
        ("128x64x16/4x2/16x8x8/s3/u0", "f64", 128, 64, 16, 4, 2, 3, (16, 8, 8),
         {"kk_unroll": 0, "min_blocks": 2}),
        ("64x64x16/2x2/16x8x8/s4", "f64", 64, 64, 16, 2, 2, 4, (16, 8, 8), {}),
        ("64x64x16/2x2/16x8x8/s3/mb3", "f64", 64, 64, 16, 2, 2, 3, (16, 8, 8), {"min_blocks": 3}),
        ("64x64x32/2x2/16x8x8/s3", "f64", 64, 64, 32, 2, 2, 3, (16, 8, 8), {}),
        ("128x64x32/4x2/16x8x8/s3", "f64", 128, 64, 32, 4, 2, 3, (16, 8, 8), {}),
        ("128x64x16/4x2/16x8x8/s3/mb2/ca1", "f64", 128, 64, 16, 4, 2, 3, (16, 8, 8),
         {"min_blocks": 2, "ca": 1}),
        # session 21 (H100): around the ca1 winner (name suffix, fragment, stages, options)
        *[(f"128x64x16/4x2/{fm}x{fn}x{fk}/s{st}/mb2/ca1{sfx}", "f64", 128, 64, 16, 4, 2, st,
           (fm, fn, fk), {"min_blocks": 2, "ca": 1, **x})
          for sfx, (fm, fn, fk), st, x in (("/u0", (16, 8, 8), 3, {"kk_unroll": 0}),
                                           ("", (16, 8, 4), 3, {}), ("", (16, 8, 16), 3, {}),
                                           ("", (16, 8, 8), 2, {}),
                                           ("/g4", (16, 8, 8), 3, {"group_m": 4}),
                                           ("/g16", (16, 8, 8), 3, {"group_m": 16}))],
        ("64x128x16/2x4/16x8x8/s3/mb2/ca1", "f64", 64, 128, 16, 2, 4, 3, (16, 8, 8),
         {"min_blocks": 2, "ca": 1}),
        ("128x64x32/4x2/16x8x8/s2/mb2/ca1", "f64", 128, 64, 32, 4, 2, 2, (16, 8, 8),
         {"min_blocks": 2, "ca": 1}),
        ("64x64x16/2x2/16x8x8/s3/mb4/ca1", "f64", 64, 64, 16, 2, 2, 3, (16, 8, 8),
         {"min_blocks": 4, "ca": 1}),
        ("128x128x16/4x2/16x8x8/s3/ca1", "f64", 128, 128, 16, 4, 2, 3, (16, 8, 8), {"ca": 1}),
        ("256x64x16/8x2/16x8x8/s3/ca1", "f64", 256, 64, 16, 8, 2, 3, (16, 8, 8), {"ca": 1}),
        # session 22 (H100): cuBLAS's DGEMM kernel there is 128x64x16, 3 stages, 2x2 warps of
        # 64x32 (128 threads, 246 registers, 2 blocks per SM): 1.5 shared loads per DMMA, not 2
        *[(f"128x64x16/2x2/16x8x8/s3/mb2{sfx}", "f64", 128, 64, 16, 2, 2, 3, (16, 8, 8),
           {"min_blocks": 2, **x})
          for sfx, x in (("", {}), ("/ca1", {"ca": 1}), ("/u0", {"kk_unroll": 0}),
                         ("/u0/ca1", {"kk_unroll": 0, "ca": 1}), ("/g1", {"group_m": 1}))],
    ],
    "f16": [
        ("128x256x32/2x4/s3", "f16", 128, 256, 32, 2, 4, 3, None, {}),
        ("128x256x32/2x4/s4", "f16", 128, 256, 32, 2, 4, 4, None, {}),
        ("128x256x64/2x4/s3", "f16", 128, 256, 64, 2, 4, 3, None, {}),
        ("256x128x32/4x2/s3", "f16", 256, 128, 32, 4, 2, 3, None, {}),
        ("128x128x32/2x2/s4", "f16", 128, 128, 32, 2, 2, 4, None, {}),
        ("128x128x32/2x4/s4", "f16", 128, 128, 32, 2, 4, 4, None, {}),
        # two blocks of 4 warps per SM (the best shape of the first H200 run), deeper or wider
        ("128x128x64/2x2/s3", "f16", 128, 128, 64, 2, 2, 3, None, {}),
        ("128x128x32/2x2/s5", "f16", 128, 128, 32, 2, 2, 5, None, {}),
        ("128x128x32/2x2/s4/g16", "f16", 128, 128, 32, 2, 2, 4, None, {"group_m": 16}),
        ("128x128x32/2x2/s4/ca1", "f16", 128, 128, 32, 2, 2, 4, None, {"ca": 1}),
        ("128x128x64/2x2/s3/ca1", "f16", 128, 128, 64, 2, 2, 3, None, {"ca": 1}),
        ("128x256x32/2x4/s4/ca1", "f16", 128, 256, 32, 2, 4, 4, None, {"ca": 1}),
        # session 7: around the two best (0.47 in the screen, 0.45 through the planner)
        ("128x128x32/2x2/s6", "f16", 128, 128, 32, 2, 2, 6, None, {}),
        ("128x128x32/2x2/s5/g16", "f16", 128, 128, 32, 2, 2, 5, None, {"group_m": 16}),
        ("128x128x32/2x2/s5/mb2", "f16", 128, 128, 32, 2, 2, 5, None, {"min_blocks": 2}),
        ("128x128x64/2x2/s3/ca1/g16", "f16", 128, 128, 64, 2, 2, 3, None,
         {"ca": 1, "group_m": 16}),
        ("128x128x64/2x2/s3/ca1/mb2", "f16", 128, 128, 64, 2, 2, 3, None,
         {"ca": 1, "min_blocks": 2}),
        ("128x128x64/2x2/s3/ca2", "f16", 128, 128, 64, 2, 2, 3, None, {"ca": 2}),
        # session 9: the fragment pipe (frag_pipe, TF32's tf32_pipe) on the best tile: the next
        # k-step's ldmatrix before this one's HMMAs, across the stage boundary too
        *[(f"128x128x{bk}/2x2/s{st}/mb2{'/ca1' if p == 3 else ''}/p{p}", "f16", 128, 128, bk, 2,
           2, st, None, {"min_blocks": 2, "pipe": p, **({"ca": 1} if p == 3 else {})})
          for bk, st, p in ((64, 3, 1), (64, 3, 2), (64, 3, 3), (64, 3, 4), (32, 4, 1),
                            (32, 4, 3))],
        # session 10: Nsight on 128x128x64/p3 at 8192^3 (logs/h200-mma-f16-ncu-s10.txt): L2 at
        # 86.5% of its peak, the tensor pipe at 61%: a 128x128 tile's 64 FLOP per L2 byte caps
        # it near 380 TFLOP/s; 128x256 and 256x128 (85 FLOP/B) with the fragment pipe
        *[(f"{bm}x{bn}x{bk}/{wm}x{wn}/s{st}/ca1/p3", "f16", bm, bn, bk, wm, wn, st, None,
           {"pipe": 3, "ca": 1}) for bm, bn, wm, wn in ((128, 256, 2, 4), (256, 128, 4, 2))
          for bk, st in ((64, 3), (64, 4), (32, 4))],
    ],
    "bf16": [
        ("128x256x32/2x4/s3", "bf16", 128, 256, 32, 2, 4, 3, None, {}),
        ("128x256x64/2x4/s3", "bf16", 128, 256, 64, 2, 4, 3, None, {}),
        ("128x128x32/2x2/s4", "bf16", 128, 128, 32, 2, 2, 4, None, {}),
        ("128x128x64/2x2/s3", "bf16", 128, 128, 64, 2, 2, 3, None, {}),
        ("128x128x32/2x2/s5", "bf16", 128, 128, 32, 2, 2, 5, None, {}),
        ("128x128x32/2x2/s4/ca1", "bf16", 128, 128, 32, 2, 2, 4, None, {"ca": 1}),
        ("128x128x64/2x2/s3/ca1", "bf16", 128, 128, 64, 2, 2, 3, None, {"ca": 1}),
        ("128x128x32/2x2/s6", "bf16", 128, 128, 32, 2, 2, 6, None, {}),
        ("128x128x32/2x2/s5/mb2", "bf16", 128, 128, 32, 2, 2, 5, None, {"min_blocks": 2}),
        ("128x128x64/2x2/s3/ca1/mb2", "bf16", 128, 128, 64, 2, 2, 3, None,
         {"ca": 1, "min_blocks": 2}),
        ("128x128x64/2x2/s3/ca1/g16", "bf16", 128, 128, 64, 2, 2, 3, None,
         {"ca": 1, "group_m": 16}),
        *[(f"128x128x{bk}/2x2/s{st}/mb2{'/ca1' if p == 3 else ''}/p{p}", "bf16", 128, 128, bk,
           2, 2, st, None, {"min_blocks": 2, "pipe": p, **({"ca": 1} if p == 3 else {})})
          for bk, st, p in ((64, 3, 1), (64, 3, 3), (64, 3, 4), (32, 4, 3))],
        *[(f"{bm}x{bn}x{bk}/{wm}x{wn}/s{st}/ca1/p3", "bf16", bm, bn, bk, wm, wn, st, None,
           {"pipe": 3, "ca": 1}) for bm, bn, wm, wn in ((128, 256, 2, 4), (256, 128, 4, 2))
          for bk, st in ((64, 3), (64, 4), (32, 4))],
    ],
    # TF32 (issue 14 asks >= 0.5 of cuBLAS TF32). rn: cvt.rn (to nearest even, one F2FP on sm_90)
    # on every fragment register (screen 1: 0.42 of cuBLAS at 8192^3 with 128x256, 4 stages,
    # against cvt.rna's 0.39; rounding once per stage in shared memory 0.34-0.37). p3:
    # fragments double-buffered across stages, the barrier once a stage's last fragments are in
    # registers, after it only the next tile's first fragments load and the last k-step
    # multiplies; the copies of tile kt+STAGES-1 follow (A's after ca k-steps, default 1; B's
    # after b k-steps). Screen 3 (02:55 UTC, logs/h200-mma-tf32-screen3.log) at 8192^3 / 4096^3:
    # p3 0.45, p3/b2 0.46/0.48 (the shipped default), p3/b3 0.47/0.47 (255 registers), p4 (last
    # k-step ahead of the barrier) 0.44, 256x128 0.43; the mma.sync probe at 2 warps per
    # scheduler reaches 314 TFLOP/s, so the 64x64 warp tiles' occupancy is not the bound.
    # trunc: raw bits, 2.7x cuBLAS's error, a speed reference only. ldsm: A by ldmatrix.x4.
    "tf32": [
        ("128x256x32/2x4/s4/rn/ldsm/ca1", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "ca": 1}),
        ("128x256x32/2x4/s4/rn/ldsm/p3", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 3}),
        ("128x256x32/2x4/s4/rn/ldsm/p3/b2", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 3, "cb": 2}),
        ("128x256x32/2x4/s4/rn/ldsm/p3/b3", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 3, "cb": 3}),
        ("128x256x32/2x4/s4/rn/ldsm/p3/ca2/b3", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 3, "ca": 2, "cb": 3}),
        ("128x256x32/2x4/s4/rn/ldsm/p4/b3", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 4, "cb": 3}),
        ("128x256x32/2x4/s4/rn/ldsm/p3/b2/g16", "tf32", 128, 256, 32, 2, 4, 4, None,
         {"rna": 3, "ldsm": 1, "pipe": 3, "cb": 2, "group_m": 16}),
        ("128x128x32/2x2/s3/mb2/trunc/ldsm", "tf32", 128, 128, 32, 2, 2, 3, None,
         {"rna": 0, "ldsm": 1, "min_blocks": 2}),
    ],
}
# fmt: on
# (shape, screen): screen shapes run every config; the others the best 3 of the first shape
SHAPES = {
    "f64": [
        ((4096, 4096, 4096), True),
        ((8192, 8192, 8192), False),
        ((1024, 1024, 1024), True),
        ((4095, 4095, 4095), True),
        ((1000, 3000, 777), True),
    ],
    "f16": [((8192, 8192, 8192), True), ((4096, 4096, 4096), False)],
    "bf16": [((8192, 8192, 8192), True), ((4096, 4096, 4096), False)],
    "tf32": [((8192, 8192, 8192), True), ((4096, 4096, 4096), False)],
}  # fmt: skip
DTYPE = {"f64": "float64", "f16": "float16", "bf16": "bfloat16", "tf32": "float32"}


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def source(defs: dict[str, int]) -> str:
    body = (KDIR / "mma.cl").read_text()
    body = body.replace('#include "gemm_common.h"', (KDIR / "gemm_common.h").read_text())
    return "".join(f"#define {k} {int(v)}\n" for k, v in sorted(defs.items())) + body


class Runner:
    def __init__(self, cp, budget: float) -> None:
        import tiledmm

        self.cp, self.budget = cp, budget
        self.timer = tiledmm.get_backend("cupy")  # its timings(): the one CUDA event loop
        self.kernels: dict = {}
        self.rows: list[dict] = []
        self.failures: list[str] = []

    def left(self) -> float:
        return self.budget - (time.monotonic() - T0)

    def build(self, cfg, aligned_a: bool, aligned_b: bool):
        name, kind, bm, bn, bk, wm, wn, st, shape, extra = cfg
        key = (name, kind, aligned_a, aligned_b)
        if key in self.kernels:
            return self.kernels[key]
        cp = self.cp
        try:
            defs = ms.mma_defines(kind, bm, bn, bk, wm, wn, st, shape, aligned_a=aligned_a,
                                  aligned_b=aligned_b, group_m=extra.get("group_m", 8),
                                  kk_unroll=extra.get("kk_unroll"),
                                  min_blocks=extra.get("min_blocks"),
                                  tf32_round=extra.get("rna", 1),
                                  tf32_ldsm=bool(extra.get("ldsm")),
                                  tf32_bvec=bool(extra.get("bvec")),
                                  copy_after=extra.get("ca", 0),
                                  tf32_round_at=extra.get("rat"),
                                  tf32_pipe=extra.get("pipe", 0) if kind == "tf32" else 0,
                                  frag_pipe=extra.get("pipe", 0) if kind != "tf32" else 0,
                                  tf32_copy_b=extra.get("cb"))  # fmt: skip
            defs.update(extra.get("defs", {}))
            t = time.monotonic()
            smem = ms.smem_bytes(defs)
            try:
                fn = cp.RawKernel(source(defs), "gemm")
                fn.compile()
            except Exception as exc:  # noqa: BLE001 - NVRTC without __cvta_generic_to_shared?
                msg = exc.get_message() if hasattr(exc, "get_message") else str(exc)
                log(f"build {kind} {name}: {str(msg)[-1500:]}; retrying with SMEM_CVTA_ASM=1")
                defs["SMEM_CVTA_ASM"] = 1
                fn = cp.RawKernel(source(defs), "gemm")
                fn.compile()
            try:
                fn.max_dynamic_shared_size_bytes = smem
            except Exception:  # noqa: BLE001 - older CuPy: the driver call
                cp.cuda.driver.funcSetAttribute(fn.kernel.ptr, 8, smem)
            info = f"{fn.num_regs} regs, {fn.local_size_bytes} B local, {smem} B shared"
            log(f"built {kind} {name} a{int(aligned_a)}b{int(aligned_b)}: {info} "
                f"({time.monotonic() - t:.1f}s)")  # fmt: skip
            k = (fn, defs, smem, info)
        except Exception as exc:  # noqa: BLE001 - report and go on
            msg = exc.get_message() if hasattr(exc, "get_message") else str(exc)
            log(f"BUILD FAILED {kind} {name}: {type(exc).__name__}: {str(msg)[-3000:]}")
            self.failures.append(f"build {kind} {name}: {str(msg)[-500:]}")
            k = None
        self.kernels[key] = k
        return k

    def launch(self, k, a, b, c, m, n, kk):
        fn, defs, smem, _ = k
        i32 = np.int32
        grid = ((n + defs["BN"] - 1) // defs["BN"], (m + defs["BM"] - 1) // defs["BM"], 1)
        z = i32(0)
        args = (i32(m), i32(n), i32(kk), a, z, i32(kk), b, z, i32(n), c, z, i32(n), i32(1))
        fn(grid, (defs["THREADS"],), args + (z,) * 7, shared_mem=smem)

    def time_fn(self, f, max_s: float = 0.4) -> list[float]:
        """Device seconds per call (the CuPy backend's ``timings()``): 5 after 2 warm-ups, then
        up to 20 in all while ``max_s`` of wall time lasts."""
        t = time.monotonic()
        out = self.timer.timings(f, repeat=5, warmup=2)
        per_call = (time.monotonic() - t) / 7
        more = min(15, int((max_s - (time.monotonic() - t)) / max(per_call, 1e-6)))
        if more > 0:
            out += self.timer.timings(f, repeat=more, warmup=0)
        return out


def make_inputs(cp, kind: str, m: int, n: int, k: int, seed: int):
    """Device operands (the kernel's storage dtype) and their float64 host values."""
    rng = cp.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=cp.float32 if kind != "f64" else cp.float64)
    b = rng.standard_normal((k, n), dtype=cp.float32 if kind != "f64" else cp.float64)
    if kind == "f16":
        a, b = a.astype(cp.float16), b.astype(cp.float16)
    elif kind == "bf16":  # round to bf16 bits (nearest even) on the device, stored as uint16
        a, b = _to_bf16_bits(cp, a), _to_bf16_bits(cp, b)
    return a, b


def _to_bf16_bits(cp, x):
    u = x.view(cp.uint32)
    return ((u + cp.uint32(0x7FFF) + ((u >> 16) & cp.uint32(1))) >> 16).astype(cp.uint16)


def to_f64_host(cp, kind: str, x) -> np.ndarray:
    if kind == "bf16":
        return (cp.asnumpy(x).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return cp.asnumpy(x).astype(np.float64)


def vendor(cp, kind: str, a, b):
    """cuBLAS on the same data: a callable or None (with the reason)."""
    if kind != "bf16":
        return (lambda: cp.matmul(a, b)), "cupy.matmul"
    try:
        import ml_dtypes

        bt = np.dtype(ml_dtypes.bfloat16)
        av, bv = a.view(bt), b.view(bt)
        cp.matmul(av[:2, :2], bv[:2, :2])
        return (lambda: cp.matmul(av, bv)), "cupy.matmul (bfloat16)"
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        ta = torch.from_dlpack(a.view(cp.int16)).view(torch.bfloat16)
        tb = torch.from_dlpack(b.view(cp.int16)).view(torch.bfloat16)
        return (lambda: torch.matmul(ta, tb)), "torch.matmul (bfloat16)"
    except Exception as exc:  # noqa: BLE001
        return None, f"no bf16 vendor GEMM: {exc}"


def vendor_result_bits(cp, kind: str, r):
    if kind == "bf16" and not hasattr(r, "__cuda_array_interface__"):  # a torch tensor
        import torch

        return cp.from_dlpack(r.view(torch.int16)).view(cp.uint16)
    if kind == "bf16":
        return r.view(cp.uint16)
    return r


def rel_err(cp, kind, c, ref_rows, rows) -> float:
    got = to_f64_host(cp, kind, c[cp.asarray(rows)])
    return float(np.linalg.norm(got - ref_rows) / np.linalg.norm(ref_rows))


def run_kind(R: Runner, kind: str, shapes, configs, screen_all: bool) -> None:
    cp = R.cp
    best: list = []
    for si, ((m, n, k), screen) in enumerate(shapes):
        if R.left() < 10:
            log(f"budget spent: skipping {kind} {m}x{n}x{k}")
            return
        a, b = make_inputs(cp, kind, m, n, k, seed=si + 1)
        es = ms.ELEM_BYTES[kind]
        al_a = al_b = (k * es) % 16 == 0 and (n * es) % 16 == 0  # one flag, as kernels.launch
        if kind in ("f16", "bf16") and not (al_a and al_b):
            log(f"{kind} {m}x{n}x{k}: 16-bit operands need 16-byte rows here; skipped")
            continue
        out_dt = {"f64": cp.float64, "tf32": cp.float32}.get(kind, cp.uint16)
        if kind == "f16":
            out_dt = cp.float16
        c = cp.empty((m, n), dtype=out_dt)
        rng = np.random.default_rng(si)
        rows = np.unique(np.concatenate([rng.integers(0, m, 12), [0, m - 1]]))
        ref_rows = to_f64_host(cp, kind, a[cp.asarray(rows)]) @ to_f64_host(cp, kind, b)
        vf, vname = vendor(cp, kind, a, b)
        v_t = v_err = None
        if vf is not None:
            r = vf()
            v_err = rel_err(cp, kind, vendor_result_bits(cp, kind, r), ref_rows, rows)
            v_t = statistics.median(R.time_fn(vf))
        flops = 2.0 * m * n * k
        v_gf = flops / v_t / 1e9 if v_t else None
        log(f"{kind} {m}x{n}x{k}: vendor {vname} {v_gf and round(v_gf)} GFLOP/s, err {v_err}")
        todo = configs if (screen_all or screen) else (best[:3] or configs[:3])
        scored = []
        for cfg in todo:
            if R.left() < 5:
                break
            kern = R.build(cfg, al_a, al_b)
            if kern is None:
                continue
            try:
                c.fill(np.nan) if kind in ("f64", "tf32", "f16") else c.fill(0x7FC1)
                R.launch(kern, a, b, c, m, n, k)
                cp.cuda.runtime.deviceSynchronize()
                err = rel_err(cp, kind, c, ref_rows, rows)
                tol = {"f64": 1e-12, "tf32": 5e-3, "f16": 5e-3, "bf16": 2e-2}[kind]
                ok = np.isfinite(err) and err < max(tol, 10 * (v_err or 0))
                ts = R.time_fn(functools.partial(R.launch, kern, a, b, c, m, n, k))
            except Exception as exc:  # noqa: BLE001
                log(f"RUN FAILED {kind} {cfg[0]} {m}x{n}x{k}: {exc}")
                R.failures.append(f"run {kind} {cfg[0]} {m}x{n}x{k}: {exc}")
                traceback.print_exc()
                cp.cuda.runtime.deviceSynchronize()
                continue
            med = statistics.median(ts)
            gf = flops / med / 1e9
            frac = gf / v_gf if v_gf else float("nan")
            tag = "" if ok else "  WRONG"
            log(f"  {cfg[0]:<28} {gf / 1e3:7.2f} TFLOP/s {frac:5.2f} of vendor, err {err:.2e}{tag}")
            scored.append((gf if ok else -1, cfg))
            R.rows.append(row(kind, cfg, kern, m, n, k, ts, gf, v_gf, v_t, err, v_err, vname, ok))
        if si == 0:
            best = [cfg for _, cfg in sorted(scored, key=lambda x: -x[0]) if _ > 0]
        a = b = c = None
        cp.get_default_memory_pool().free_all_blocks()


def row(kind, cfg, kern, m, n, k, ts, gf, v_gf, v_t, err, v_err, vname, ok) -> dict:
    name, _, bm, bn, bk, wm, wn, st, shape, extra = cfg
    _, defs, smem, info = kern
    dtype = DTYPE[kind]
    s = sorted(ts)
    med = statistics.median(ts)
    opts = dict(warps=[wm, wn], stages=st, fragment=list(defs[x] for x in ("FM", "FN", "FK")),
                aligned=[defs["ALIGNED_A"], defs["ALIGNED_B"]], group_m=defs["GROUP_M"],
                kk_unroll=defs["KK_UNROLL"], min_blocks=defs.get("MIN_BLOCKS"),
                tf32_rna=defs.get("TF32_RNA", 1) if kind == "tf32" else None,
                tf32_ldsm=defs.get("TF32_LDSM", 0) if kind == "tf32" else None,
                tf32_bvec=defs.get("TF32_BVEC", 0) if kind == "tf32" else None,
                copy_after=defs.get("COPY_AFTER", 0),
                tf32_round_at=defs.get("TF32_ROUND_AT") if kind == "tf32" else None,
                tf32_pipe=defs.get("FRAG_PIPE", 0) if kind == "tf32" else None,
                frag_pipe=defs.get("FRAG_PIPE", 0) if kind in ("f16", "bf16") else None,
                tf32_copy_b=defs.get("TF32_COPY_B") if kind == "tf32" else None,
                cvta_asm=defs.get("SMEM_CVTA_ASM", 0),
                precision="tf32" if kind == "tf32" else dtype)  # fmt: skip
    q1, q3 = s[len(s) // 4], s[(3 * len(s)) // 4]
    return {
        "group": f"mma {dtype} {m}x{n}x{k}",
        "name": f"test_mma[cupy-mma-{kind}-{m}x{n}x{k}-{name}]",
        "fullname": f"benches/probes/mma.py::test_mma[cupy-mma-{kind}-{m}x{n}x{k}-{name}]",
        "params": {"backend": "cupy", "kernel": "mma", "dtype": dtype, "shape": f"{m}x{n}x{k}"},
        "param": f"cupy-mma-{kind}-{m}x{n}x{k}-{name}",
        "extra_info": {
            "backend": "cupy", "kernel": "mma", "device": DEVICE, "device_kind": "gpu",
            "dtype": dtype, "precision": opts["precision"], "m": m, "n": n, "k": k,
            "gflops": gf, "seconds": med, "vendor_gflops": v_gf, "vendor_seconds": v_t,
            "vendor": vname, "rel_error": err, "vendor_rel_error": v_err, "correct": bool(ok),
            "block_tile": [bm, bn, bk], "thread_tile": [1, 1], "options": opts,
            "config": name, "build": info, "timer": "CuPy backend timings(): CUDA events (median)",
            "reference": "float64 host product of sampled rows (same rounded inputs)",
        },
        "options": {"timer": "cuda events", "warmup": 2},
        "stats": {"min": s[0], "max": s[-1], "mean": statistics.fmean(s), "median": med,
                  "stddev": statistics.pstdev(s), "rounds": len(s), "iterations": 1,
                  "q1": q1, "q3": q3, "iqr": q3 - q1, "ops": 1 / med, "total": sum(s),
                  "data": ts},
    }  # fmt: skip


def opencl_attempt() -> dict:
    """Build mma.cl (f64, PTX path) with NVIDIA's OpenCL compiler; the log either way."""
    so = Path("/usr/lib/libnvidia-opencl.so.1")
    if so.exists() and "OCL_ICD_VENDORS" not in os.environ:
        Path("/tmp/icd").mkdir(exist_ok=True)
        Path("/tmp/icd/nvidia.icd").write_text(str(so) + "\n")
        os.environ["OCL_ICD_VENDORS"] = "/tmp/icd"
    try:
        import pyopencl as cl
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "log": f"pyopencl unavailable: {exc}"}
    res: dict = {}
    try:
        plats = [p for p in cl.get_platforms() if "NVIDIA" in p.name]
        if not plats:
            return {"ok": False, "log": "no NVIDIA OpenCL platform"}
        dev = plats[0].get_devices()[0]
        ctx = cl.Context([dev])
        for kind, shape in (("f64", (16, 8, 8)), ("f64", (8, 8, 4)), ("f16", None)):
            d = ms.mma_defines(kind, 64, 64, 16 if kind == "f64" else 32, 2, 2, 2, shape)
            src = "#define MMA_PTX_OPENCL 1\n" + source(d)
            tag = f"{kind} {d['FM']}x{d['FN']}x{d['FK']}"
            try:
                prg = cl.Program(ctx, src).build()
                binary = prg.get_info(cl.program_info.BINARIES)[0]
                text = binary.decode(errors="replace") if isinstance(binary, bytes) else ""
                has = [op for op in ("mma.sync", "cp.async", "ldmatrix") if op in text]
                res[tag] = {"ok": True, "ptx_has": has}
            except Exception as exc:  # noqa: BLE001
                res[tag] = {"ok": False, "log": str(exc)[-3000:]}
        res["timed"] = opencl_timed(cl, ctx)
    except Exception as exc:  # noqa: BLE001
        res["error"] = str(exc)[-2000:]
    return res


#: what backends/opencl/mma.py runs (48 KiB of static local memory): (kind, tiles, warps, stages)
OPENCL_TILES = [("f64", (64, 64, 16), (2, 2), 2), ("tf32", (64, 64, 32), (2, 2), 2)]


def opencl_timed(cl, ctx, m: int = 4096) -> dict:
    """The OpenCL backend's mma tiles at m^3 through NVIDIA's OpenCL: error on sampled rows
    against a float64 host product, median seconds by profiling events (5 runs)."""
    q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    rng = np.random.default_rng(5)
    out: dict = {}
    for kind, (bm, bn, bk), (wm, wn), st in OPENCL_TILES:
        tag = f"{kind} {bm}x{bn}x{bk}/{wm}x{wn}/s{st} {m}^3"
        try:
            dt = np.float64 if kind == "f64" else np.float32
            a, b = rng.standard_normal((m, m)).astype(dt), rng.standard_normal((m, m)).astype(dt)
            d = ms.mma_defines(kind, bm, bn, bk, wm, wn, st, group_m=8)
            prg = cl.Program(ctx, "#define MMA_PTX_OPENCL 1\n" + source(d)).build()
            gemm = cl.Kernel(prg, "gemm")
            mf = cl.mem_flags
            ba = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
            bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
            c = np.full((m, m), np.nan, dtype=dt)
            bc = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=c)
            i = np.int32
            args = (i(m), i(m), i(m), ba, i(0), i(m), bb, i(0), i(m), bc, i(0), i(m), i(1),
                    *(i(0),) * 7)  # fmt: skip
            gsz, lsz = (m // bn * d["THREADS"], m // bm, 1), (d["THREADS"], 1, 1)
            times = []
            for _ in range(6):
                ev = gemm(q, gsz, lsz, *args)
                ev.wait()
                times.append((ev.profile.end - ev.profile.start) * 1e-9)
            cl.enqueue_copy(q, c, bc)
            q.finish()
            rows = rng.integers(0, m, 8)
            ref = a[rows].astype(np.float64) @ b.astype(np.float64)
            err = float(np.linalg.norm(c[rows] - ref) / np.linalg.norm(ref))
            sec = statistics.median(times[1:])
            out[tag] = {"tflops": 2.0 * m**3 / sec / 1e12, "seconds": sec, "rel_error": err,
                        "local_bytes": ms.smem_bytes(d)}  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            out[tag] = {"error": str(exc)[-2000:]}
    return out


DEVICE = "unknown GPU"
PROBE: dict = {}


#: seconds of new work per kind (each kind runs in its own process: a CUDA error in one kind
#: cannot take the others down, and a hard timeout ends a stuck one)
BUDGET = {"f64": 80.0, "f16": 30.0, "bf16": 20.0, "tf32": 45.0}


def worker(kind: str, out: str, budget: float, screen_all: bool, only: str = "") -> int:
    """One kind in this process: rows (and failures) to ``out``."""
    global DEVICE
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    DEVICE = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    log(f"{kind} on {DEVICE}, cc {props['major']}.{props['minor']}, cupy {cp.__version__}, "
        f"CUPY_TF32={os.environ.get('CUPY_TF32')}")  # fmt: skip
    R = Runner(cp, budget)
    try:
        cfgs = [c for c in CONFIGS[kind] if (c[0] == only[1:] if only[:1] == "=" else only in c[0])]
        run_kind(R, kind, SHAPES[kind], cfgs, screen_all)
    except Exception as exc:  # noqa: BLE001
        log(f"{kind} aborted: {exc}")
        traceback.print_exc()
        R.failures.append(f"{kind}: {exc}")
    Path(out).write_text(json.dumps({"device": DEVICE, "rows": R.rows, "failures": R.failures},
                                    default=float))  # fmt: skip
    return 0


def _child(args: list[str], timeout: float) -> str | None:
    """Run this script with ``args``; None when it finished, else why not."""
    try:
        res = subprocess.run([sys.executable, __file__, *args], timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"killed after {timeout:.0f}s"
    return None if res.returncode == 0 else f"exit status {res.returncode}"


def main(argv=None) -> int:
    global DEVICE
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="h200-mma.json")
    p.add_argument("--kinds", default="f64,f16,bf16,tf32")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every kind's budget")
    p.add_argument("--all", action="store_true", help="every config at every shape")
    p.add_argument("--no-opencl", action="store_true")
    p.add_argument("--no-probe", action="store_true", help="skip benches/probes/mma_probe.py")
    p.add_argument("--only", default="",
                   help="configs whose name contains this (e.g. for ncu); =NAME: that one only")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--budget", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "opencl":
        Path(args.out).write_text(json.dumps(opencl_attempt()))
        return 0
    if args.worker:
        return worker(args.worker, args.out, args.budget, args.all, args.only)
    R = Runner(None, 0.0)
    tmp = Path(tempfile.mkdtemp(prefix="mma-bench-"))
    if not args.no_probe:  # the mma.sync ceiling (registers only): what any config can reach
        part = tmp / "probe.json"
        try:
            probe = ROOT / "benches" / "probes" / "mma_probe.py"
            subprocess.run([sys.executable, str(probe), "--out", str(part)], timeout=90)
        except subprocess.TimeoutExpired:
            log("mma_probe: killed after 90 s")
        PROBE.update(json.loads(part.read_text()) if part.exists() else {"error": "no result"})
    for kind in args.kinds.split(","):
        budget = BUDGET.get(kind, 20.0) * args.scale
        part = tmp / f"{kind}.json"
        why = _child(["--worker", kind, "--out", str(part), "--budget", str(budget),
                      "--only", args.only] + (["--all"] if args.all else []),
                     budget + 45)  # fmt: skip
        if part.exists():
            got = json.loads(part.read_text())
            DEVICE = got["device"]
            R.rows += got["rows"]
            R.failures += got["failures"]
        if why:
            log(f"{kind}: worker {why}")
            R.failures.append(f"{kind} worker: {why}")
        write(args.out, R, None)
    ocl = None
    if not args.no_opencl:
        part = tmp / "opencl.json"
        why = _child(["--worker", "opencl", "--out", str(part)], 90)
        ocl = json.loads(part.read_text()) if part.exists() else {"ok": False, "log": why}
        log(f"OpenCL inline-PTX attempt: {json.dumps(ocl)[:4000]}")
    write(args.out, R, ocl)
    print("\nkind  config                        shape              TFLOP/s  of cuBLAS  error")
    for r in R.rows:
        e = r["extra_info"]
        frac = e["gflops"] / e["vendor_gflops"] if e["vendor_gflops"] else float("nan")
        print(
            f"{e['dtype']:<9} {e['config']:<28} {e['m']}x{e['n']}x{e['k']:<8} "
            f"{e['gflops'] / 1e3:7.2f}  {frac:9.2f}  {e['rel_error']:.2e} "
            f"(cuBLAS {e['vendor_rel_error'] or 0:.2e})" + ("" if e["correct"] else " WRONG")
        )
    print("\nbest correct config per dtype and shape (fraction of the vendor GEMM, same run):")
    top: dict = {}
    for r in R.rows:
        e = r["extra_info"]
        key = (e["dtype"], e["m"], e["n"], e["k"])
        if e["correct"] and (key not in top or e["gflops"] > top[key]["gflops"]):
            top[key] = e
    for (dt_, m, n, k), e in top.items():
        frac = e["gflops"] / e["vendor_gflops"] if e["vendor_gflops"] else float("nan")
        print(
            f"  {dt_:<9} {m}x{n}x{k:<6} {e['gflops'] / 1e3:7.2f} TFLOP/s = {frac:.2f} of "
            f"{e['vendor_gflops'] / 1e3 if e['vendor_gflops'] else 0:.2f}  ({e['config']})"
        )
    log(f"wrote {args.out} ({len(R.rows)} rows, {len(R.failures)} failures)")
    return 0


def write(path: str, R: Runner, ocl) -> None:
    doc = {
        "machine_info": {"node": platform.node(), "python_version": platform.python_version(),
                         "gpu": DEVICE, "system": platform.system()},
        "commit_info": {"project": "tiledmm"},
        "benchmarks": R.rows,
        "datetime": dt.datetime.now(dt.UTC).isoformat(),
        "version": "benches/probes/mma.py",
        "tiledmm": {"command": " ".join(sys.argv), "failures": R.failures,
                    "opencl_inline_ptx": ocl, "mma_sync_ceiling": PROBE},
    }  # fmt: skip
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1, default=float))


if __name__ == "__main__":
    sys.exit(main())
