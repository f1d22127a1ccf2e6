"""Vector gemv candidates timed as the benches time them (be.timings: spin + device events)."""
import statistics, sys
import numpy as np
import tiledmm
from tiledmm import make_plan, shapefit, tuning
from tiledmm_backends.kernels import shapes as cand

BW = 4.67e12
SHAPES = [(1, 4096, 4096), (4096, 1, 4096), (1, 8192, 8192), (1, 4096, 8192), (1, 16384, 4096), (2, 4096, 4096)]
rng = np.random.default_rng(3)
for name in sys.argv[1].split(","):
    be = tiledmm.get_backend(name)
    dev = be.device()
    for m, n, k in SHAPES:
        cls = tuning.shape_class(m, n, k)
        a = rng.random((m, k), dtype=np.float32) * 2 - 1
        b = rng.random((k, n), dtype=np.float32) * 2 - 1
        ref = a.astype(np.float64) @ b
        moved = 4 * (m * k + k * n + m * n)
        X, Y = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        out = be.empty((m, n), np.dtype("float32"))
        rows = []
        auto = lambda: tiledmm.matmul(X, Y, backend=name)
        auto()
        t = statistics.median(be.timings(auto, repeat=30, warmup=3))
        rows.append((t, "auto " + str(tiledmm.plan(m, n, k, backend=name).block_tile)))
        for geo in cand.candidates("naive", "float32", "vector"):
            geo = shapefit.resolve_split(geo, m, n, k, dev.compute_units)
            try:
                plan = make_plan(m, n, k, dtype="float32", kernel="naive", device=dev, geometry=geo, backend=name)
                be.run(plan, X, Y, out)
                err = float(np.abs(be.to_numpy(out) - ref).max() / np.abs(ref).max())
                if not err < 1e-4:
                    print("WRONG", geo, err); continue
                fn = lambda plan=plan: be.run(plan, X, Y, out)
                t = statistics.median(be.timings(fn, repeat=30, warmup=3))
                rows.append((t, f"{geo.block_tile} {dict(geo.options)}"))
            except Exception as exc:
                print("FAILED", geo, type(exc).__name__, exc)
        print(f"== {name} {m}x{n}x{k}: read roof {moved / BW * 1e6:.1f} us")
        for t, lab in sorted(rows)[:8]:
            print(f"  {t*1e6:7.1f} us {moved / t / BW:5.3f} of 4.67 TB/s  {lab}", flush=True)
