#!/usr/bin/env bash
# Reproduce the committed GPU results on a CUDA machine (ours: one NVIDIA H200), from the repo
# root with tiledmm[cupy,numba,opencl] installed:   bash benches/h200.sh [PREFIX] [OUTDIR] [DATADIR]
# OUTDIR gets the pytest-benchmark results files only; other JSON (the dispatch timings) goes
# to DATADIR, so `tiledmm report OUTDIR/*.json` and `pytest-benchmark compare` read them all.
# FP32 means FP32: cuBLAS through cupy.matmul with TF32 off (CUPY_TF32=0).
set -uo pipefail
prefix=${1:-h200}
out=${2:-benches/results}
data=${3:-benches/data}
sizes=1024,2048,4096,8192,4095,1000x3000x777,4096x4096x64
export CUPY_TF32=0
mkdir -p "$out" "$data"
python3 -m tiledmm calibrate --backend cupy
for be in cupy opencl numba-cuda; do
  python3 -m tiledmm bench --backend "$be" --sizes "$sizes" --dtype float32 --name "$prefix-$be" -o "$out" --no-figures
done
python3 -m tiledmm bench --backend cupy --backend opencl --backend numba-cuda --sizes 1024,4096,1000x3000x777 \
  --dtype float64 --name "$prefix-float64" -o "$out" --no-figures
python3 -m benches.studies.dispatch_overhead > "$data/$prefix-dispatch.json"
cat "$data/$prefix-dispatch.json"
python3 -m tiledmm report "$out"/$prefix-*.json -o "$out/report-$prefix" --no-figures
