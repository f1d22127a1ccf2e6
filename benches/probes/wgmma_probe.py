"""Screen of the Hopper ``wgmma`` TF32 GEMM (``backends/kernels/wgmma.cu``) against cuBLAS TF32.

    python -m benches.probes.wgmma_probe [--out wgmma.json] [--variants a,b] [--shapes
    4096,4096,4096;...]

Each variant (a set of the kernel's defines) runs in its own child process, so a variant that
fails to build or faults leaves the others standing. A child compiles the source with NVRTC for
``sm_90a``; then per shape it draws fresh normal inputs, computes the float64 reference on the
GPU, runs the variant once into a NaN-poisoned output (normwise relative error and max error
beside cupy.matmul's with CUPY_TF32=1 on the same data), and times through the CuPy backend's
``timings()`` (CUDA events, each call behind its spin kernel; median of 12 after 2 warm-ups) the
whole product (TF32 pack of A and B^T + GEMM) and the GEMM alone, beside cupy.matmul. Prints
one line per result and a table; writes all rows as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "1")  # cupy.matmul on float32 = cuBLAS TF32 (the yardstick)

SRC = Path(__file__).resolve().parents[2] / "backends" / "kernels" / "wgmma.cu"
BASE = {"BN": 256, "WG_M": 1, "NWG": 2, "STAGES": 4, "SWIZZLE": 1, "WAIT1": 1, "GROUP_M": 8,
        "MINB": 1, "NS_SWAP": 0, "ROUND": 1, "TMA": 0, "CLUSTER": 1}  # fmt: skip
#: name -> defines over BASE ("s"/"n": cp.async, 128-byte swizzle / none; "t": TMA with a
#: producer warpgroup, c2: 2-block clusters sharing B; block BMxBN; stages; w: WAIT1)
VARIANTS = {
    "s128x256_s4_w1": {},
    "n128x256_s4_w1": {"SWIZZLE": 0},
    "t128x256_s4_c2": {"TMA": 1, "CLUSTER": 2},
    "t128x256_s4_c1": {"TMA": 1, "CLUSTER": 1},
    "s192x256_s4_w1": {"NWG": 3},
    "t256x128_s4_c2": {"TMA": 1, "CLUSTER": 2, "BN": 128, "WG_M": 2},
    # does TMA round to TF32 when the map says TFLOAT32 (data type 11)? packs without rounding;
    # "trunc" (FLOAT32 map) is the unrounded error level to compare with
    "t128x256_c2_tmaround": {"TMA": 1, "CLUSTER": 2, "ROUND": 0, "TMAP_DTYPE": 11},
    "t128x256_c2_trunc": {"TMA": 1, "CLUSTER": 2, "ROUND": 0},
    "s128x256_s4_w0": {"WAIT1": 0},
    "s128x128_s6_w1": {"BN": 128, "STAGES": 6},
    "s256x128_s4_w1": {"BN": 128, "WG_M": 2},
    "s128x128_s3_2cta": {"BN": 128, "STAGES": 3, "MINB": 2},
    "s128x256_s4_g16": {"GROUP_M": 16},
    "n128x256_s4_swap": {"SWIZZLE": 0, "NS_SWAP": 1},
    "s128x256_s4_rna": {"ROUND": 2},
    # screen 2: GROUP_M 16, faster packs (PACK 2), TMA reading A in place (TFLOAT32 map)
    "s128x256_g16_p2": {"GROUP_M": 16, "PACK": 2},
    "s128x256_g32_p2": {"GROUP_M": 32, "PACK": 2},
    "t128x256_c1_g16_direct": {"TMA": 1, "GROUP_M": 16, "PACK": 2, "TMAP_DTYPE": 11, "DIRECT": 1},
    "t128x256_c1_g16_p2": {"TMA": 1, "GROUP_M": 16, "PACK": 2},
    "s192x256_g16_p2": {"NWG": 3, "GROUP_M": 16, "PACK": 2},
    "s256x128_g16_p2": {"BN": 128, "WG_M": 2, "GROUP_M": 16, "PACK": 2},
    "s128x128_s6_g16_p2": {"BN": 128, "STAGES": 6, "GROUP_M": 16, "PACK": 2},
    # the tiles backends/cupy_cuda/wgmma.py's wgmma_fit takes for small products (1024^3)
    "s128x64_g16": {"BN": 64, "GROUP_M": 16},
    "s64x128_g16": {"BN": 128, "NWG": 1, "GROUP_M": 16},
    "s64x64_g16": {"BN": 64, "NWG": 1, "GROUP_M": 16},
    # float16 / bfloat16 by wgmma (benches/probes/wgmma_half.py): which descriptor field takes the
    # B panel stride (8192 bytes) and which the 8-row stride (1024)
    "h16_128x256_g16": {"HALF": 1, "GROUP_M": 16},
    "h16_128x256_g16_swap": {"HALF": 1, "GROUP_M": 16, "HB_LBO": 1024, "HB_SBO": 8192},
    "hbf_128x256_g16": {"HALF": 2, "GROUP_M": 16},
    "hbf_128x256_g16_swap": {"HALF": 2, "GROUP_M": 16, "HB_LBO": 1024, "HB_SBO": 8192},
}
SCREEN = [v for v in VARIANTS if "g16" in v or "g32" in v]  # the default run (screen 2)
SHAPES = [(257, 383, 77), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
          (8192, 8192, 8192), (4095, 4097, 4093), (1000, 3000, 777)]  # fmt: skip
REPS = 12


def dims(d: dict) -> tuple[int, int, int, int]:
    """(BM, BN, threads, dynamic shared bytes) of a define set."""
    bm, tma = 64 * d["WG_M"] * d["NWG"], d.get("TMA", 0)
    smem = d["STAGES"] * ((bm + d["BN"]) * 128 + 16 * tma) + 1024
    return bm, d["BN"], 128 * (d["NWG"] + tma), smem


class Driver:
    """The two driver calls CuPy does not offer, through ctypes: tensor-map encoding and a
    launch whose parameters include 128-byte structs (the maps, passed by value)."""

    def __init__(self) -> None:
        import ctypes as C

        self.C = C
        lib = C.CDLL("libcuda.so.1")
        self.encode = lib.cuTensorMapEncodeTiled
        self.encode.argtypes = [C.c_void_p, C.c_int, C.c_uint32, C.c_void_p,
                                C.POINTER(C.c_uint64), C.POINTER(C.c_uint64),
                                C.POINTER(C.c_uint32), C.POINTER(C.c_uint32),
                                C.c_int, C.c_int, C.c_int, C.c_int]  # fmt: skip
        self.launch = lib.cuLaunchKernel
        self.launch.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3

    def tensor_map(self, ptr: int, rows: int, cols: int, box_rows: int, dtype: int = 7,
                   ld: int = 0):  # fmt: skip
        """A float32 row-major [rows x cols] map, boxes of 32 columns x ``box_rows`` rows,
        128-byte swizzle; a 64-byte aligned 128-byte host buffer (kept alive by the caller)."""
        C = self.C  # noqa: N806
        raw = C.create_string_buffer(192)
        addr = (C.addressof(raw) + 63) & ~63
        dim = (C.c_uint64 * 2)(cols, rows)
        stride = (C.c_uint64 * 1)((ld or cols) * 4)
        box = (C.c_uint32 * 2)(32, box_rows)
        one = (C.c_uint32 * 2)(1, 1)
        # FLOAT32 7 (TFLOAT32 11), interleave none 0, swizzle 128B 3, L2 promotion 256B 3, OOB 0
        rc = self.encode(addr, dtype, 2, ptr, dim, stride, box, one, 0, 3, 3, 0)
        if rc:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {rc}")
        return raw, addr

    def call(self, fn_ptr: int, grid: int, block: int, smem: int, stream: int, args) -> None:
        """``args``: ctypes objects or (buffer, address) maps, in kernel parameter order."""
        C = self.C  # noqa: N806
        ptrs = [a[1] if isinstance(a, tuple) else C.addressof(a) for a in args]
        params = (C.c_void_p * len(ptrs))(*ptrs)
        rc = self.launch(fn_ptr, grid, 1, 1, block, 1, 1, smem, stream, params, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel failed: CUresult {rc}")


def compile_cubin(src: str) -> bytes:
    """NVRTC cubin for sm_90a (cupy's RawModule would add its own -arch=sm_90)."""
    from tiledmm_backends.cupy_cuda.hopper import sm90a_cubin

    return sm90a_cubin(src, "wgmma.cu", ("-ftz=true",))


class Kernel:
    """The three compiled entry points of one variant and the host-side launch."""

    def __init__(self, cp, defs: dict) -> None:
        from cupy.cuda import driver, function

        self.cp, self.defs = cp, defs
        self.bm, self.bn, self.threads, self.smem = dims(defs)
        head = "".join(f"#define {k} {v}\n" for k, v in defs.items())
        src = head + SRC.with_name("sm90_sync.cuh").read_text() + SRC.read_text()
        self.mod = function.Module()
        self.mod.load(compile_cubin(src))
        self.tma = bool(defs.get("TMA"))
        self.cluster = int(defs.get("CLUSTER", 1)) if self.tma else 1
        self.gemm = self.mod.get_function("wgmma_gemm_tma" if self.tma else "wgmma_gemm")
        self.drv = Driver() if self.tma else None
        p2 = "2" if defs.get("PACK", 1) == 2 else ""
        self.pack_a = self.mod.get_function("tf32_pack_a" + p2)
        self.pack_bt = self.mod.get_function("tf32_pack_bt" + p2)
        self.p2 = bool(p2)
        attr = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
        driver.funcSetAttribute(self.gemm.ptr, attr, self.smem)
        self.regs = driver.funcGetAttribute(getattr(driver, "CU_FUNC_ATTRIBUTE_NUM_REGS", 4),
                                            self.gemm.ptr)  # fmt: skip

    def direct(self, x) -> bool:
        """TMA with a TFLOAT32 map reads (and rounds) ``x`` (rows K-major) in place."""
        ok = self.tma and self.defs.get("DIRECT", 0) and self.defs.get("TMAP_DTYPE") == 11
        return bool(ok and x.strides[1] == 4 and x.strides[0] % 16 == 0 and x.data.ptr % 16 == 0)

    def pack(self, a, b):
        """(A operand, B^T operand, kp): each an (array, rows, row stride in floats) K-major."""
        cp = self.cp
        m, k = a.shape
        n = b.shape[1]
        bm = self.bm * self.cluster
        mp, np_, kp = -(-m // bm) * bm, -(-n // self.bn) * self.bn, -(-k // 32) * 32
        i32, i64 = cp.int32, cp.int64
        sa = (i64(a.strides[0] // 4), i64(a.strides[1] // 4))
        sb = (i64(b.strides[0] // 4), i64(b.strides[1] // 4))
        if self.direct(a):
            opa = (a, mp, a.strides[0] // 4)
        else:
            ap = cp.empty((mp, kp), cp.float32)
            if self.p2:
                vec = int(a.strides[1] == 4 and a.strides[0] % 16 == 0 and a.data.ptr % 16 == 0)
                self.pack_a((-(-kp // 512), min(mp, 65535)), (128,),
                            (a, ap, i32(m), i32(k), *sa, i32(mp), i32(kp), i32(vec)))  # fmt: skip
            else:
                q = mp * kp // 4
                self.pack_a(((q + 255) // 256,), (256,),
                            (a, ap, i32(m), i32(k), *sa, i32(mp), i32(kp)))  # fmt: skip
            opa = (ap, mp, kp)
        if self.direct(b.T):
            opb = (b.T, np_, b.strides[1] // 4)
        else:
            bt = cp.empty((np_, kp), cp.float32)
            grid = (np_ // 64, kp // 32) if self.p2 else (np_ // 32, kp // 32)
            self.pack_bt(grid, (32, 8), (b, bt, i32(k), i32(n), *sb, i32(np_), i32(kp)))
            opb = (bt, np_, kp)
        return opa, opb, kp

    def run_packed(self, opa, opb, kp, c) -> None:
        cp = self.cp
        m, n = c.shape
        tm, tn = opa[1] // self.bm, opb[1] // self.bn
        if self.tma:
            C, d = self.drv.C, self.drv  # noqa: N806
            dt = self.defs.get("TMAP_DTYPE", 7)
            (xa, _, lda), (xb, _, ldb) = opa, opb
            # the map's extent is the operand's own (TMA fills zeros past it)
            ma = d.tensor_map(xa.data.ptr, xa.shape[0], xa.shape[1], self.bm, dt, lda)
            mb = d.tensor_map(xb.data.ptr, xb.shape[0], xb.shape[1], self.bn // self.cluster,
                              dt, ldb)  # fmt: skip
            args = (ma, mb, C.c_void_p(c.data.ptr), C.c_int(m), C.c_int(n), C.c_int(kp),
                    C.c_longlong(c.strides[0] // 4), C.c_int(tm), C.c_int(tn))  # fmt: skip
            stream = cp.cuda.get_current_stream().ptr
            d.call(self.gemm.ptr, tm * tn, self.threads, self.smem, stream, args)
            return
        args = (opa[0], opb[0], c, cp.int32(m), cp.int32(n), cp.int32(kp),
                cp.int64(c.strides[0] // 4), cp.int32(tm), cp.int32(tn))  # fmt: skip
        self.gemm((tm * tn,), (self.threads,), args, shared_mem=self.smem)

    def __call__(self, a, b, c) -> None:
        self.run_packed(*self.pack(a, b), c)


def timed(f) -> list[float]:
    """Device seconds of ``REPS`` calls after 2 warm-ups: the CuPy backend's ``timings()``."""
    import tiledmm

    return tiledmm.get_backend("cupy").timings(f, repeat=REPS, warmup=2)


def errors(cp, c, ref) -> tuple[float, float, int]:
    """(normwise relative error, max |error| / max |ref|, NaN count) against float64 ``ref``."""
    nans = int(cp.isnan(c).sum())
    d = c.astype(cp.float64) - ref
    den = float(cp.linalg.norm(ref)) or 1.0
    return float(cp.linalg.norm(d)) / den, float(cp.abs(d).max() / cp.abs(ref).max()), nans


def measure(cp, kern: Kernel, row: dict, seed: int) -> None:
    """Check (and for large shapes time) ``kern`` on one shape; fills ``row``."""
    m, n, k = row["shape"]
    rng = cp.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=cp.float32)
    b = rng.standard_normal((k, n), dtype=cp.float32)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    row["vendor_err"], row["vendor_maxerr"], _ = errors(cp, cp.matmul(a, b), ref)
    c = cp.full((m, n), cp.nan, cp.float32)
    kern(a, b, c)
    cp.cuda.runtime.deviceSynchronize()
    row["err"], row["maxerr"], row["nans"] = errors(cp, c, ref)
    row["ok"] = row["nans"] == 0 and row["err"] <= 3 * row["vendor_err"] + 1e-6
    if not row["ok"] and m * n <= 1 << 20:  # where the wrong entries lie (layout bugs)
        bad = ~(cp.abs(c - ref) <= 1e-2 * cp.abs(ref).max())
        ii, jj = (cp.asnumpy(x) for x in cp.nonzero(bad))
        row["diag"] = {
            "bad_frac": float(bad.mean()),
            "first_bad": [int(ii[0]), int(jj[0])] if len(ii) else [],
            "rows_mod64": [int((ii % 64 == r).sum()) for r in range(64)],
            "cols_mod32": [int((jj % 32 == q).sum()) for q in range(32)],
            "ratio_sample": [float(x) for x in cp.asnumpy((c / ref)[bad][:6])],
        }
    del ref
    if m * n * k < 1 << 30:
        return
    fl = 2.0 * m * n * k
    vt = statistics.median(timed(lambda: cp.matmul(a, b)))
    tt = statistics.median(timed(lambda: kern(a, b, c)))
    packed = kern.pack(a, b)
    gt = statistics.median(timed(lambda: kern.run_packed(*packed, c)))
    row["pack_ms"] = statistics.median(timed(lambda: kern.pack(a, b))) * 1e3
    row.update(vendor_tflops=fl / vt / 1e12, tflops=fl / tt / 1e12, gemm_tflops=fl / gt / 1e12,
               frac=vt / tt, gemm_frac=vt / gt)  # fmt: skip


def child(name: str, defs: dict, shapes) -> None:
    """Build one variant and emit one JSON line per shape (``ROW {...}``) on stdout."""
    import cupy as cp

    t0 = time.monotonic()
    half = None
    if defs.get("HALF"):  # the float16 / bfloat16 experiment (benches/probes/wgmma_half.py)
        import wgmma_half as half

        shapes = half.SHAPES
    try:
        kern = half.build(cp, defs) if half else Kernel(cp, defs)
    except Exception as exc:  # noqa: BLE001 - report the build failure, no rows
        print("ROW " + json.dumps({"variant": name, "error": f"build: {exc}"[-1500:]}), flush=True)
        return
    build = {"regs": kern.regs, "smem": kern.smem, "build_s": round(time.monotonic() - t0, 2)}
    for si, shape in enumerate(shapes):
        row = {"variant": name, "shape": list(shape), "defines": defs, **build}
        try:
            if half:
                half.measure(cp, kern, row, 1000 + si, errors, timed)
            else:
                measure(cp, kern, row, 1000 + si)
        except Exception as exc:  # noqa: BLE001 - a fault: report it, stop this variant
            row["error"] = str(exc)[-1500:]
            print("ROW " + json.dumps(row), flush=True)
            return
        print("ROW " + json.dumps(row), flush=True)


def fmt(r: dict) -> str:
    if "shape" not in r:
        return f"{r['variant']:<20} BUILD FAILED: {r.get('error', '')[:300]}"
    s = f"{r['variant']:<20} {'x'.join(map(str, r['shape'])):<16}"
    if "err" not in r:
        return s + f" FAILED: {r.get('error', '')[:300]}"
    s += (f" {'ok   ' if r['ok'] else 'WRONG'} err {r['err']:.2e} (cuBLAS {r['vendor_err']:.2e})"
          f" max {r['maxerr']:.1e} nans {r['nans']}")  # fmt: skip
    if "pack_ms" in r:
        s += f" pack {r['pack_ms']:.3f} ms"
    if "tflops" in r:
        s += (f" | {r['tflops']:6.1f} TF/s = {r['frac']:.2f} of cuBLAS {r['vendor_tflops']:.0f};"
              f" GEMM only {r['gemm_tflops']:6.1f} = {r['gemm_frac']:.2f}")  # fmt: skip
    if "diag" in r:
        s += f" | bad {r['diag']['bad_frac']:.3f} first {r['diag']['first_bad']}"
    if "error" in r:
        s += f" FAILED: {r['error'][:300]}"
    return s + f"  [{r['regs']} regs, {r['smem']} B smem]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--variants", default="", help="comma-separated names, or 'all' "
                   "(default: this screen's)")  # fmt: skip
    p.add_argument("--shapes", default="", help="m,n,k;m,n,k (default: the screen's)")
    p.add_argument("--budget", type=float, default=110.0, help="seconds for the whole screen")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--defines", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";") if s]
    if args.child:
        child(args.child, json.loads(args.defines), shapes)
        return 0
    names = [v for v in args.variants.split(",") if v] or SCREEN
    if names == ["all"]:
        names = list(VARIANTS)
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    try:
        import cupy as cp

        dev = cp.cuda.runtime.getDeviceProperties(0)
        print(f"{dev['name'].decode()} cc {dev['major']}.{dev['minor']}, cupy {cp.__version__},"
              f" CUPY_TF32={os.environ.get('CUPY_TF32')}", flush=True)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the children will say more
        print(f"no device info: {exc}", flush=True)
    t0 = time.monotonic()
    rows: list[dict] = []
    for name in names:
        left = args.budget - (time.monotonic() - t0)
        if left < 8:
            print(f"budget spent: {name} not run", flush=True)
            rows.append({"variant": name, "error": "not run: budget"})
            continue
        defs = {**BASE, **VARIANTS[name]}
        cmd = [sys.executable, __file__, "--child", name, "--defines", json.dumps(defs)]
        cmd += ["--shapes", ";".join(",".join(map(str, s)) for s in shapes)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=min(left, 30))
            out, tail = res.stdout, " | ".join((res.stderr or "").strip().splitlines()[-3:])
        except subprocess.TimeoutExpired as exc:
            so = exc.stdout or ""
            out, tail = so.decode() if isinstance(so, bytes) else so, "timeout"
        got = [json.loads(ln[4:]) for ln in out.splitlines() if ln.startswith("ROW ")]
        if not got:
            got = [{"variant": name, "error": f"no result: {tail}"}]
        for r in got:
            print(f"[{time.monotonic() - t0:6.1f}s] {fmt(r)}", flush=True)
        full = len(shapes) if not defs.get("HALF") else 6
        if len(got) < full and "shape" in got[-1] and "error" not in got[-1]:
            print(f"   {name}: child stopped early: {tail}", flush=True)
        rows += got
    print("\nbest correct variant per shape (whole product incl. TF32 packing):")
    for s in shapes:
        ok = [r for r in rows if r.get("shape") == list(s) and r.get("ok") and "tflops" in r]
        if ok:
            r = max(ok, key=lambda r: r["tflops"])
            print(
                f"  {'x'.join(map(str, s)):<16} {r['variant']:<20} {r['tflops']:6.1f} TFLOP/s"
                f" = {r['frac']:.2f} of cuBLAS TF32 ({r['gemm_frac']:.2f} GEMM alone)"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
        print(f"wrote {args.out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
