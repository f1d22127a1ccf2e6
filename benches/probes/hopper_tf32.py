"""The Hopper GEMM's TF32 path (``kernels/hopper_gemm.cu``, DTYPE 3): correctness and speed
beside cuBLAS TF32 (``torch.matmul`` with ``allow_tf32``) in the same process.

    python -m benches.probes.hopper_tf32 [--configs L,Lc2,...] [--quick]
        [--shapes 4096,4096,4096:8192,8192,8192] [--json out.json]

float32 A (M x K) and B (K x N) in, float32 C out, products of inputs rounded to TF32
(``cvt.rna``, as cuBLAS rounds), float32 sums. Per call: one pack launch (B -> B^T, K-major,
rounded; the kernel's ``hopper_tf32_pack_bt``) and the GEMM (A read in place by TMA and rounded
in registers, or with ``areg`` 0 read by descriptor through a TFLOAT32 tensor map, which rounds
on load). The probe binds its own launches (one argument block per shape, so the GEMM alone
can be timed) from the library's pieces: ``hopper.defines`` and the driver's tensor maps,
``hopper_tf32``'s pack grid and arguments.

Each configuration runs in its own child process (a kernel that traps cannot take the others
down): first the correctness checks on odd shapes (uniform(-1, 1) inputs, NaN-poisoned output;
error against a float64 reference beside cuBLAS TF32's on the same data, and against the exact
product of the TF32-rounded inputs, which separates rounding from summation: plain truncation
would show there as ~5e-4), then, when correct, the timing: CUDA-event medians after warm-up of
pack + GEMM ("ours"), the GEMM alone, and cuBLAS TF32 on the same arrays, in alternating rounds.
The table printed last has TFLOP/s, the fraction of cuBLAS TF32 (pack included, and GEMM
alone) and our error over cuBLAS's; ``--json`` keeps every number.
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from tiledmm_backends.cupy_cuda import hopper, hopper_tf32

from benches.probes.hopper16 import _time
from tiledmm.model.hopper import packed_k
from tiledmm.planner import hopper as hplan

#: configuration name -> geometry (``hopper_gemm.cu``'s defines in lower case; group_m is a
#: launch argument; areg 1: A from registers, rounded there; 0: A by descriptor, TFLOAT32 map)
CONFIGS = {
    "L": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16),
    "Lc2": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=2, group_m=16),
    "Ls3": dict(bm=128, bn=256, cm=2, cn=1, stages=3, cluster=1, group_m=16),
    "Lg8": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=8),
    "Lw0": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16, wait1=0),
    "Lss": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16, areg=0),
    "LN": dict(bm=128, bn=256, cm=1, cn=2, stages=4, cluster=1, group_m=16),
    "T": dict(bm=256, bn=128, cm=2, cn=1, stages=4, cluster=1, group_m=16),
    "Tc2": dict(bm=256, bn=128, cm=2, cn=1, stages=4, cluster=2, group_m=16),
    "M4": dict(bm=128, bn=128, cm=2, cn=1, stages=4, cluster=1, group_m=16),
    "M6": dict(bm=128, bn=128, cm=2, cn=1, stages=6, cluster=1, group_m=16),
    "M7": dict(bm=128, bn=128, cm=2, cn=1, stages=7, cluster=1, group_m=16),
    "M6c2": dict(bm=128, bn=128, cm=2, cn=1, stages=6, cluster=2, group_m=16),
}
DEFAULT_CONFIGS = "L,Lc2,T,M6,Lss"
#: (m, n, k); K 777 and 4095: A's rows are not 16-byte aligned (a padded copy first)
CHECK = [(1000, 3000, 777), (129, 257, 100), (4095, 4095, 4095), (17, 33, 65), (1, 1, 1),
         (300, 200, 8), (3000, 5000, 1000), (8, 14336, 4096), (256, 256, 3)]  # fmt: skip
QUICK_CHECK = [(1000, 3000, 777), (129, 257, 100), (4095, 4095, 4095)]
#: batched checks: (batch, m, n, k, B shared by the batch)
BATCH_CHECK = [(3, 130, 260, 100, False), (4, 200, 96, 64, True)]
SHAPES = [(4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192), (2048, 14336, 4096),
          (3000, 5000, 1000)]  # fmt: skip
QUICK_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
#: CUtensorMapDataType: FLOAT32 (bits as they are), TFLOAT32 (rounded to TF32 on load)
MAP_FLOAT32, MAP_TFLOAT32 = hopper.MAP_FLOAT32, 11
#: |ours - exact product of the TF32-rounded inputs| / |exact|: float32 summation only
EMULATED_TOL = 5e-5


# ------------------------------------------------------------------ host logic (CPU-testable)


def defines(cfg: dict[str, int]) -> dict[str, int]:
    """``hopper_gemm.cu``'s defines for a TF32 configuration (the library's, ``hopper.defines``,
    with ``areg`` as asked; ValueError for one the planner's ``problems`` rejects)."""
    bad = hplan.problems(hplan.TF32, cfg, hopper.SMEM_LIMIT)
    if bad:
        raise ValueError(f"hopper TF32 tiles {cfg['bm']}x{cfg['bn']}: " + "; ".join(bad))
    return dict(hopper.defines(hplan.TF32, cfg), AREG=int(cfg.get("areg", 1)))


#: row length (floats) of the packed B^T, and the pack's grid and arguments: the library's
padded_k, pack_grid, pack_args = packed_k, hopper_tf32.pack_grid, hopper_tf32.pack_args


def fragment_source(warp: int, lane: int, ks: int) -> list[tuple[int, int]]:
    """(row, k) of A's tile that register j of this lane gets for k-step ``ks`` under the
    kernel's addressing (a mirror of ``tf32_stage``'s ldmatrix: lane l gives the row address
    of matrix l // 8; the tile is 128-byte swizzled, chunk c of row r at c ^ (r % 8)); the PTX
    fragment layout of m64nNk8 .tf32 A says [(16w+g, 8ks+t), (16w+g+8, 8ks+t),
    (16w+g, 8ks+t+4), (16w+g+8, 8ks+t+4)], g = lane // 4, t = lane % 4."""

    def addr(src_lane: int) -> int:  # the kernel's a_off ^ 32 ks, slab 0
        ar = 16 * warp + (src_lane & 7) + 8 * ((src_lane >> 3) & 1)
        return (ar * 128 + ((((src_lane >> 4) ^ src_lane) & 7) << 4)) ^ (ks << 5)

    out = []
    for j in range(4):  # matrix j: its row lane // 4 from lane 8 j + lane // 4, word lane % 4
        a = addr(8 * j + lane // 4) + 4 * (lane % 4)
        r, chunk = a // 128, (a % 128) // 16
        out.append((r, 4 * (chunk ^ (r % 8)) + (a % 16) // 4))
    return out


# ------------------------------------------------------------------ the CUDA side


class Tf32Kernel:
    """One DTYPE 3 build: ``prepare(a, b, c)`` binds float32 CuPy operands (``a`` TMA-ready,
    2-D or a 3-D stack; ``b`` any strides, 2-D (shared) or a stack; ``c`` 2-D or 3-D, unit
    column stride) and returns (pack + GEMM, GEMM alone) as callables."""

    def __init__(self, cp: Any, cfg: dict[str, int], sms: int) -> None:
        from cupy.cuda import driver, function

        self.cp, self.hopper, self.cfg = cp, hopper, cfg
        self.defs = defines(cfg)
        self.bm, self.bn, self.cluster = cfg["bm"], cfg["bn"], cfg["cluster"]
        self.threads = 128 * (cfg["cm"] * cfg["cn"] + 1)
        self.smem = hopper.smem_bytes(self.defs)
        self.mod = function.Module()
        self.mod.load(hopper.sm90a_cubin(hopper.source(self.defs)))
        self.fn = self.mod.get_function("hopper_gemm")
        self.pack = self.mod.get_function("hopper_tf32_pack_bt")
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
        driver.funcSetAttribute(self.fn.ptr, attr, self.smem)
        self.drv = hopper.Driver()
        slots = sms
        if self.cluster > 1:
            got = self.drv.max_clusters(self.fn.ptr, self.cluster, self.threads, self.smem, sms)
            slots = got or sms // self.cluster
        self.slots = slots
        self._bt: dict = {}

    def tensor_map(self, x: Any, box_rows: int, dtype: int) -> Any:
        """The 3-D map of a float32 matrix or stack (boxes of 32 floats x ``box_rows``)."""
        rows, cols = x.shape[-2:]
        nb, bs = (x.shape[0], x.strides[0]) if x.ndim == 3 and x.strides[0] else (1, 0)
        return self.drv.tensor_map(x.data.ptr, rows, cols, x.strides[-2], box_rows, nb, bs, 4,
                                   dtype)  # fmt: skip

    def prepare(self, a: Any, b: Any, c: Any, group_m: int | None = None):
        """(pack + GEMM, GEMM alone): launches on the current stream with maps and arguments
        made here once (the packed B^T buffer is kept per shape)."""
        cp = self.cp
        (m, k), n = a.shape[-2:], b.shape[-1]
        nb = c.shape[0] if c.ndim == 3 else 1
        kp = padded_k(k)
        b_stack = b.ndim == 3 and b.strides[0] != 0
        nbt = nb if b_stack else 1
        key = (nbt, n, kp)
        if key not in self._bt:
            self._bt[key] = cp.empty((nbt, n, kp), cp.float32)
        bt = self._bt[key][:, :, :k]
        bt2 = bt if b_stack else bt[0]
        args_pack = pack_args(b, self._bt[key], k, n, kp)
        grid = pack_grid(n, kp, nbt)
        areg = self.defs["AREG"]
        ma = self.tensor_map(a, self.bm, MAP_FLOAT32 if areg else MAP_TFLOAT32)
        mb = self.tensor_map(bt2, 64, MAP_FLOAT32)
        hp = self.hopper
        tm, tn = hp.tile_counts(m, n, self.bm, self.bn, self.cluster)
        ggrid = hp.grid_size(tm, tn * nb, self.cluster, self.slots)
        ldc = c.strides[-2] // 4 if m > 1 else n
        a_stack = int(a.ndim == 3 and a.strides[0] != 0)
        args = [ma, mb, ma, C.c_void_p(c.data.ptr), C.c_int(m), C.c_int(n), C.c_int(k),
                C.c_longlong(ldc), C.c_int(tm), C.c_int(tn),
                C.c_int(group_m or self.cfg["group_m"]), C.c_int(0), C.c_int(nb),
                C.c_int(a_stack), C.c_int(int(b_stack)),
                C.c_longlong(c.strides[0] // 4 if nb > 1 else 0)]  # fmt: skip
        ptrs = [x[1] if isinstance(x, tuple) else C.addressof(x) for x in args]
        argv = (C.c_void_p * len(ptrs))(*ptrs)
        keep = (args, argv, bt)  # the maps' buffers and the scalars live with the closures

        def gemm(keep=keep):
            stream = cp.cuda.get_current_stream().ptr
            self.drv.launch_argv(self.fn.ptr, ggrid, self.threads, self.smem, stream, keep[1])

        def both():
            self.pack(grid, hopper_tf32.BLOCK, args_pack)
            gemm()

        return both, gemm


def _tma_ready(cp: Any, x: Any) -> Any:
    """``x`` or a copy whose rows (and matrices) start 16-byte aligned."""
    from tiledmm_backends.cupy_cuda import hopper_batch

    return hopper_batch.tma_stack(cp, x)


def _tf32(torch, x):
    """float32 -> TF32 to nearest, ties away (cvt.rna), as float32 values."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & -8192).view(torch.float32)


def _errors(torch, a, b, c, vendor) -> tuple[float, float, float]:
    """(ours vs float64, cuBLAS TF32 vs float64, ours vs the exact product of TF32 inputs)."""
    ref = torch.matmul(a.double(), b.double())
    emu = torch.matmul(_tf32(torch, a).double(), _tf32(torch, b).double())
    nrm, enrm = ref.norm().item() or 1.0, emu.norm().item() or 1.0
    err = (c.double() - ref).norm().item() / nrm
    verr = (vendor.double() - ref).norm().item() / nrm
    eerr = (c.double() - emu).norm().item() / enrm
    return err, verr, eerr


def child(name: str, shapes: list, quick: bool) -> dict:
    """Check and time one configuration (in this process); the record for the JSON."""
    import cupy as cp
    import torch

    torch.set_float32_matmul_precision("high")  # cuBLAS TF32: the vendor to meet
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = CONFIGS[name]
    rec = {"config_name": name, "config": cfg, "card": torch.cuda.get_device_name(),
           "torch": torch.__version__, "checks": [], "times": []}  # fmt: skip
    t0 = time.time()
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    kern = Tf32Kernel(cp, cfg, sms)
    rec["build_s"] = time.time() - t0
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)

    def uni(*shape):
        return torch.rand(*shape, device="cuda", generator=g) * 2 - 1

    ok = True
    checks = [(1, *s, False) for s in (QUICK_CHECK if quick else CHECK)]
    checks += [] if quick else BATCH_CHECK
    for nb, m, n, k, shared_b in checks:
        lead = (nb,) if nb > 1 else ()
        a = uni(*lead, m, k)
        b = uni(k, n) if shared_b else uni(*lead, k, n)
        c = torch.full((*lead, m, n), float("nan"), device="cuda")
        ca = _tma_ready(cp, cp.asarray(a))
        both, _ = kern.prepare(ca, cp.asarray(b), cp.asarray(c))
        both()
        torch.cuda.synchronize()
        v = torch.matmul(a, b)
        err, verr, eerr = _errors(torch, a, b, c, v)
        good = bool(torch.isfinite(c).all().item()) and eerr <= EMULATED_TOL
        ok &= good
        rec["checks"].append(dict(batch=nb, m=m, n=n, k=k, shared_b=shared_b, rel_error=err,
                                  vendor_rel_error=verr, vs_tf32_exact=eerr, ok=good))  # fmt: skip
        what = f"{nb}x " if nb > 1 else ""
        print(f"[{name}] check {what}{m}x{n}x{k}{' shared B' if shared_b else ''}: error "
              f"{err:.2e} (cuBLAS TF32 {verr:.2e}); vs exact TF32 product {eerr:.1e} "
              f"{'ok' if good else 'WRONG'}", flush=True)  # fmt: skip
        del a, b, c, v, ca
    if not ok:
        rec["wrong"] = True
        return rec
    for m, n, k in shapes:
        a, b = uni(m, k), uni(k, n)
        c = torch.empty((m, n), device="cuda")
        vc = torch.empty((m, n), device="cuda")
        ca = _tma_ready(cp, cp.asarray(a))
        both, gemm = kern.prepare(ca, cp.asarray(b), cp.asarray(c))

        def vendor(a=a, b=b, vc=vc):
            torch.matmul(a, b, out=vc)

        both()
        vendor()
        torch.cuda.synchronize()
        err, verr, _ = _errors(torch, a, b, c, vc)
        ts, gs, vs = [], [], []
        for r in range(2):  # alternate the order
            order = [(ts, both), (gs, gemm), (vs, vendor)]
            for lst, fn in order if r % 2 == 0 else order[::-1]:
                lst.append(_time(torch, fn))
        t, gt, v = statistics.median(ts), statistics.median(gs), statistics.median(vs)
        fl = 2 * m * n * k
        row = dict(m=m, n=n, k=k, seconds=t, gemm_seconds=gt, vendor_seconds=v,
                   tflops=fl / t / 1e12, gemm_tflops=fl / gt / 1e12, vendor_tflops=fl / v / 1e12,
                   of_vendor=v / t, gemm_of_vendor=v / gt, rel_error=err, vendor_rel_error=verr,
                   error_ratio=err / verr if verr else float("inf"))  # fmt: skip
        rec["times"].append(row)
        print(f"[{name}] {m}x{n}x{k}: {row['tflops']:.1f} TFLOP/s (GEMM alone "
              f"{row['gemm_tflops']:.1f}), cuBLAS TF32 {row['vendor_tflops']:.1f}: "
              f"{row['of_vendor']:.3f} ({row['gemm_of_vendor']:.3f}); error {err:.2e} "
              f"(cuBLAS {verr:.2e})", flush=True)  # fmt: skip
        del a, b, c, vc, ca, both, gemm
        torch.cuda.empty_cache()
    rec["wall_s"] = time.time() - t0
    return rec


def _shapes(text: str) -> list:
    return [tuple(int(x) for x in s.split(",")) for s in text.split(":") if s]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="", help=f"of {','.join(CONFIGS)} "
                    f"(default {DEFAULT_CONFIGS}; --quick: L)")  # fmt: skip
    ap.add_argument("--shapes", default="")
    ap.add_argument("--quick", action="store_true", help="config L, 3 checks, 2 shapes")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", default="")
    ap.add_argument("--timeout", type=float, default=150)
    args = ap.parse_args(argv)
    default_shapes = QUICK_SHAPES if args.quick else SHAPES
    shapes = _shapes(args.shapes) if args.shapes else default_shapes
    if args.child:
        rec = child(args.child, shapes, args.quick)
        print("RESULT " + json.dumps(rec), flush=True)
        return 0
    names = (args.configs or ("L" if args.quick else DEFAULT_CONFIGS)).split(",")
    unknown = [x for x in names if x not in CONFIGS]
    if unknown:
        ap.error(f"unknown configs {unknown}: {', '.join(CONFIGS)}")
    recs, t0 = [], time.time()
    for name in names:
        cmd = [sys.executable, "-m", "benches.probes.hopper_tf32", "--child", name,
               "--shapes", ":".join(",".join(map(str, s)) for s in shapes)]  # fmt: skip
        cmd += ["--quick"] if args.quick else []
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            out, rc, err = p.stdout, p.returncode, p.stderr
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or ""
            out, rc, err = raw.decode() if isinstance(raw, bytes) else raw, "timeout", ""
        for line in out.splitlines():
            if line.startswith("RESULT "):
                recs.append(json.loads(line[7:]))
            else:
                print(line, flush=True)
        if rc != 0:
            print(f"[{name}] child failed ({rc}): {err[-1500:]}", flush=True)
            recs.append({"config_name": name, "failed": str(rc), "stderr": err[-1500:]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tiledmm": {"bench": "benches/probes/hopper_tf32.py", "records": recs}},
                      f, indent=1)  # fmt: skip
    print(f"\n(all configs: {time.time() - t0:.0f} s)")
    print("config  shape                TFLOP/s  GEMM  cuBLAS  of cuBLAS (GEMM)  err / cuBLAS err")
    for r in recs:
        for t in r.get("times", []):
            shape = f"{t['m']}x{t['n']}x{t['k']}"
            print(f"{r['config_name']:7} {shape:20} {t['tflops']:7.1f} {t['gemm_tflops']:5.1f} "
                  f"{t['vendor_tflops']:7.1f} {t['of_vendor']:9.3f} ({t['gemm_of_vendor']:.3f})"
                  f"  {t['rel_error']:.2e} / {t['vendor_rel_error']:.2e}")  # fmt: skip
        if r.get("wrong") or r.get("failed"):
            print(f"{r['config_name']:7} WRONG/FAILED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
