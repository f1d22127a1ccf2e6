"""The Hopper float16 / bfloat16 GEMM (issue 38, ``kernels/hopper_gemm.cu``): correctness and
speed beside cuBLAS (``torch.matmul``) in the same process, and the library's paths.

    python -m benches.probes.hopper16 [--variants L,Lc2,...] [--dtypes float16,bfloat16]
        [--shapes 4096,4096,4096:8192,8192,8192] [--library] [--json out.json]

Each variant runs in its own child process (a kernel that traps cannot take the others down):
first the correctness check on odd shapes (float32 reference from torch with TF32 off,
NaN-poisoned output; cuBLAS's error on the same data beside it), then, when correct, the timing
sweep: CUDA-event medians after warm-up, cuBLAS timed on the same arrays in alternating rounds.
``--library``: also ``tiledmm.matmul`` on torch tensors with the new kernel
(``TILEDMM_HOPPER16=1``) and with the ``mma.sync`` path (``=0``), host side included (the switch
is read when a product is planned: the caches are cleared after each change).
The table printed last has each shape's fraction of cuBLAS; ``--json`` keeps every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

#: variant name -> configuration (``hopper.CONFIGS`` fields; group_m is a launch argument)
VARIANTS = {
    "L": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16),
    "Lg8": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=8),
    "Lc2": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=2, group_m=16),
    "Ls3": dict(bm=128, bn=256, cm=2, cn=1, stages=3, cluster=1, group_m=16),
    "Lw0": dict(bm=128, bn=256, cm=2, cn=1, stages=4, cluster=1, group_m=16, wait1=0),
    "Le": dict(bm=128, bn=256, cm=2, cn=1, stages=3, cluster=1, group_m=16, epi=1),
    "Lec2": dict(bm=128, bn=256, cm=2, cn=1, stages=3, cluster=2, group_m=16, epi=1),
    "Te": dict(bm=256, bn=128, cm=2, cn=1, stages=3, cluster=1, group_m=16, epi=1),
    "T": dict(bm=256, bn=128, cm=2, cn=1, stages=4, cluster=1, group_m=16),
    "Tc2": dict(bm=256, bn=128, cm=2, cn=1, stages=4, cluster=2, group_m=16),
    "M": dict(bm=128, bn=128, cm=2, cn=1, stages=6, cluster=1, group_m=16),
    "D": dict(bm=64, bn=128, cm=1, cn=2, stages=8, cluster=1, group_m=1),
    "D2": dict(bm=64, bn=256, cm=1, cn=2, stages=5, cluster=1, group_m=1),
}
CHECK = [(1000, 3000, 777), (4095, 4095, 4095), (3000, 5000, 1000), (17, 33, 65), (1, 1, 1),
         (8, 14336, 4096), (129, 257, 63), (300, 200, 8)]  # fmt: skip
SHAPES = [(4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192), (2048, 6144, 4096),
          (2048, 14336, 4096), (2048, 4096, 14336), (3000, 5000, 1000), (4095, 4095, 4095),
          (8, 14336, 4096)]  # fmt: skip


def _words(torch, cp, t):
    """A CuPy uint16 view over a 16-bit CUDA tensor's memory."""
    return cp.asarray(t.view(torch.int16)).view(cp.uint16)


def _time(torch, fn, target_ms: float = 25.0, rounds: int = 5) -> float:
    """Median seconds per call (CUDA events around batches of calls, after warm-up)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    reps = max(1, min(200, int(target_ms / max(e0.elapsed_time(e1), 1e-3))))
    out = []
    for _ in range(rounds):
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) / reps / 1e3)
    return statistics.median(out)


def _library(torch, a, b, v: float) -> dict:
    """``tiledmm.matmul`` on the tensors with the new kernel and with today's path."""
    import tiledmm
    from tiledmm.core.dispatch import clear_caches

    lib = {}
    for flag in ("1", "0"):
        os.environ["TILEDMM_HOPPER16"] = flag
        clear_caches()  # the switch is read when a product is planned; plans are cached
        got = tiledmm.matmul(a, b)
        ref = torch.matmul(a, b).float()
        lib["err" + flag] = ((got.float() - ref).norm() / ref.norm()).item()
        lib[flag] = _time(torch, lambda a=a, b=b: tiledmm.matmul(a, b))
    os.environ["TILEDMM_HOPPER16"] = "1"
    clear_caches()
    return dict(library_seconds=lib["1"], library_of_vendor=v / lib["1"],
                mma_sync_seconds=lib["0"], mma_sync_of_vendor=v / lib["0"],
                library_vs_cublas_diff=lib["err1"], mma_sync_vs_cublas_diff=lib["err0"])


def child(name: str, dtypes: list[str], shapes: list, library: bool) -> dict:
    """Check and time one variant (in this process); the record for the JSON."""
    import cupy as cp
    import torch
    from tiledmm_backends.cupy_cuda import hopper

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    cfg = VARIANTS[name]
    rec = {"variant": name, "config": cfg, "card": torch.cuda.get_device_name(), "checks": [],
           "times": []}  # fmt: skip
    t0 = time.time()
    for dt in dtypes:
        tdt = getattr(torch, dt)
        plan = types.SimpleNamespace(dtype=dt, options={}, m=0)

        def ours(a, b, c, plan=plan):
            hopper.run(cp, plan, _words(torch, cp, a), _words(torch, cp, b),
                       _words(torch, cp, c), cfg=cfg)  # fmt: skip

        rec["build_s"] = time.time() - t0
        ok = True
        for m, n, k in CHECK:
            a = torch.randn(m, k, device="cuda", dtype=torch.float32).to(tdt)
            b = torch.randn(k, n, device="cuda", dtype=torch.float32).to(tdt)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            ours(a, b, c)
            ref = a.float() @ b.float()
            v = torch.matmul(a, b).float()
            nrm = ref.norm().item() or 1.0
            err = (c.float() - ref).norm().item() / nrm
            verr = (v - ref).norm().item() / nrm
            good = bool(torch.isfinite(c).all().item()) and err <= 2 * verr + 1e-3
            ok &= good
            rec["checks"].append(dict(dtype=dt, m=m, n=n, k=k, rel_error=err,
                                      vendor_rel_error=verr, ok=good))  # fmt: skip
            print(f"[{name}] check {dt} {m}x{n}x{k}: error {err:.2e} (cuBLAS {verr:.2e})"
                  f" {'ok' if good else 'WRONG'}", flush=True)  # fmt: skip
        if not ok:
            rec["wrong"] = True
            continue
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=torch.float32).to(tdt)
            b = torch.randn(k, n, device="cuda", dtype=torch.float32).to(tdt)
            c = torch.empty((m, n), device="cuda", dtype=tdt)
            cw = (_words(torch, cp, a), _words(torch, cp, b), _words(torch, cp, c))

            def go(cw=cw, plan=plan):
                hopper.run(cp, plan, *cw, cfg=cfg)

            def vendor(a=a, b=b, c=c):
                torch.matmul(a, b, out=c)

            ts, vs = [], []
            for r in range(3):  # alternate the order
                if r % 2:
                    vs.append(_time(torch, vendor))
                    ts.append(_time(torch, go))
                else:
                    ts.append(_time(torch, go))
                    vs.append(_time(torch, vendor))
            t, v = statistics.median(ts), statistics.median(vs)
            row = dict(dtype=dt, m=m, n=n, k=k, seconds=t, vendor_seconds=v,
                       tflops=2 * m * n * k / t / 1e12, vendor_tflops=2 * m * n * k / v / 1e12,
                       of_vendor=v / t)  # fmt: skip
            if library:
                try:
                    row.update(_library(torch, a, b, v))
                except Exception as exc:  # noqa: BLE001 - keep the kernel's numbers
                    print(f"[{name}] library path failed: {exc!r}", flush=True)
                    library = False
            rec["times"].append(row)
            extra = (f"  library {row['library_of_vendor']:.3f}  mma.sync "
                     f"{row['mma_sync_of_vendor']:.3f}") if library else ""  # fmt: skip
            print(f"[{name}] {dt} {m}x{n}x{k}: {row['tflops']:.1f} TFLOP/s, cuBLAS "
                  f"{row['vendor_tflops']:.1f}: {row['of_vendor']:.3f}{extra}", flush=True)
            del a, b, c, cw
            torch.cuda.empty_cache()
    return rec


def _shapes(text: str) -> list:
    return [tuple(int(x) for x in s.split(",")) for s in text.split(":") if s]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="L")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--shapes", default=":".join(",".join(map(str, s)) for s in SHAPES))
    ap.add_argument("--variant-shapes", default="", help="NAME=shapes;NAME=shapes overrides")
    ap.add_argument("--library", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", default="")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args(argv)
    dtypes = args.dtypes.split(",")
    if args.child:
        rec = child(args.child, dtypes, _shapes(args.shapes), args.library)
        print("RESULT " + json.dumps(rec), flush=True)
        return 0
    per = dict(x.split("=", 1) for x in args.variant_shapes.split(";") if x)
    recs = []
    for name in args.variants.split(","):
        cmd = [sys.executable, "-m", "benches.probes.hopper16", "--child", name,
               "--dtypes", args.dtypes, "--shapes", per.get(name, args.shapes)]
        cmd += ["--library"] if args.library else []
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            out, rc = p.stdout, p.returncode
            err = p.stderr
        except subprocess.TimeoutExpired as exc:
            out, rc, err = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (
                exc.stdout or ""), "timeout", ""
        for line in out.splitlines():
            if line.startswith("RESULT "):
                recs.append(json.loads(line[7:]))
            else:
                print(line)
        if rc != 0:
            print(f"[{name}] child failed ({rc}): {err[-1500:]}")
            recs.append({"variant": name, "failed": str(rc), "stderr": err[-1500:]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tiledmm": {"bench": "benches/probes/hopper16.py", "records": recs}}, f,
                      indent=1)
    print("\nvariant  dtype     shape               TFLOP/s  cuBLAS  of cuBLAS  library  mma.sync")
    for r in recs:
        for t in r.get("times", []):
            lib = (f"{t['library_of_vendor']:8.3f} {t['mma_sync_of_vendor']:8.3f}"
                   if "library_of_vendor" in t else "")  # fmt: skip
            print(f"{r['variant']:8} {t['dtype']:9} {t['m']}x{t['n']}x{t['k']:<10} "
                  f"{t['tflops']:7.1f} {t['vendor_tflops']:7.1f} {t['of_vendor']:9.3f} {lib}")
        if r.get("wrong") or r.get("failed"):
            print(f"{r['variant']:8} WRONG/FAILED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
