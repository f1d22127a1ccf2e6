"""The register loop's own costs on one CPU core, for the model (``tiledmm.model.cpu``).

A compiled CPU register kernel whose micro-tile is ``rows x TN`` spends, per K step of a
micro-tile, a fixed cost (the row slices, the A values, the loop's set-up) and a cost per
column of it. Timing one block of the backend's register family at a narrow and a wide ``TN``
on one core separates the two: ``seconds per step = step + TN x column``. `tiledmm calibrate`
runs it; first use's calibration does not (numba compiles the kernel in 3-6 s on a fresh
machine, past first use's budget), so there the model keeps its unfused rate. On the 2-core EPYC,
numba-cpu's 4 x TN loop: 32-33 ns per step and 0.71 ns per column (TN 8-512 fall within 10% of
such a line), so 4x512 runs 1.6x the rate of 4x64 and the model's single unfused rate priced
them alike.
"""

from __future__ import annotations

import numpy as np

from ..core.backend import Backend

__all__ = ["measure_loop_costs", "BLOCK", "NARROW", "WIDE"]

#: the probe's block (BM, BN, BK) and K: one block, so one core runs it (a few ms). The block
#: is numba-cpu's default (its B panel in a quarter of L2), whose cache traffic the per-column
#: cost includes: on the EPYC 0.71 ns here, 0.88-0.91 with a 64x512x128 block
BLOCK, K = (128, 512, 64), 512
NARROW, WIDE = 32, 512
ROWS = 4  # the micro-tile's rows (numba-cpu's MICRO_ROWS)
ROUNDS, ROUNDS_QUICK = 6, 3


def measure_loop_costs(be: Backend, quick: bool = False) -> dict[str, float] | None:
    """``{"step": s, "column": s}`` of ``be``'s register loop on one core, from its
    ``register_block`` probe (``Backend.compile_probe``) at ``TN`` = :data:`NARROW` and
    :data:`WIDE`; None where the backend has no such probe or the two timings do not give
    positive costs."""
    bm, bn, bk = BLOCK
    rng = np.random.default_rng(0)
    a = rng.standard_normal((bm, K)).astype(np.float32)
    b = rng.standard_normal((K, bn)).astype(np.float32)
    c = np.empty((bm, bn), np.float32)
    runs = {}
    for tn in (NARROW, WIDE):
        defs = {"BM": bm, "BN": bn, "BK": bk, "TN": tn, "REAL_BYTES": 4}
        try:
            runs[tn] = be.compile_probe("register_block", defs)
        except Exception:  # noqa: BLE001 - no such probe on this backend's compiler
            return None
        if runs[tn] is None:
            return None
    # interleaved rounds, the fastest call of each width: on a shared VM a round may find the
    # core slowed (by neighbours, or the vendor BLAS's threads still spinning) by 1.5x
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(ROUNDS_QUICK if quick else ROUNDS):
        for tn, run in runs.items():
            times = be.timings(lambda f=run: f(1, (a, b, c)), repeat=5, warmup=1)
            best[tn] = min(best[tn], *times)
    per_step = {tn: t / ((bm // ROWS) * (bn // tn) * (K // ROWS)) for tn, t in best.items()}
    column = (per_step[WIDE] - per_step[NARROW]) / (WIDE - NARROW)
    step = per_step[NARROW] - NARROW * column
    if not (column > 0 and step > 0):
        return None
    return {"step": step, "column": column}
