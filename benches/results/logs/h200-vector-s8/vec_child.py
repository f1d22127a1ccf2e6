"""x @ A and A @ x through tiledmm (cupy), 3 launches each; then the timer floor."""
import statistics, sys
import cupy as cp
import numpy as np
import tiledmm
m, n, k = map(int, sys.argv[1].split("x"))
rng = cp.random.default_rng(0)
a = (rng.random((m, k)) * 2 - 1).astype("float32")
b = (rng.random((k, n)) * 2 - 1).astype("float32")
for _ in range(3):
    tiledmm.matmul(a, b, backend="cupy")
cp.cuda.Device().synchronize()
if len(sys.argv) > 2:
    be = tiledmm.get_backend("cupy")
    spin = be._spin()
    empty = lambda: spin((1,), (1,), (np.uint64(0),))
    fl = statistics.median(be.timings(empty, repeat=50, warmup=5))
    t = statistics.median(be.timings(lambda: tiledmm.matmul(a, b, backend="cupy"), repeat=50, warmup=5))
    print(f"TIMER floor (one empty kernel between events): {fl*1e6:.2f} us; {sys.argv[1]}: {t*1e6:.2f} us")
