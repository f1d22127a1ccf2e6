"""Offline check of the planner against committed results: measured / predicted per row.

Each row of a pytest-benchmark JSON in ``benches/results`` records the problem, backend,
kernel family and tiles; :func:`check_rows` rebuilds its plan with today's model on a
reference device (GPU rows: :func:`tiledmm.device.nvidia.reference_h200`; CPU rows: the device the
file recorded: its measured level ceilings where its calibration had them, else estimates;
its per-call host cost where the row was timed by the wall clock, none where by device
events) and reports measured / predicted time.
``python -m tiledmm.report.modelcheck [files]`` prints the table and the worst case per band,
then the Hopper 16-bit kernel's rows (:mod:`tiledmm.report.hoppercheck`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ..device.calibration import read_calibration
from ..device.host import CPU_DRAM_LATENCY, cpu_levels
from ..device.nvidia import measured_from_record, reference_h200
from ..device.spec import DeviceSpec
from ..planner.geometry import Geometry
from ..planner.make import batch_plan, make_plan
from ..planner.plans import Plan
from .hoppercheck import COMMITTED_HOPPER, format_section, hopper_rows, is_probe

__all__ = [
    "model_counters",
    "compare_counters",
    "Row",
    "check_rows",
    "check_files",
    "shipped_geometry",
    "band",
    "held_band",
    "format_table",
    "GPU_BAND",
    "CPU_BAND",
]

#: The committed results ``main`` checks when given no files: paths relative to the current
#: folder (a tiledmm checkout; an installed package ships no results).
COMMITTED = tuple(
    f"benches/results/{n}"
    for n in ("h200-cupy.json", "h200-opencl.json", "h200-numba-cuda.json", "h200-float64.json",
              "epyc-2c-cpu.json", "xeon-2c-cpu.json")
)  # fmt: skip
GPU_BAND, CPU_BAND = (0.8, 1.25), (0.67, 1.5)
MIN_PRODUCT = 1024**3  # rows below this (M*N*K) are shown but not held to a band


@dataclass(frozen=True)
class Row:
    file: str
    backend: str
    kernel: str
    dtype: str
    shape: tuple[int, int, int]
    measured: float
    predicted: float  # 0.0: not predicted
    binding: str

    @property
    def ratio(self) -> float | None:
        return self.measured / self.predicted if self.predicted else None


#: The families issue 12 holds to the band; others (the tensor-core ``mma`` family, issue 14)
#: are predicted and shown with their ratio, not held.
HELD_FAMILIES = ("naive", "tiled", "register")


def band(row: Row, gpu: bool) -> tuple[float, float] | None:
    """The band a row is held to (None: shown only): GPU rows of the three families and, on
    the CPU, the compiled kernels and the NumPy backend's register family, all at
    M*N*K >= 1024^3."""
    return held_band(row.backend, row.kernel, row.shape, gpu) if row.predicted else None


def held_band(backend: str, kernel: str, shape: tuple[int, int, int],
              gpu: bool) -> tuple[float, float] | None:  # fmt: skip
    """:func:`band` from a row's backend, family and (M, N, K)."""
    m, n, k = shape
    if m * n * k < MIN_PRODUCT or kernel not in HELD_FAMILIES:
        return None
    if gpu:
        return GPU_BAND
    if backend == "numpy" and kernel != "register":
        return None  # the emulated families: predicted per operation, not held to the band
    return CPU_BAND


def shipped_geometry() -> list[dict]:
    """The geometry entries the registered backends ship (``Backend.geometry_entries``:
    installed, available or not), each once, in the order the backends give them. The core
    reads no backend's files itself."""
    from ..core.registry import generation, registered

    if _SHIPPED and _SHIPPED[0] == generation():
        return [dict(e) for e in _SHIPPED[1]]
    out, seen = [], set()
    for be in registered():
        try:
            entries = be.geometry_entries()
        except Exception:  # noqa: BLE001 - a plugin's broken table: its rows get no options
            continue
        for e in entries:
            key = json.dumps(e, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                out.append(e)
    _SHIPPED[:] = [generation(), out]
    return [dict(e) for e in out]


_SHIPPED: list = []  # [registry generation, entries]: shipped_geometry's last answer


def _options(row: dict, db: list[dict]) -> tuple[tuple[str, object], ...]:
    """The tiles' compile-time options from the geometry database entry the row ran with."""
    engine = "numba" if row["backend"] == "numba-cuda" else "gemm-c"
    best, score = {}, -1
    for e in db:
        if e.get("kernels") != engine or e.get("family") != row["kernel"]:
            continue
        if e.get("dtype", row["dtype"]) != row["dtype"]:
            continue
        if list(e["block_tile"]) != list(row["block_tile"]):
            continue
        if list(e.get("thread_tile", (1, 1))) != list(row["thread_tile"]):
            continue
        if "device" in e and e["device"] != row["device"]:
            continue
        if "kind" in e and e["kind"] != row.get("device_kind"):
            continue
        if e.get("backend", row["backend"]) != row["backend"]:
            continue
        sc = 2 * ("device" in e) + ("backend" in e)
        if sc > score:
            best, score = e, sc
    return tuple(sorted(best.get("options", {}).items()))


def plan_for_row(
    e: dict, device: DeviceSpec, db: list[dict] | None = None, options: dict | None = None
) -> Plan:
    """The plan of a result row (its ``extra_info``) rebuilt with today's model on
    ``device``; tile options as given, else as the row recorded them (resolved: split-K a
    number), else from the geometry database. A batched row gets the whole launch
    (:func:`tiledmm.planner.make.batch_plan`)."""
    if options is None and isinstance(e.get("options"), dict):
        options = e["options"]
    if options is not None:
        opts = tuple(sorted(options.items()))
    else:
        if db is None:
            db = shipped_geometry()
        opts = _options(e, db)
    geo = Geometry(tuple(e["block_tile"]), tuple(e["thread_tile"]), opts)
    plan = make_plan(e["m"], e["n"], e["k"], dtype=e["dtype"], kernel=e["kernel"],
                     device=device, geometry=geo, backend=e["backend"])  # fmt: skip
    return batch_plan(plan, int(e.get("batch") or 1))


def model_counters(plan: Plan) -> dict[str, float]:
    """The model's numbers for a GPU plan under Nsight Compute's metric names."""
    s = {"float16": 2, "float32": 4, "float64": 8}[plan.dtype]
    c_bytes = plan.m * plan.n * s
    get = lambda name: plan.level(name).amount if plan.level(name) else 0.0  # noqa: E731
    fma = plan.padded_shape[0] * plan.padded_shape[1] * plan.padded_shape[2]
    if plan.kernel == "naive":
        fma = plan.m * plan.n * plan.k
    pipe = "dfma" if plan.dtype == "float64" else "ffma"
    dram = plan.level("DRAM")
    parts = dict(dram.parts) if dram else {}
    read = parts.get("read", get("DRAM") - c_bytes)
    loads, stores = _part(plan, "shared memory", "loads"), _part(plan, "shared memory", "stores")
    data_pipe = get("shared memory")  # staged families: shared loads, stores and fills
    out = {
        "dram__bytes_read.sum": read,
        "dram__bytes_write.sum": parts.get("written", float(c_bytes)),
        "lts__t_bytes.sum": get("L2"),  # tile loads and the C stores' sectors
        "l1tex__t_bytes.sum": get("L1"),
        # C's store sectors as the SM issues them and as the L2 receives them (warps.py)
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": _part(plan, "L1", "C stores") / 32,
        "lts__t_sectors_srcunit_tex_op_write.sum": _part(plan, "L2", "C stores") / 32,
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": loads / 128,
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": stores / 128,
        "l1tex__data_pipe_lsu_wavefronts.sum": data_pipe / 128,
        "smsp__inst_executed.sum": get("issue"),
        f"smsp__sass_thread_inst_executed_op_{pipe}_pred_on.sum": float(fma),
        "predicted_seconds": plan.predicted_seconds,
    }
    return {k: v for k, v in out.items() if v or k.startswith(("dram", "lts", "l1tex__t_"))}


def _part(plan: Plan, level: str, part: str) -> float:
    """One part of a level's amount (0 where the level or the part is absent)."""
    lv = plan.level(level)
    return dict(lv.parts).get(part, 0.0) if lv else 0.0


def compare_counters(path: Path, device: DeviceSpec | None = None) -> list[dict]:
    """Per committed counter row: the plan rebuilt on ``device`` (the reference H200), and
    model / counter per metric that both have."""
    data = json.loads(Path(path).read_text())
    dev = device or reference_h200()
    out = []
    for r in data["rows"]:
        plan = plan_for_row(r, dev, options=r.get("options", {}))
        model = model_counters(plan)
        ratios = {k: model[k] / v for k, v in r["counters"].items() if k in model and v}
        out.append({"row": r, "model": model, "ratios": ratios, "plan": plan})
    return out


def _cpu_device(info: dict) -> DeviceSpec:
    known = {f.name for f in fields(DeviceSpec)}
    d = {k: v for k, v in info.items() if k in known}
    for key in ("caches", "peak_flops", "extra", "host_costs"):  # host costs: measured ones
        d[key] = tuple(sorted(dict(d.get(key, {})).items()))
    spec = DeviceSpec(**d)
    lanes = max(1, spec.simd_bytes // 4)
    # the vendor GEMM (OpenBLAS) runs at ~0.9 of the FMA peak (PERFORMANCE.md: 84-94%)
    fma32 = spec.peak("float32") / 0.9
    clock = fma32 / (spec.compute_units * lanes * 4)
    levels, issue = cpu_levels(spec.compute_units, clock, spec.simd_bytes, spec.bandwidth)
    # levels the recorded calibration measured replace the estimates (older files have none)
    measured = {k: float(v) for k, v in dict(info.get("levels", {})).items()}
    if not spec.ceilings_measured:
        measured = {}
    return replace(
        spec,
        levels=tuple((dict(levels) | measured).items()),
        issue_rate=issue,
        latency=CPU_DRAM_LATENCY,
        fma_peaks=(("float32", fma32), ("float64", fma32 / 2)),
    )


def check_rows(
    path: Path, db: list[dict] | None = None, reference: DeviceSpec | None = None
) -> tuple[list[Row], bool]:
    """(rows, is_gpu) of one results file, each rebuilt and predicted (GPU rows on
    ``reference``, default :func:`reference_h200`)."""
    data = json.loads(Path(path).read_text())
    if db is None:
        db = shipped_geometry()
    devices = data.get("machine_info", {}).get("tiledmm", {}).get("devices", {})
    out, gpu = [], False
    for b in data.get("benchmarks", []):
        e = b["extra_info"]
        info = devices.get(e["backend"], {})
        if e.get("device_kind") == "gpu":
            gpu = True
            ref = reference or reference_h200()
            dev = replace(ref, launch_overhead=info.get("launch_overhead", 5e-6))
        else:
            dev = _cpu_device(info)
            if "device events" in e.get("timer", ""):  # timed on the device: no host cost
                dev = replace(dev, launch_overhead=0.0, host_costs=())
        plan = plan_for_row(e, dev, db)
        binding = plan.binding.name if plan.binding else plan.bound
        predicted = plan.predicted_seconds
        out.append(
            Row(
                Path(path).name,
                e["backend"],
                e["kernel"],
                e["dtype"],
                (e["m"], e["n"], e["k"]),
                e["seconds"],
                predicted,
                binding,
            )
        )
    return out, gpu


def check_files(
    paths: list[Path], reference: DeviceSpec | None = None
) -> list[tuple[Row, tuple[float, float] | None]]:
    """Every row of ``paths`` with the band it is held to."""
    rows = []
    for p in paths:
        found, gpu = check_rows(p, reference=reference)
        rows += [(r, band(r, gpu)) for r in found]
    return rows


def format_table(rows: list[tuple[Row, tuple[float, float] | None]]) -> str:
    """A Markdown table (ratio per row, in/out of band) and the worst case per band."""
    lines = [
        "| file | backend | kernel | dtype | shape | measured | predicted | ratio | bound | band |",
        "|---|---|---|---|---|---:|---:|---:|---|---|",
    ]
    worst: dict[tuple, tuple[float, Row]] = {}
    for r, bnd in rows:
        ratio = r.ratio
        flag = "-" if bnd is None else ("ok" if bnd[0] <= ratio <= bnd[1] else "OUT")
        shape = "x".join(map(str, r.shape))
        rs = f"{ratio:.2f}" if ratio else "not predicted"
        pred = f"{r.predicted * 1e3:.4g} ms" if r.predicted else "-"
        lines.append(
            f"| {r.file} | {r.backend} | {r.kernel} | {r.dtype} | {shape} | "
            f"{r.measured * 1e3:.4g} ms | {pred} | {rs} | {r.binding} | {flag} |"
        )
        if bnd is not None:
            dev = abs(_log(ratio))
            if bnd not in worst or dev > worst[bnd][0]:
                worst[bnd] = (dev, r)
    for bnd, (_, r) in sorted(worst.items()):
        inside = sum(1 for x, b in rows if b == bnd and bnd[0] <= x.ratio <= bnd[1])
        total = sum(1 for _, b in rows if b == bnd)
        lines.append(
            f"\nband {bnd}: {inside}/{total} rows inside; worst {r.ratio:.2f} "
            f"({r.backend} {r.kernel} {r.dtype} {'x'.join(map(str, r.shape))})"
        )
    return "\n".join(lines)


def _log(x: float) -> float:
    import math

    return math.log(x)


def main(argv: list[str] | None = None) -> int:
    """``python -m tiledmm.report.modelcheck [--calibration FILE] [files]``: the table; with a
    calibration file, on its H200 record's ceilings, printing them as H200_MEASURED first.
    Without files: the committed ones (``COMMITTED``, from the current folder: a checkout);
    where there are none, one line saying so and exit status 2."""
    args = list(argv if argv is not None else sys.argv[1:])
    reference = None
    if "--calibration" in args:
        i = args.index("--calibration")
        if i + 1 >= len(args):
            print("modelcheck: --calibration needs a file (a calibration.json)", file=sys.stderr)
            return 2
        cal_path = Path(args[i + 1])
        del args[i : i + 2]
        records, problems = read_calibration(cal_path)
        record = records.get("NVIDIA H200")
        if record is None:
            why = "; ".join(problems) or "no 'NVIDIA H200' record"
            print(f"modelcheck: {cal_path}: {why}", file=sys.stderr)
            return 2
        measured = measured_from_record(record)
        print("H200_MEASURED: dict[str, Any] = " + json.dumps(measured, indent=4) + "\n")
        reference = reference_h200(measured)
    paths = [Path(a) for a in args] or [Path(n) for n in COMMITTED if Path(n).exists()]
    if not args:  # the Hopper kernel's sweeps (issue 38) too
        paths += [Path(n) for n in COMMITTED_HOPPER if Path(n).exists()]
    if not paths:
        print("modelcheck: no results files given, and no committed ones here (benches/results/"
              " of a tiledmm checkout): pass FILES", file=sys.stderr)  # fmt: skip
        return 2
    probes = [p for p in paths if is_probe(p)]
    paths = [p for p in paths if p not in probes]
    try:
        if paths:
            print(format_table(check_files(paths, reference)))
        if probes:
            print(format_section([r for p in probes for r in hopper_rows(p, reference)]))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a missing or foreign file
        what = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) else repr(exc)
        print(f"modelcheck: cannot check {what}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
