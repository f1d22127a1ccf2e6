"""OpenCL as users call it: pyopencl arrays in, no ``out=``, wall time per call (issue 37, item 4).

    python -m benches.studies.opencl_calls --out benches/data/pocl-opencl-calls-after.json
    python -m benches.studies.opencl_calls --scale 1 --repeat 50      # a GPU: the full sizes

Per shape (decode 1xNxK and 8xNxK, skinny 128x8192x8192, squares; N, K and the squares'
sides times ``--scale``: 1 on a GPU, 0.25 on a CPU device unless given), float32:

- ``call_us``: ``r = tiledmm.matmul(a, b)`` on ``pyopencl.array.Array`` operands made on the
  caller's own context and queue (``--arrays backend``: on the backend's), then
  ``r.queue.finish()`` (the result's queue): median wall time after warm-up, as an application
  that waits for each product pays it; ``enqueue_us`` the same call without the wait (the host
  time a call holds the caller), ``pipelined_us`` the wall time per call of ``--repeat`` calls
  queued back to back and one wait (what a loop of products pays per product);
- ``device_us``: the same product through the backend's own ``timings()`` (profiling events
  on its queue: device time), so ``call_us - device_us`` is the host's share;
- ``vendor_us``: ``numpy.matmul`` on host arrays on a CPU device (OpenBLAS, the CPU
  yardstick), ``cupy.matmul`` (cuBLAS, wall time with a synchronize) on a GPU when cupy
  imports, else none; ``of_vendor`` = ``vendor_us / call_us``;
- ``host_numpy_us``: NumPy operands in, NumPy result out (transfers included);
- ``pieces_us``: the host pieces of one call on the backend's own arrays (allocation of the
  result, ``Backend.run`` = launch lookup + arguments + enqueue, the pre-bound launch of the
  hot path where ``Backend.bind`` gives one, the whole call without a wait);
- ``rel_error`` against a float64 NumPy product, and the plan (family, tiles, options).

Every figure is measured in ``--rounds`` rounds over all shapes (the order reversed every
other round, so drift and other load spread over the shapes); a row holds the median over
the rounds, the least disturbed round's figures (``best``: the minimum over rounds, since
other load on the machine only adds time; ``best.of_vendor`` from those) and each round
(``rounds``). The summary holds the geometric mean of ``of_vendor`` and its minimum, from the
medians and from ``best``. JSON to ``--out`` (and stdout), with the machine info of
``tiledmm.bench.machine`` and the commit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

import tiledmm
from tiledmm.bench.machine import commit_info, machine_info
from tiledmm.core import dispatch

#: (label, m, n, k, which sides scale): decode, skinny and squares at scale 1
SHAPES = [
    ("decode", 1, 6144, 4096, "nk"),
    ("decode", 8, 6144, 4096, "nk"),
    ("decode", 1, 4096, 4096, "nk"),
    ("skinny", 128, 8192, 8192, "nk"),
    ("square", 1024, 1024, 1024, "mnk"),
    ("square", 2048, 2048, 2048, "mnk"),
    ("square", 4096, 4096, 4096, "mnk"),
]


def scaled(scale: float) -> list[tuple[str, int, int, int]]:
    out = []
    for label, m, n, k, sides in SHAPES:
        dims = {"m": m, "n": n, "k": k}
        for s in sides:
            dims[s] = max(1, int(round(dims[s] * scale)))
        out.append((label, dims["m"], dims["n"], dims["k"]))
    return out


def wall_us(fn, wait, budget: float, repeat: int, warmup: int,
            timed_wait: bool = True) -> list[float]:  # fmt: skip
    """Wall microseconds of ``fn(); wait(result)`` per call (``timed_wait`` False: of ``fn()``
    alone, the wait after the clock), after ``warmup`` calls; as many calls as ``budget``
    seconds hold (at least 5, at most ``repeat``)."""
    for _ in range(warmup):
        wait(fn())
    times: list[float] = []
    t_end = time.perf_counter() + budget
    while len(times) < repeat and (len(times) < 5 or time.perf_counter() < t_end):
        t0 = time.perf_counter()
        r = fn()
        if timed_wait:
            wait(r)
        times.append((time.perf_counter() - t0) * 1e6)
        if not timed_wait:
            wait(r)
    return times


def pipelined_us(fn, wait, calls: int) -> float:
    """Wall microseconds per call of ``calls`` calls and one wait for the last result."""
    wait(fn())
    t0 = time.perf_counter()
    r = None
    for _ in range(calls):
        r = fn()
    wait(r)
    return (time.perf_counter() - t0) / calls * 1e6


def vendor(dev_is_gpu: bool):
    """(name, make(a, b) -> timed callable and its wait) of the yardstick, or None."""
    if not dev_is_gpu:
        return "numpy.matmul", lambda a, b: ((lambda: np.matmul(a, b)), lambda r: None)
    try:
        import cupy as cp
    except Exception:  # noqa: BLE001 - no cupy: no vendor figure on this GPU
        return None

    def make(a, b):
        ca, cb = cp.asarray(a), cp.asarray(b)
        return (lambda: cp.matmul(ca, cb)), (lambda r: cp.cuda.get_current_stream().synchronize())

    return "cupy.matmul", make


#: figures measured each round (the row holds the median over rounds, ``rounds`` each one)
FIGURES = ("call_us", "enqueue_us", "pipelined_us", "device_us", "host_numpy_us", "vendor_us")


class Case:
    """One shape: its operands (the caller's and the backend's), first call and plan."""

    def __init__(self, be, label, m, n, k, args, user_queue, vend, rng) -> None:
        import pyopencl.array as cla

        self.be, self.label, self.m, self.n, self.k, self.args = be, label, m, n, k, args
        dt = self.dt = np.dtype(args.dtype)
        self.a = rng.standard_normal((m, k)).astype(dt)
        self.b = rng.standard_normal((k, n)).astype(dt)
        q = user_queue or be.state().queue
        self.A, self.B = cla.to_device(q, self.a), cla.to_device(q, self.b)
        q.finish()
        r = self.call()  # first call: plan, compile, first-use tuning (not timed)
        ref = self.a.astype(np.float64) @ self.b.astype(np.float64)
        self.err = float(np.linalg.norm(r.get() - ref) / max(np.linalg.norm(ref), 1e-300))
        del r
        # the backend's own arrays (its profiling queue): device time and the host pieces
        self.BA, self.BB = be.asarray(self.a, dt), be.asarray(self.b, dt)
        self.plan = dispatch.plan_for(be, m, n, k, dt.name)
        self.vend = None if vend is None else (vend[0], *vend[1](self.a, self.b))
        self.rounds: list[dict] = []

    def call(self):
        return tiledmm.matmul(self.A, self.B)

    @staticmethod
    def wait(r) -> None:  # the result's queue (r.finish() waits only for events it holds)
        r.queue.finish()

    def round(self) -> None:
        """Every figure once (each a median over its calls)."""
        be, args, dt, (m, n) = self.be, self.args, self.dt, (self.m, self.n)
        calls = wall_us(self.call, self.wait, args.budget, args.repeat, args.warmup)
        enq = wall_us(self.call, self.wait, args.budget / 4, args.repeat, 1, timed_wait=False)
        piped = pipelined_us(self.call, self.wait, max(5, min(args.repeat, len(calls))))
        BA, BB = self.BA, self.BB
        dev = be.timings(lambda: tiledmm.matmul(BA, BB), repeat=max(5, min(args.repeat, 20)),
                         warmup=args.warmup)  # fmt: skip
        host_in = wall_us(lambda: tiledmm.matmul(self.a, self.b), lambda r: None,
                          args.budget / 2, args.repeat, 1)  # fmt: skip (a NumPy result is done)
        R = be.empty((m, n), dt, like=BA)
        st = be.state()
        go = be.bind(self.plan)
        work = [("alloc_result", lambda: be.empty((m, n), dt, like=BA)),
                ("backend_run", lambda: be.run(self.plan, BA, BB, R)),
                ("matmul_no_wait", lambda: tiledmm.matmul(BA, BB))]  # fmt: skip
        if go is not None:  # the hot path's pre-bound launch, where the backend has one
            work.insert(2, ("bound_launch", lambda: go.arrays(BA, BB, R)))
        pieces = {}
        for name, fn in work:  # host time of each piece alone, the queue drained after it
            t = wall_us(fn, lambda r: st.queue.finish(), args.budget / 8, 20, 1,
                        timed_wait=False)  # fmt: skip
            pieces[name] = round(statistics.median(t), 2)
        got = dict(call_us=statistics.median(calls), enqueue_us=statistics.median(enq),
                   pipelined_us=piped, device_us=statistics.median(dev) * 1e6,
                   host_numpy_us=statistics.median(host_in), pieces_us=pieces,
                   calls_timed=len(calls))  # fmt: skip
        if self.vend is not None:
            vt = wall_us(self.vend[1], self.vend[2], args.budget, args.repeat, args.warmup)
            got["vendor_us"] = statistics.median(vt)
        self.rounds.append(got)

    def row(self) -> dict:
        """Medians over the rounds, and each round."""
        plan, flops = self.plan, 2.0 * self.m * self.n * self.k
        out = dict(shape=f"{self.m}x{self.n}x{self.k}", kind=self.label, m=self.m, n=self.n,
                   k=self.k, dtype=self.dt.name, kernel=plan.kernel,
                   block_tile=list(plan.block_tile), thread_tile=list(plan.thread_tile),
                   options=dict(plan.options), tiles_from=plan.geometry_source,
                   rel_error=self.err, best={})  # fmt: skip
        for f in FIGURES:  # the median over rounds, and the least disturbed round's figure
            if f in self.rounds[0]:
                out[f] = statistics.median(r[f] for r in self.rounds)
                out["best"][f] = min(r[f] for r in self.rounds)
        out["pieces_us"] = {p: statistics.median(r["pieces_us"][p] for r in self.rounds)
                            for p in self.rounds[0]["pieces_us"]}  # fmt: skip
        out["gflops"] = flops / out["call_us"] / 1e3
        out["device_gflops"] = flops / out["device_us"] / 1e3
        out["host_share_us"] = out["call_us"] - out["device_us"]
        if self.vend is not None:
            out["vendor"] = self.vend[0]
            out["of_vendor"] = out["vendor_us"] / out["call_us"]
            out["device_of_vendor"] = out["vendor_us"] / out["device_us"]
            out["best"]["of_vendor"] = out["best"]["vendor_us"] / out["best"]["call_us"]
        out["rounds"] = self.rounds
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=None,
                   help="N, K and the squares' sides times this (default 1 on a GPU, 0.25 on "
                        "a CPU device)")  # fmt: skip
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeat", type=int, default=50, help="most timed calls per figure")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget", type=float, default=1.0, help="seconds per figure (soft)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds over all shapes (figures: the median over rounds)")
    p.add_argument("--note", default="", help="a line stored with the results")
    p.add_argument("--arrays", choices=("user", "backend"), default="user",
                   help="operands on a context and queue of the caller's own (default), or on "
                        "the backend's")  # fmt: skip
    p.add_argument("--out", default=None, help="write the JSON here too")
    args = p.parse_args(argv)

    import pyopencl as cl

    be = tiledmm.get_backend("opencl")
    dev = be.device()
    scale = args.scale if args.scale is not None else (1.0 if dev.is_gpu else 0.25)
    user_queue = None
    if args.arrays == "user":
        ctx = cl.Context([be.state().dev])
        user_queue = cl.CommandQueue(ctx)
    vend = vendor(dev.is_gpu)
    rng = np.random.default_rng(37)
    started = time.perf_counter()
    cases = [Case(be, label, m, n, k, args, user_queue, vend, rng)
             for label, m, n, k in scaled(scale)]  # fmt: skip
    for i in range(args.rounds):  # rounds, every shape in each, the order reversed every other
        for c in cases if i % 2 == 0 else cases[::-1]:
            c.round()
    rows = [c.row() for c in cases]
    for r in rows:
        print(f"{r['shape']:>16} {r['kernel']:8} call {r['call_us']:10.1f} us  enqueue "
              f"{r['enqueue_us']:8.1f}  pipelined {r['pipelined_us']:10.1f}  device "
              f"{r['device_us']:10.1f}  vendor {r.get('vendor_us', float('nan')):10.1f}  "
              f"of vendor {r.get('of_vendor', float('nan')):.3f}", file=sys.stderr, flush=True)
    ratios = [r["of_vendor"] for r in rows if "of_vendor" in r]
    best = [r["best"]["of_vendor"] for r in rows if "of_vendor" in r["best"]]
    summary = dict(
        of_vendor_geomean=math.exp(statistics.fmean(map(math.log, ratios))) if ratios else None,
        of_vendor_min=min(ratios) if ratios else None,
        best_of_vendor_geomean=math.exp(statistics.fmean(map(math.log, best))) if best else None,
        best_of_vendor_min=min(best) if best else None,
        call_us_geomean=math.exp(statistics.fmean(math.log(r["call_us"]) for r in rows)),
        host_share_us_median=statistics.median(r["host_share_us"] for r in rows),
    )
    doc = dict(about=__doc__.splitlines()[0], command=" ".join(["python -m",
               "benches.studies.opencl_calls", *sys.argv[1:]]), commit=commit_info(),
               machine_info=machine_info([be]),
               note=args.note,
               settings=dict(scale=scale, dtype=args.dtype, repeat=args.repeat,
                             warmup=args.warmup, budget=args.budget, arrays=args.arrays,
                             rounds=args.rounds, run_seconds=time.perf_counter() - started),
               summary=summary, rows=rows)  # fmt: skip
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if all(r["rel_error"] < 1e-4 for r in rows) else 3


if __name__ == "__main__":
    raise SystemExit(main())
