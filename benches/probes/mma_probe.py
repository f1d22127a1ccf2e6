"""The ``mma.sync`` ceiling of this GPU: warp MMAs on registers only, no memory traffic.

    python -m benches.probes.mma_probe [--out probe.json]     (benches/probes/mma.py runs it too)

Each warp issues ``ACC`` independent ``mma.sync`` per iteration on constant fragments, 8 warps
per block, 4 blocks per SM: the rate the tensor cores give the synchronous warp instruction,
which bounds every ``mma.cl`` configuration (Hopper's full rate needs ``wgmma``). Kinds: TF32
m16n8k8, f16 m16n8k16 (f32 accumulate), f64 m16n8k8 (sm_90) and m8n8k4. Then TF32 at the
occupancy of the mma.cl tiles (``tf32_w<warps per scheduler>_acc<independent mma>``): 64x64
warp tiles run 2 warps per scheduler (8 per SM) with 32 independent accumulators each, so the
ceiling they can reach is this one, not the 8-warps-per-scheduler figure. Prints TFLOP/s and
writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tiledmm

ACC = 8
# kind -> (PTX op, A regs, B regs, C regs, FLOP per instruction, register letter, C type)
OPS = {
    "tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 4, 2, 4, 2048, "r", "float"),
    "f16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 4, 2, 4, 4096, "r", "float"),
    "f64_16x8x8": ("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64", 4, 2, 4, 2048, "d",
                   "double"),
    "f64_8x8x4": ("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64", 1, 1, 2, 512, "d", "double"),
}  # fmt: skip


#: (name, blocks per SM, warps per block, independent mma per warp): TF32 at mma.cl's occupancy
OCCUPANCY = [("tf32_w2_acc32", 1, 8, 32), ("tf32_w2_acc16", 1, 8, 16), ("tf32_w1_acc32", 1, 4, 32),
             ("tf32_w4_acc16", 2, 8, 16)]  # fmt: skip


def source(kind: str, acc: int = ACC, threads: int = 256) -> str:
    op, na, nb, nc, _, reg, ct = OPS[kind]
    ACC = acc  # noqa: N806 - the template's name
    it = "double" if reg == "d" else "unsigned"
    init = "1.0 + 1e-3 * threadIdx.x"
    if reg != "d":
        init = "__float_as_uint(1.0f + 1e-3f * threadIdx.x)"
    regs = ", ".join(f"%{i}" for i in range(nc))
    a = ", ".join(f"%{nc + i}" for i in range(na))
    b = ", ".join(f"%{nc + na + i}" for i in range(nb))
    cf = "d" if ct == "double" else "f"
    outs = ", ".join(f'"+{cf}"(c[j][{e}])' for e in range(nc))
    ins = ", ".join([f'"{reg}"(a[{i}])' for i in range(na)]
                    + [f'"{reg}"(b[{i}])' for i in range(nb)])  # fmt: skip
    return f"""
extern "C" __global__ void __launch_bounds__({threads}) probe({ct} *out, int iters)
{{
  {ct} c[{ACC}][{nc}];
  {it} a[{na}], b[{nb}];
  for (int j = 0; j < {ACC}; ++j) for (int e = 0; e < {nc}; ++e) c[j][e] = 0;
  for (int i = 0; i < {na}; ++i) a[i] = {init};
  for (int i = 0; i < {nb}; ++i) b[i] = {init};
  for (int t = 0; t < iters; ++t) {{
#pragma unroll
    for (int j = 0; j < {ACC}; ++j)
      asm volatile("{op} {{{regs}}}, {{{a}}}, {{{b}}}, {{{regs}}};\\n" : {outs} : {ins});
  }}
  {ct} s = 0;
  for (int j = 0; j < {ACC}; ++j) for (int e = 0; e < {nc}; ++e) s += c[j][e];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}}
"""


def measure(cp, kind: str, iters: int = 4096, per_sm: int = 4, warps: int = 8,
            acc: int = ACC) -> dict:  # fmt: skip
    threads = 32 * warps
    fn = cp.RawKernel(source(kind, acc, threads), "probe")
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    blocks = per_sm * sms
    ct = cp.float64 if OPS[kind][6] == "double" else cp.float32
    out = cp.empty(blocks * threads, dtype=ct)
    args = (out, cp.int32(iters))
    fn((blocks,), (threads,), args)
    cp.cuda.runtime.deviceSynchronize()
    timer = tiledmm.get_backend("cupy")  # its timings(): CUDA events behind a spin kernel
    best = min(timer.timings(lambda: fn((blocks,), (threads,), args), repeat=5, warmup=0))
    flops = OPS[kind][4] * acc * iters * blocks * warps
    return {"tflops": flops / best / 1e12, "seconds": best, "blocks": blocks,
            "warps_per_block": warps, "independent_mma_per_warp": acc,
            "op": OPS[kind][0]}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    import cupy as cp

    res = {}
    for kind in OPS:
        try:
            res[kind] = measure(cp, kind)
            print(f"mma.sync ceiling {kind:<11} {res[kind]['tflops']:8.1f} TFLOP/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            res[kind] = {"error": str(exc)[-1500:]}
            print(f"mma.sync ceiling {kind}: {exc}", flush=True)
    for name, per_sm, warps, acc in OCCUPANCY:
        try:
            res[name] = measure(cp, "tf32", 2048, per_sm, warps, acc)
            print(
                f"mma.sync ceiling {name:<14} {res[name]['tflops']:8.1f} TFLOP/s "
                f"({per_sm * warps // 4} warps per scheduler, {acc} independent)",
                flush=True,
            )
        except Exception as exc:  # noqa: BLE001 - report and go on
            res[name] = {"error": str(exc)[-1500:]}
            print(f"mma.sync ceiling {name}: {exc}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
