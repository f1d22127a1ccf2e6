"""Vector gemv candidates timed as the benches time them (Backend.timings: spin, device events).

python vec_probe.py cupy,opencl
"""

import statistics
import sys

import numpy as np
from tiledmm_backends.kernels import shapes as cand

import tiledmm
from tiledmm import make_plan, shapefit

BW = 4.67e12  # the H200's DRAM read roof (bytes/s)
SHAPES = [(1, 4096, 4096), (4096, 1, 4096), (1, 8192, 8192), (1, 4096, 8192), (1, 16384, 4096),
          (2, 4096, 4096)]  # fmt: skip


def rows_for(be, name: str, m: int, n: int, k: int, rng) -> list[tuple[float, str]]:
    dev = be.device()
    a = rng.random((m, k), dtype=np.float32) * 2 - 1
    b = rng.random((k, n), dtype=np.float32) * 2 - 1
    ref = a.astype(np.float64) @ b
    x, y = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
    out = be.empty((m, n), np.dtype("float32"))

    def auto():
        return tiledmm.matmul(x, y, backend=name)

    auto()
    rows = [(statistics.median(be.timings(auto, repeat=30, warmup=3)),
             f"auto {tiledmm.plan(m, n, k, backend=name).block_tile}")]  # fmt: skip
    for geo in cand.candidates("naive", "float32", "vector"):
        geo = shapefit.resolve_split(geo, m, n, k, dev.compute_units)
        try:
            plan = make_plan(m, n, k, dtype="float32", kernel="naive", device=dev, geometry=geo,
                             backend=name)  # fmt: skip
            be.run(plan, x, y, out)
            err = float(np.abs(be.to_numpy(out) - ref).max() / np.abs(ref).max())
            if not err < 1e-4:
                print("WRONG", geo, err)
                continue
            t = be.timings(lambda plan=plan: be.run(plan, x, y, out), repeat=30, warmup=3)
            rows.append((statistics.median(t), f"{geo.block_tile} {dict(geo.options)}"))
        except Exception as exc:  # noqa: BLE001 - one candidate must not end the run
            print("FAILED", geo, type(exc).__name__, exc)
    return rows


def main() -> None:
    rng = np.random.default_rng(3)
    for name in sys.argv[1].split(","):
        be = tiledmm.get_backend(name)
        for m, n, k in SHAPES:
            moved = 4 * (m * k + k * n + m * n)
            print(f"== {name} {m}x{n}x{k}: read roof {moved / BW * 1e6:.1f} us")
            for t, label in sorted(rows_for(be, name, m, n, k, rng))[:8]:
                frac = moved / t / BW
                print(f"  {t * 1e6:7.1f} us {frac:5.3f} of 4.67 TB/s  {label}", flush=True)


if __name__ == "__main__":
    main()
