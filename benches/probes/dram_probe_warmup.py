"""Why the quick DRAM probe reads low (3.58 TB/s in the GPU tests, 4.53 in the full calibration):
the same probe launches (``tiledmm.tune.calibrate.probe_runs``), quick and full buffers, timed cold
(right after setup, as the tests do) and again after ~1 s of back-to-back launches, per run.

    python3 -m benches.probes.dram_probe_warmup        # on the GPU machine; prints one line per
    case

If the cold quick rate is low and the warm quick rate matches the full one, the difference is
the memory clock leaving its idle state, not the probe (docs/model.md, "Calibrating").
"""

from __future__ import annotations

import statistics
import time

from tiledmm.core.registry import get_backend
from tiledmm.tune.calibrate import probe_runs


def rates(be, quick: bool, warm_s: float) -> list[float]:
    """DRAM probe rates (TB/s) of five timed runs, after ``warm_s`` seconds of launches."""
    for table, name, run, amount in probe_runs(be, quick):
        if (table, name) != ("levels", "DRAM"):
            continue
        end = time.perf_counter() + warm_s
        while time.perf_counter() < end:
            be.timings(run, repeat=1, warmup=0)
        return [amount / t / 1e12 for t in be.timings(run, repeat=5, warmup=0)]
    return []


def main() -> int:
    be = get_backend("cupy")
    for quick in (True, False):
        for warm in (0.0, 1.0):
            r = rates(be, quick, warm)
            label = "quick" if quick else "full"
            print(f"{label:5s} warm {warm:.0f} s: median {statistics.median(r):.2f} TB/s, "
                  f"runs {' '.join(f'{x:.2f}' for x in r)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
