"""Per-call cost of tiledmm.matmul at 64^3 on PyTorch (and Numba, JAX) CUDA inputs vs CuPy inputs.

    python3 -m benches.studies.interop_overhead > benches/data/h200-interop.json

Issue 18's bar: with torch CUDA tensors, a call costs within 10% of the same call (same backend,
same kernel) on CuPy arrays. Each row (backends cupy, numba-cuda and the names cuda, auto) times
CuPy inputs, torch inputs through the fast path (``tiledmm.interop.torchpath``: ``torch_us``), the
same
with the fast path off (the general bridge: ``torch_general_us``), both on a non-default torch
stream, and Numba and JAX inputs. ``breakdown_us`` times the fast path's pieces on the cupy
backend (key and checks, torch's allocation calls against cupy.empty, a cached and a new CuPy
view, the stream queries, the backend's run alone against its pre-bound launch (``Bound``: the
one both hot paths take, with torch pointers and with CuPy arrays), the API's CuPy-input hot
path, a CuPy stream switch and the event pair) and ``profile``
holds a cProfile of fast-path calls. Wall time over many calls with one synchronize per round
(what an application pays), median of five rounds, microseconds. Prints JSON.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys

import numpy as np

import tiledmm
from benches.studies.dispatch_overhead import per_call_us
from tiledmm.interop import bridge as arrays
from tiledmm.interop import kinds, streams, torchpath


def breakdown(ta, tb, kern: str, sync) -> dict:
    """The fast path's pieces on the cupy backend (torch default stream)."""
    import cupy as cp
    import torch

    tiledmm.matmul(ta, tb, backend="cupy", kernel=kern)  # learn
    e = torchpath.entry(ta, tb, "cupy", kern)
    if e is None:
        return {"error": "no fast-path entry for torch CUDA inputs on cupy"}
    n = ta.shape[0]
    va, vb = e.view(0, ta.data_ptr()), e.view(1, tb.data_ptr())
    vr = cp.empty((n, n), np.float32)
    raw = streams.raw_stream_getter(torch)
    ext = streams.external_stream(cp, raw(0), 0)
    before, after = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
    legacy = streams.external_stream(cp, 0, 0)

    def entered():
        with ext:
            pass

    def events():
        before.record(ext)
        legacy.wait_event(before)
        after.record(legacy)
        ext.wait_event(after)

    go, ptr = e.go, e.ptr  # the pre-bound launch both hot paths use (None: the backend has none)
    pa, pb, pr = ta.data_ptr(), tb.data_ptr(), vr.data.ptr
    handle = streams.Handle(raw(0))
    ca, cb = cp.asarray(va), cp.asarray(vb)
    tiledmm.matmul(ca, cb, backend="cupy", kernel=kern)  # (api's hot path learns the key)

    pieces = {
        "fast_path_total": lambda: torchpath.matmul(ta, tb, "cupy", kern),
        "key_and_lookup (torchpath.entry)": lambda: torchpath.entry(ta, tb, "cupy", kern),
        "checks (contiguous, neg, grad)": lambda: (
            ta.is_contiguous()
            and tb.is_contiguous()
            and not (ta.is_neg() or tb.is_neg())
            and not ((ta.requires_grad or tb.requires_grad) and torch.is_grad_enabled())
        ),  # fmt: skip
        "backend.device_key": e.be.device_key,
        "torch raw current stream": lambda: raw(0),
        "cupy current stream ptr": lambda: cp.cuda.get_current_stream().ptr,
        "torch.empty (output, before)": lambda: torch.empty(
            (n, n), dtype=ta.dtype, device=ta.device
        ),  # fmt: skip
        "a.new_empty_strided (output)": lambda: ta.new_empty_strided((n, n), (n, 1)),
        "torch.empty_strided (output)": lambda: torch.empty_strided(
            (n, n), (n, 1), dtype=ta.dtype, device=ta.device
        ),  # fmt: skip
        "cupy.empty (CuPy inputs' output)": lambda: cp.empty((n, n), np.float32),
        "data_ptr + bound pointer arg (per operand)": lambda: ptr(ta.data_ptr()) if ptr else 0,
        "view, cached (per operand)": lambda: e.view(0, ta.data_ptr()),
        "view, built (per operand)": lambda: torchpath.view(
            cp, ta.data_ptr(), (n, n), np.dtype(np.float32), n * n * 4, 0
        ),
        "backend.run alone": lambda: e.be.run(e.plan, va, vb, vr),
        "bound launch alone (pointers, torch stream)": (
            (lambda: go(ptr(pa), ptr(pb), ptr(pr), pa, pb, handle)) if go else (lambda: None)
        ),
        "bound launch alone (CuPy arrays: api hot path)": (
            (lambda: go.arrays(ca, cb, vr)) if go else (lambda: None)
        ),
        "tiledmm.matmul, CuPy inputs (api hot path)": lambda: tiledmm.matmul(
            ca, cb, backend="cupy", kernel=kern
        ),
        "CuPy stream enter+exit (external_stream)": entered,
        "event pair (side stream, backend not on CuPy's stream)": events,
    }
    out = {k: round(per_call_us(f, sync, calls=5000), 3) for k, f in pieces.items()}
    out["launch_stream"] = getattr(e.be, "launch_stream", "") or "(not declared)"
    bind = getattr(e.be, "bind", None)  # (the api's hot path holds bind(plan) the same way)
    out["bound_launch"] = {"torch": go is not None, "cupy_hot_path": bool(bind and bind(e.plan))}
    return out


def profile(fn, calls: int = 3000) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(16)
    return buf.getvalue()[-4000:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="square size (default 64)")
    p.add_argument("--backends", default="cupy,numba-cuda,cuda,auto")
    p.add_argument("--kernel", default="auto")
    args = p.parse_args()

    import cupy as cp
    import torch

    n, kern = args.n, args.kernel
    rng = np.random.default_rng(0)
    ha, hb = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    ca, cb = cp.asarray(ha), cp.asarray(hb)
    ta, tb = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()

    def sync():
        torch.cuda.synchronize()

    rows: dict = {"n": n, "kernel": kern, "device": torch.cuda.get_device_name(), "rows": []}
    # The general bridge's pieces.
    ct = cp.asarray(ta)
    pieces = {
        "torch->cupy (data_ptr view)": lambda: arrays.to_native(ta),
        "torch->cupy (cupy.asarray, CAI)": lambda: cp.asarray(ta),
        "cupy->torch (torch.as_tensor)": lambda: torch.as_tensor(ct, device="cuda"),
        "cupy->torch (torch.from_dlpack)": lambda: torch.from_dlpack(ct),
        "kind_of(torch cuda)": lambda: kinds.kind_of(ta),
        "stream_for(torch cuda)": lambda: streams.stream_for(kinds.kind_of(ta)),
    }
    rows["pieces_us"] = {k: round(per_call_us(f, sync, calls=20000), 3) for k, f in pieces.items()}
    try:
        rows["breakdown_us"] = breakdown(ta, tb, kern, sync)
    except Exception as exc:  # noqa: BLE001 - report what could not be measured
        rows["breakdown_us"] = {"error": f"{type(exc).__name__}: {exc}"}

    nb = None
    try:
        from numba import cuda as nb

        na, nbb = nb.to_device(ha), nb.to_device(hb)
    except Exception:  # noqa: BLE001
        nb = None
    jax = None
    try:
        import jax

        if any(d.platform == "gpu" for d in jax.devices()):
            ja, jb = jax.device_put(ha), jax.device_put(hb)
        else:
            jax = None
    except Exception:  # noqa: BLE001
        jax = None

    ref = ha.astype(np.float64) @ hb
    for be in args.backends.split(","):
        if be not in ("auto", "cuda"):
            entry = next((e for e in tiledmm.backends() if e.name == be), None)
            if entry is None or not entry.available:
                why = entry.reason if entry else "not registered"
                print(f"skipping {be}: {why}", file=sys.stderr)
                continue

        def mm(x, y, be=be):
            return tiledmm.matmul(x, y, backend=be, kernel=kern)

        row: dict = {"backend": be}
        try:
            got = mm(ta, tb)
        except Exception as exc:  # noqa: BLE001 - report what could not run
            row["error"] = f"{type(exc).__name__}: {exc}"
            rows["rows"].append(row)
            continue
        assert type(got) is torch.Tensor and got.device == ta.device, type(got)
        fast = mm(ta, tb)  # the second call: the fast path's
        row["fast_path"] = torchpath.entry(ta, tb, be, kern) is not None
        row["runs_on"] = getattr(torchpath.entry(ta, tb, be, kern), "be", None)
        row["runs_on"] = row["runs_on"].name if row["runs_on"] is not None else None
        err = float(np.abs(fast.cpu().numpy() - ref).max() / np.abs(ref).max())
        row["rel_error"] = err
        row["cupy_us"] = per_call_us(lambda: mm(ca, cb), sync)
        row["torch_us"] = per_call_us(lambda: mm(ta, tb), sync)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            side = mm(ta, tb)
            s.synchronize()
            row["side_stream_rel_error"] = float(
                np.abs(side.cpu().numpy() - ref).max() / np.abs(ref).max()
            )
            row["torch_side_stream_us"] = per_call_us(lambda: mm(ta, tb), sync)
        torchpath.enable(False)
        row["torch_general_us"] = per_call_us(lambda: mm(ta, tb), sync)
        with torch.cuda.stream(s):
            row["torch_side_stream_general_us"] = per_call_us(lambda: mm(ta, tb), sync)
        torchpath.enable(True)
        if nb is not None:
            row["numba_us"] = per_call_us(lambda: mm(na, nbb), sync)
        if jax is not None:
            row["jax_us"] = per_call_us(lambda: mm(ja, jb), sync, calls=500)
        row["torch_over_cupy"] = row["torch_us"] / row["cupy_us"]  # the fast path
        row["general_over_cupy"] = row["torch_general_us"] / row["cupy_us"]
        row["within_10pct"] = row["torch_over_cupy"] <= 1.10
        rows["rows"].append(row)
    mm_cupy = lambda: tiledmm.matmul(ta, tb, backend="cupy", kernel=kern)  # noqa: E731
    mm_cupy()
    rows["profile_fast_path_cupy"] = profile(mm_cupy)
    rows["torch_matmul_us"] = per_call_us(lambda: torch.matmul(ta, tb), sync)
    rows["cupy_matmul_us"] = per_call_us(lambda: cp.matmul(ca, cb), sync)
    print(json.dumps(rows, indent=2))
    for r in rows["rows"]:
        if "error" in r:
            print(f"{r['backend']}: {r['error']}", file=sys.stderr)
            continue
        print(
            f"{r['backend']}: torch {r['torch_us']:.1f} us vs cupy {r['cupy_us']:.1f} us "
            f"({r['torch_over_cupy']:.2f}x; general path {r['torch_general_us']:.1f} us); "
            f"side stream {r['torch_side_stream_us']:.1f} us "
            f"(general {r['torch_side_stream_general_us']:.1f} us)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
