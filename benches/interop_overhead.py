"""Per-call cost of tiledmm.matmul at 64^3 on PyTorch (and Numba, JAX) CUDA inputs vs CuPy inputs.

    python3 benches/interop_overhead.py > benches/results/h200-interop.json

Issue 18's bar: with torch CUDA tensors, a call costs within 10% of the same call (same backend,
same kernel) on CuPy arrays. Also timed: the same on a non-default torch stream (TorchStream's
event waits), Numba and JAX inputs, and the pieces of the bridge (torch -> CuPy view by
``data_ptr`` vs ``cupy.asarray`` through ``__cuda_array_interface__``; CuPy -> torch by
``torch.as_tensor`` vs ``torch.from_dlpack``). Wall time over many calls with one synchronize
per round (what an application pays), median of five rounds, microseconds. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from dispatch_overhead import per_call_us  # (a sibling script: benches/ is on sys.path)

import tiledmm
from tiledmm import arrays


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="square size (default 64)")
    p.add_argument("--backends", default="cupy,numba-cuda")
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
    # The bridge's pieces.
    ct = cp.asarray(ta)
    pieces = {
        "torch->cupy (data_ptr view)": lambda: arrays.to_native(ta),
        "torch->cupy (cupy.asarray, CAI)": lambda: cp.asarray(ta),
        "cupy->torch (torch.as_tensor)": lambda: torch.as_tensor(ct, device="cuda"),
        "cupy->torch (torch.from_dlpack)": lambda: torch.from_dlpack(ct),
        "kind_of(torch cuda)": lambda: arrays.kind_of(ta),
        "stream_for(torch cuda)": lambda: arrays.stream_for(arrays.kind_of(ta)),
    }
    rows["pieces_us"] = {k: round(per_call_us(f, sync, calls=20000), 3) for k, f in pieces.items()}

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

    for be in args.backends.split(","):
        entry = next((e for e in tiledmm.backends() if e.name == be), None)
        if entry is None or not entry.available:
            print(f"skipping {be}: {entry.reason if entry else 'not registered'}", file=sys.stderr)
            continue

        def mm(x, y, be=be):
            return tiledmm.matmul(x, y, backend=be, kernel=kern)

        ref = ha.astype(np.float64) @ hb
        got = mm(ta, tb)
        assert type(got) is torch.Tensor and got.is_cuda, type(got)
        err = float(np.abs(got.cpu().numpy() - ref).max() / np.abs(ref).max())
        row = {"backend": be, "rel_error": err}
        row["cupy_us"] = per_call_us(lambda: mm(ca, cb), sync)
        row["torch_us"] = per_call_us(lambda: mm(ta, tb), sync)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            row["torch_side_stream_us"] = per_call_us(lambda: mm(ta, tb), sync)
        if nb is not None:
            row["numba_us"] = per_call_us(lambda: mm(na, nbb), sync)
        if jax is not None:
            row["jax_us"] = per_call_us(lambda: mm(ja, jb), sync, calls=500)
        row["torch_over_cupy"] = row["torch_us"] / row["cupy_us"]
        row["within_10pct"] = row["torch_over_cupy"] <= 1.10
        rows["rows"].append(row)
    rows["torch_matmul_us"] = per_call_us(lambda: torch.matmul(ta, tb), sync)
    rows["cupy_matmul_us"] = per_call_us(lambda: cp.matmul(ca, cb), sync)
    print(json.dumps(rows, indent=2))
    for r in rows["rows"]:
        print(
            f"{r['backend']}: torch {r['torch_us']:.1f} us vs cupy {r['cupy_us']:.1f} us "
            f"({r['torch_over_cupy']:.2f}x); side stream {r['torch_side_stream_us']:.1f} us",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
