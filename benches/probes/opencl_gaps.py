"""OpenCL on an NVIDIA GPU: where a call's time goes. For split-K, aligned-copy and plain
products: the host time of one call, each command's device time and start, and the span (first
command's start to last one's end) behind no spin kernel, a 200 us and a 1 ms one. The gaps
between commands are the host's enqueue time (issue 11; benches/results/logs/h200-opencl-gaps.txt).

    TILEDMM_OPENCL_DEVICE=NVIDIA python -m benches.probes.opencl_gaps
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import tiledmm
from tiledmm.core import dispatch

SHAPES = [(64, 4096, 4096), (4096, 32, 4096), (16, 8192, 8192), (4095, 4095, 4095),
          (1000, 3000, 777)]  # fmt: skip
SPINS_NS = (0, 200_000, 1_000_000)


def profile(be, st, fn, spin_ns: int, reps: int = 15) -> tuple[float, float, list, list]:
    """Medians of (host us, span us, [command us], [command start us]) over ``reps`` calls."""
    spans, per, host, starts = [], [], [], []
    for _ in range(reps):
        if spin_ns:
            st.spin()(st.queue, (1,), (1,), np.uint64(spin_ns))
        st.events = []
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        st.queue.finish()
        ev, st.events = st.events, None
        spans.append((ev[-1].profile.end - ev[0].profile.start) * 1e-3)
        per.append([(e.profile.end - e.profile.start) * 1e-3 for e in ev])
        starts.append([(e.profile.start - ev[0].profile.start) * 1e-3 for e in ev])
    med = [statistics.median(x) for x in zip(*per, strict=True)]
    at = [statistics.median(x) for x in zip(*starts, strict=True)]
    return statistics.median(host), statistics.median(spans), med, at


def main() -> int:
    be = tiledmm.get_backend("opencl")
    st = be.state()
    rng = np.random.default_rng(1)
    for m, n, k in SHAPES:
        a = rng.random((m, k), dtype=np.float32) - 0.5
        b = rng.random((k, n), dtype=np.float32) - 0.5
        A, B = be.asarray(a, a.dtype), be.asarray(b, b.dtype)
        out = be.empty((m, n), np.dtype("float32"))
        plan = dispatch.plan_for(be, m, n, k, "float32", "auto")

        def fn(plan=plan, A=A, B=B, out=out):
            be.run(plan, A, B, out)

        for _ in range(3):
            fn()
        st.queue.finish()
        for ns in SPINS_NS:
            host, span, med, at = profile(be, st, fn, ns)
            cmds = ", ".join(f"{x:.1f}@{s:.1f}" for x, s in zip(med, at, strict=True))
            print(f"{m}x{n}x{k} {plan.block_tile} split={plan.options.get('split_k')} "
                  f"spin={ns // 1000}us: host {host:6.1f} us, span {span:7.1f} us, "
                  f"commands {cmds}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
