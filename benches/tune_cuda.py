"""Tune the CuPy GEMM kernels on the current GPU and measure the OpenCL port on it.

One command does the whole device session (correctness first, then the sweep):

    python benches/tune_cuda.py --out DIR [--budget SECONDS]

It checks every family on odd shapes (CuPy, and OpenCL when an OpenCL GPU is visible), sweeps
register/tiled/naive tiles at 4096^3 against cuBLAS (``cupy.matmul``, FP32, TF32 off) measured
in the same run with CUDA events, re-measures the best at 2048^3 and 8192^3, and writes
``DIR/h200-cuda-tuning.json`` (raw rows + machine info) and ``DIR/geometry-proposal.json`` (the
winners as entries of the geometry database, ``backends/kernels/geometry.json``). The per-call
cost at 64^3 is ``benches/dispatch_overhead.py``'s (``--profile`` for a breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import tiledmm
from tiledmm import Geometry, make_plan
from tiledmm.accuracy import rel_error

SHAPES = [(37, 53, 29), (1, 7, 3), (7, 1, 5), (64, 64, 64), (5, 6, 0), (130, 257, 131),
          (1000, 300, 77), (129, 127, 1031)]  # fmt: skip
REG32 = [  # (BM, BN, BK, TM, TN)
    (128, 128, 8, 8, 8), (128, 128, 16, 8, 8), (128, 64, 8, 8, 8), (64, 128, 8, 8, 8),
    (128, 128, 8, 8, 4), (128, 128, 16, 8, 4), (256, 128, 8, 8, 8), (128, 256, 8, 8, 8),
    (256, 128, 16, 8, 8), (128, 256, 16, 8, 8), (64, 64, 8, 4, 4), (64, 64, 16, 8, 8),
    (128, 64, 16, 8, 4), (64, 128, 16, 4, 8),
]  # fmt: skip
REG64 = [(64, 64, 8, 4, 4), (64, 64, 16, 4, 4), (128, 64, 8, 8, 4), (64, 128, 8, 4, 8),
         (128, 128, 8, 8, 8)]  # fmt: skip
TILED = [((16, 16, 16), 0), ((16, 16, 16), 1), ((32, 32, 32), 0), ((32, 32, 32), 1),
         ((32, 32, 16), 1), ((16, 16, 32), 1), ((32, 32, 64), 1), ((16, 64, 16), 1)]  # fmt: skip
NAIVE = [(4, 64), (8, 32), (16, 16), (2, 128), (1, 256), (8, 64)]


class Bench:
    def __init__(self, budget: float) -> None:
        import cupy as cp

        self.cp, self.t0, self.budget = cp, time.time(), budget
        self.be = tiledmm.get_backend("cupy")
        self.dev = self.be.device()
        self.rows: list[dict] = []
        self.data: dict = {}

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def operands(self, n: int, dtype: str):
        key = (n, dtype)
        if key not in self.data:
            cp = self.cp
            rs = cp.random.RandomState(1)
            a = rs.standard_normal((n, n), dtype=np.float64)
            b = rs.standard_normal((n, n), dtype=np.float64)
            ref = a @ b
            self.data[key] = (a.astype(dtype), b.astype(dtype), ref, cp.empty((n, n), dtype))
        return self.data[key]

    def time(self, fn, n: int, be=None) -> float:
        reps = 20 if n <= 2048 else 10 if n <= 4096 else 5
        return statistics.median((be or self.be).timings(fn, repeat=reps, warmup=2))

    def vendor(self, n: int, dtype: str) -> float:
        key = ("vendor", n, dtype)
        if key not in self.data:
            a, b, _, _ = self.operands(n, dtype)
            self.data[key] = 2 * n**3 / self.time(lambda: self.cp.matmul(a, b), n) / 1e9
        return self.data[key]

    def measure(self, kernel, dtype, n, bt, tt=(1, 1), opts=(), backend=None, tag="sweep"):
        be = backend or self.be
        row = dict(backend=be.name, kernel=kernel, dtype=dtype, m=n, n=n, k=n, block_tile=bt,
                   thread_tile=tt, options=dict(opts), tag=tag)  # fmt: skip
        try:
            geo = Geometry(tuple(bt), tuple(tt), tuple(sorted(dict(opts).items())))
            dev = be.device()
            plan = make_plan(n, n, n, dtype=dtype, kernel=kernel, device=dev, geometry=geo)
            if be is self.be:
                a, b, ref, c = self.operands(n, dtype)
                fn = self.be.function(plan, True)
                row["registers"] = getattr(fn, "num_regs", None)
                row["local_bytes"] = getattr(fn, "local_size_bytes", None)
            else:
                a0, b0, ref, _ = self.operands(n, dtype)
                a, b = be.asarray(a0.get(), np.dtype(dtype)), be.asarray(b0.get(), np.dtype(dtype))
                c = be.empty((n, n), np.dtype(dtype))
            if be is self.be:
                c.fill(np.nan)  # poison: unwritten elements show as NaN
            be.run(plan, a, b, c)
            be.synchronize()
            cc = c if be is self.be else self.cp.asarray(c.get())
            row["rel_error"] = float(self.cp.linalg.norm(cc - ref) / self.cp.linalg.norm(ref))
            t = self.time(lambda: be.run(plan, a, b, c), n, be)
            row["seconds"], row["gflops"] = t, 2 * n**3 / t / 1e9
            row["vendor_gflops"] = self.vendor(n, dtype)
            row["ratio"] = row["gflops"] / row["vendor_gflops"]
            row["predicted_seconds"], row["intensity"] = plan.predicted_seconds, plan.intensity
        except Exception as exc:  # noqa: BLE001 - a config that fails is a result too
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        self.rows.append(row)
        print(_fmt(row), flush=True)
        return row


def _fmt(r: dict) -> str:
    what = f"{r['backend']:6} {r['kernel']:8} {r['dtype']} {r['m']:5} {r['block_tile']} {r['thread_tile']} {r['options']}"  # noqa: E501
    if "error" in r:
        return f"{what}  ERROR {r['error'][:120]}"
    return f"{what}  {r['gflops'] / 1e3:6.2f} TF/s  {r['ratio']:.3f} of vendor  err {r['rel_error']:.1e}  regs {r.get('registers')}"  # noqa: E501


def correctness(backend_name: str) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    be = tiledmm.get_backend(backend_name)
    for dtype in be.dtypes:
        for fam in be.kernels:
            worst = 0.0
            for m, n, k in SHAPES:
                a = rng.standard_normal((m, k)).astype(dtype)
                b = rng.standard_normal((k, n)).astype(dtype)
                A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
                c = be.to_numpy(tiledmm.matmul(A.T.T, B, backend=backend_name, kernel=fam))
                ct = be.to_numpy(tiledmm.matmul(b.T, a.T, backend=backend_name, kernel=fam))
                ref = a.astype(np.float64) @ b.astype(np.float64)
                worst = max(worst, rel_error(c, ref), rel_error(ct, ref.T))
            out.append(dict(backend=backend_name, dtype=dtype, kernel=fam, worst_rel_error=worst))
            print(f"correct {backend_name} {dtype} {fam}: worst rel error {worst:.2e}", flush=True)
    return out


def best(rows, **match) -> dict | None:
    ok = [r for r in rows if "error" not in r and r["rel_error"] < 1e-4
          and all(r.get(k) == v for k, v in match.items())]  # fmt: skip
    return max(ok, key=lambda r: r["gflops"], default=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benches/results")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the sweep")
    ap.add_argument("--focus", action="store_true", help="second pass: ladder steps + finals")
    args = ap.parse_args()
    if args.focus:
        return focus(Path(args.out), Bench(args.budget))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.budget)
    cp = bench.cp
    result: dict = {"machine_info": _machine(bench), "rows": bench.rows}

    def save() -> None:
        (out / "h200-cuda-tuning.json").write_text(json.dumps(result, indent=1, default=str))

    try:
        result["correctness"] = correctness("cupy")
    except Exception as exc:  # noqa: BLE001
        result["correctness"] = f"FAILED {type(exc).__name__}: {exc}"
        print(result["correctness"], flush=True)
    save()
    n = 4096
    for bm, bn, bk, tm, tn in REG32:
        opts = dict(vm=min(4, tm), vn=min(4, tn), pad=4, group_m=8)
        bench.measure("register", "float32", n, (bm, bn, bk), (tm, tn), opts)
    save()
    ranked = sorted((r for r in bench.rows if "error" not in r), key=lambda r: -r["gflops"])[:3]
    for r in ranked:
        tm, tn = r["thread_tile"]
        for vm, vn, pad, g in [(4, 4, 0, 8), (tm, tn, 4, 8), (tm, tn, 0, 8), (4, 4, 4, 1),
                               (4, 4, 4, 16), (1, 1, 0, 8)]:  # fmt: skip
            if bench.left() > 150:
                opts = dict(vm=vm, vn=vn, pad=pad, group_m=g)
                bench.measure("register", "float32", n, r["block_tile"], r["thread_tile"], opts)
    save()
    for bt, vec in TILED:
        bench.measure("tiled", "float32", n, bt, opts=dict(vec_smem=vec))
    for bm, bn in NAIVE:
        bench.measure("naive", "float32", n, (bm, bn, 1))
    save()
    for bm, bn, bk, tm, tn in REG64:
        if bench.left() > 90:
            opts = dict(vm=2, vn=2, pad=2, group_m=8)
            bench.measure("register", "float64", n, (bm, bn, bk), (tm, tn), opts)
    for bt in ((16, 16, 16), (32, 32, 16)):
        bench.measure("tiled", "float64", n, bt, opts=dict(vec_smem=1))
    bench.measure("naive", "float64", n, (4, 64, 1))
    save()
    winners = {}
    for dtype in ("float32", "float64"):
        for fam in ("register", "tiled", "naive"):
            w = best(bench.rows, kernel=fam, dtype=dtype, m=n, tag="sweep")
            if w:
                winners[(dtype, fam)] = w
    w = winners.get(("float32", "register"))
    if w:
        for size in (2048, 8192):
            bench.measure("register", "float32", size, w["block_tile"], w["thread_tile"],
                          w["options"], tag="final")  # fmt: skip
    save()
    result["opencl"] = opencl_on_gpu(bench, w)
    result["geometry_proposal"] = proposal(bench, winners)
    (out / "geometry-proposal.json").write_text(json.dumps(result["geometry_proposal"], indent=1))
    save()
    summary(bench, winners)
    del cp


FOCUS = [  # (block, thread, options): run 1's winner and the ladder steps tried on top of it
    ((128, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1)),
    ((128, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2)),
    ((128, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2, min_blocks=2)),
    ((128, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, min_blocks=2)),
    ((128, 128, 8), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2)),
    ((128, 128, 8), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2, min_blocks=2)),
    ((128, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=4)),
    ((128, 64, 16), (8, 4), dict(vm=4, vn=4, pad=4, group_m=8, stages=2)),
    ((128, 256, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2)),
    ((256, 128, 16), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1, stages=2)),
    ((128, 128, 32), (8, 8), dict(vm=4, vn=4, pad=4, group_m=1)),
]
TILED2 = [(16, 16, 32), (16, 16, 64), (8, 32, 32), (32, 8, 32), (16, 32, 32), (32, 16, 32)]


def odd_shapes(bench: Bench, be, bt, tt, opts) -> float:
    """Worst relative error of one register geometry on odd shapes (poisoned outputs)."""
    worst, rng = 0.0, np.random.default_rng(3)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        geo = Geometry(bt, tt, tuple(sorted(opts.items())))
        plan = make_plan(m, n, k, dtype="float32", kernel="register", device=be.device(),
                         geometry=geo)  # fmt: skip
        A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        C = be.empty((m, n), np.dtype(np.float32))
        C.fill(np.nan)
        be.run(plan, A, B, C)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        worst = max(worst, rel_error(be.to_numpy(C), ref))
    return worst


def focus(out: Path, bench: Bench) -> None:
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine_info": _machine(bench), "rows": bench.rows, "odd_shapes": []}

    def save() -> None:
        (out / "h200-cuda-focus.json").write_text(json.dumps(result, indent=1, default=str))

    for bt, tt, o in FOCUS:
        r = bench.measure("register", "float32", 4096, bt, tt, o)
        if "error" not in r:
            r["odd_shape_error"] = odd_shapes(bench, bench.be, bt, tt, o)
            print(f"   odd shapes worst rel error {r['odd_shape_error']:.2e}", flush=True)
    save()
    for bt in TILED2:
        bench.measure("tiled", "float32", 4096, bt, opts=dict(vec_smem=1))
    save()
    ok = [r for r in bench.rows if r["kernel"] == "register" and "error" not in r
          and r.get("odd_shape_error", 1) < 1e-5 and r["rel_error"] < 1e-4]  # fmt: skip
    w = max(ok, key=lambda r: r["gflops"], default=None) or dict(
        block_tile=FOCUS[0][0], thread_tile=FOCUS[0][1], options=FOCUS[0][2]
    )
    for size in (2048, 4096, 8192):
        bench.measure("register", "float32", size, w["block_tile"], w["thread_tile"],
                      w["options"], tag="final")  # fmt: skip
    t = best(bench.rows, kernel="tiled") or dict(block_tile=(16, 16, 32), options={})
    bench.measure("tiled", "float32", 4096, t["block_tile"], opts=t["options"], tag="final")
    save()
    os.environ.setdefault("TILEDMM_OPENCL_DEVICE", "NVIDIA")
    try:
        cl = tiledmm.get_backend("opencl")
        for bt, tt, o in (FOCUS[0], FOCUS[1], (w["block_tile"], w["thread_tile"], w["options"])):
            r = bench.measure("register", "float32", 4096, bt, tt, o, backend=cl, tag="opencl")
            if "error" not in r:
                r["odd_shape_error"] = odd_shapes(bench, cl, bt, tt, o)
        bench.measure("tiled", "float32", 4096, t["block_tile"], opts=t["options"], backend=cl,
                      tag="opencl")  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        result["opencl"] = f"FAILED {type(exc).__name__}: {exc}"
    save()
    print("\n=== focus summary (median, CUDA events / OpenCL finish; vendor = cupy.matmul) ===")
    for r in bench.rows:
        print(_fmt(r), f"odd {r.get('odd_shape_error', float('nan')):.1e}", r["tag"])


def opencl_on_gpu(bench: Bench, reg) -> dict:
    os.environ.setdefault("TILEDMM_OPENCL_DEVICE", "NVIDIA")
    info: dict = {}
    try:
        be = tiledmm.get_backend("opencl")
        reason = be.unavailable_reason()
        if reason:
            return {"unavailable": reason}
        info["device"] = be.device().name
        info["correctness"] = correctness("opencl")
        for fam in ("naive", "tiled", "register"):
            g = be.geometry(fam, "float32", be.device())
            bench.measure(fam, "float32", 4096, g.block_tile, g.thread_tile, g.options,
                          backend=be, tag="opencl-default")  # fmt: skip
        if reg:
            bench.measure("register", "float32", 4096, reg["block_tile"], reg["thread_tile"],
                          reg["options"], backend=be, tag="opencl-cupy-best")  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"{type(exc).__name__}: {exc}"
    print(f"opencl: {info}", flush=True)
    return info


def proposal(bench: Bench, winners: dict) -> dict:
    """The winners as geometry-database entries (``backends/kernels/geometry.json``)."""
    name, day = bench.dev.name, time.strftime("%Y-%m-%d")
    entries = []
    for (dtype, fam), r in winners.items():
        entries.append(dict(
            kernels="gemm-c", device=name, dtype=dtype, family=fam, block_tile=r["block_tile"],
            thread_tile=r["thread_tile"], options=r["options"],
            source=f"tuned on {name} at 4096^3, {r['ratio']:.2f} of cuBLAS ({day})",
            measured=[dict(backend="cupy", shape=[r["m"], r["n"], r["k"]],
                           gflops=round(r["gflops"]), of_vendor=round(r["ratio"], 3), date=day)],
        ))  # fmt: skip
    return {"entries": entries}


def summary(bench: Bench, winners: dict) -> None:
    print("\n=== summary (median, CUDA events; vendor = cupy.matmul in the same run) ===")
    for r in bench.rows:
        if r.get("tag") != "sweep" and "error" not in r:
            print(_fmt(r))
    for _key, r in sorted(winners.items()):
        print("BEST", _fmt(r))


def _machine(bench: Bench) -> dict:
    cp = bench.cp
    rt = cp.cuda.runtime
    return dict(
        gpu=bench.dev.name, driver=rt.driverGetVersion(), runtime=rt.runtimeGetVersion(),
        cupy=cp.__version__, numpy=np.__version__, python=platform.python_version(),
        host=platform.node(), cpu=platform.processor(), tf32=os.environ.get("CUPY_TF32", "0"),
        date=time.strftime("%Y-%m-%dT%H:%M:%S"), device_spec=bench.dev.to_dict(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
