"""Candidate GPU defaults of the float32 register family, as users call it: tiledmm.matmul
(kernel "register") on CuPy arrays, cuBLAS (cupy.matmul, CUPY_TF32=0) in the same process.

    for v in cur cur_mt s2k16 s2k16g1 s2k8; do python -m benches.probes.register_defaults $v; done

One variant per process: a fresh ``TILEDMM_CACHE_DIR`` whose user database holds the variant's
tiles for the square, odd and batched classes (first use off, shipped tables ignored). Each
shape is checked against a float64 product, then timed in three rounds of CUDA-event medians
(ours, then cuBLAS; the best round of each); prints one ``JSON {...}`` line (fraction of
cuBLAS per shape). Session 21: benches/data/h100-fp32-defaults-s21.json.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

BASE = {"use_local": 1, "vm": 4, "vn": 4, "pad": 4}
VARIANTS = {  # name: (block tile, options beside BASE); thread tile 8x8
    "cur": ((128, 128, 8), {"group_m": 8}),
    "cur_mt": ((128, 128, 8), {"group_m": 8, "min_tile": 32}),
    "s2k16": ((128, 128, 16), {"group_m": 8, "stages": 2, "min_tile": 32}),
    "s2k16g1": ((128, 128, 16), {"group_m": 1, "stages": 2, "min_tile": 32}),
    "s2k8": ((128, 128, 8), {"group_m": 8, "stages": 2, "min_tile": 32}),
}
SHAPES = [(1, 1024, 1024, 1024), (1, 2048, 2048, 2048), (1, 4096, 4096, 4096),
          (1, 8192, 8192, 8192), (1, 4095, 4095, 4095), (1, 1000, 3000, 777),
          (1, 257, 4097, 1031), (1, 3072, 3072, 3072), (32, 512, 512, 512),
          (8, 1024, 1024, 1024)]  # fmt: skip


def _database(device: str, block_tile, options: dict) -> None:
    """A fresh cache folder (``TILEDMM_CACHE_DIR``) whose tuning database holds these tiles for
    three classes."""
    folder = Path(tempfile.mkdtemp())
    os.environ["TILEDMM_CACHE_DIR"] = str(folder)
    from tiledmm.core import tuning

    entries = [{"device": device, "vendor": "NVIDIA", "kind": "gpu", "backend": "cupy",
                "dtype": "float32", "family": "register", "shape_class": c,
                "block_tile": list(block_tile), "thread_tile": [8, 8],
                "options": BASE | options,
                "measured": {"gflops": 1.0, "date": "2026-12-07T00:00:00"}}
               for c in ("square", "odd", "batched")]  # fmt: skip
    tuning.write(folder / "tuning.json", entries)


def _seconds(cp, fn, reps: int) -> float:
    """Median CUDA-event seconds of one call, after two warm-up calls."""
    s, e = cp.cuda.Event(), cp.cuda.Event()
    fn()
    fn()
    out = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(cp.cuda.get_elapsed_time(s, e) * 1e-3)
    return statistics.median(out)


def main(name: str) -> dict:
    os.environ.update(CUPY_TF32="0", TILEDMM_FIRST_USE_TUNING="0",
                      TILEDMM_IGNORE_SHIPPED_TUNING="1")  # fmt: skip
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    _database(device, *VARIANTS[name])
    import tiledmm

    rng, rows = cp.random.default_rng(0), []
    for b, m, n, k in SHAPES:
        lead = (b,) if b > 1 else ()
        a = rng.standard_normal((*lead, m, k), dtype=cp.float32)
        bb = rng.standard_normal((*lead, k, n), dtype=cp.float32)
        c = tiledmm.matmul(a, bb, backend="cupy", kernel="register")
        ref = cp.matmul(a.astype(cp.float64), bb.astype(cp.float64))
        err = float(cp.abs(c - ref).max() / cp.abs(ref).max())
        reps = max(5, min(50, int(0.3 / max(2.0 * b * m * n * k / 40e12, 1e-6))))
        ours, vendor = [], []
        for _ in range(3):  # rounds: ours, then cuBLAS; the best round of each
            ours.append(
                _seconds(
                    cp,
                    lambda x=a, y=bb: tiledmm.matmul(x, y, backend="cupy", kernel="register"),
                    reps,
                )
            )
            vendor.append(_seconds(cp, lambda x=a, y=bb: cp.matmul(x, y), reps))
        rows.append({"shape": [b, m, n, k], "ours_s": min(ours), "cublas_s": min(vendor),
                     "of_vendor": min(vendor) / min(ours), "err": err})  # fmt: skip
    return {"variant": name, "device": device, "rows": rows}


if __name__ == "__main__":
    print("JSON", json.dumps(main(sys.argv[1])))
