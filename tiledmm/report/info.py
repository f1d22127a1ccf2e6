"""``tiledmm info``: every backend, available or "unavailable, because ...", its aliases (and
what each runs), devices, limits, ceilings, and what this device has on record (calibration,
tuning)."""

from __future__ import annotations

import argparse
import json

__all__ = ["cmd_info", "aliases_text"]


def _devices(name: str) -> tuple[list, str]:
    """(devices, "") of an available backend, or ([], why) when its ``devices()`` raises: one
    backend's failing query never hides the others (issue 40)."""
    import tiledmm

    try:
        return list(tiledmm.get_backend(name).devices()), ""
    except Exception as exc:  # noqa: BLE001 - a plugin's query: reported on its row
        return [], f"its devices() failed: {type(exc).__name__}: {exc}"


def cmd_info(args: argparse.Namespace) -> int:
    import tiledmm

    from ..core.registry import alias_target
    from ..tune.provenance import describe, device_record

    rows = tiledmm.backends()
    if args.json:
        out = []
        for r in rows:
            d = dict(r.__dict__)
            d["alias_targets"] = {a: alias_target(a) for a in r.aliases}  # what each one runs
            if r.available:
                be = tiledmm.get_backend(r.name)
                devs, why = _devices(r.name)
                d["devices"] = [dict(dev.to_dict(), tuning=device_record(be, dev))
                                for dev in devs]  # fmt: skip
                if why:
                    d["devices_error"] = why
            out.append(d)
        print(json.dumps(out, indent=2, default=str))
        return 0
    from ..interop.kinds import array_libraries

    libs = ", ".join(f"{n} {v}" if v else n for n, v in array_libraries())
    print(f"array libraries: {libs or 'none'}")
    for r in rows:
        alias = aliases_text(r.name, r.aliases, alias_target)
        trust = "" if r.trusted else ", third-party: ranks after built-ins (TILEDMM_TRUST_PLUGINS)"
        print(f"{r.name}{alias} [{r.plugin}{trust}]")
        if not r.available:
            print(f"  unavailable, because {r.reason}")
            continue
        print(f"  kernels: {', '.join(r.kernels)}; dtypes: {', '.join(r.dtypes)}")
        devs, why = _devices(r.name)
        if why:
            print(f"  devices: unknown, because {why}")
        for dev in devs:
            print(f"  device: {dev.name} ({dev.kind}{', ' + dev.vendor if dev.vendor else ''})")
            print(
                f"    {dev.compute_units} compute units, warp {dev.warp_size}, "
                f"{dev.max_threads_per_block} threads/block, "
                f"{dev.max_shared_per_block // 1024} KiB shared(local)/block"
                + (f", {dev.registers_per_unit} registers/unit" if dev.is_gpu else "")
            )
            if dev.caches:
                print("    caches: " + ", ".join(f"{k} {v // 1024} KiB" for k, v in dev.caches))
            peaks = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in dev.peak_flops)
            print(f"    ceilings: {peaks}, {dev.bandwidth / 1e9:.4g} GB/s ({dev.ceilings_source})")
            for name, bw in dev.levels:
                print(f"    {name}: {bw / 1e9:.4g} GB/s")
            if dev.fma_peaks:
                fma = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in dev.fma_peaks)
                chains = (f"; {dev.fma_accumulators} vector FMA chains fill a core's pipes"
                          if dev.fma_accumulators else "")  # fmt: skip
                print(f"    FMA pipes: {fma} (sustained clock x{dev.sustained:g}{chains})")
            loop = dev.loop_cost(r.name)
            if loop:
                print(f"    register loop (one core, measured): {loop[0] * 1e9:.3g} ns per K step "
                      f"+ {loop[1] * 1e9:.3g} ns per micro-tile column")  # fmt: skip
            for key, value in dev.extra:
                print(f"    {key}: {value}")
            for line in describe(tiledmm.get_backend(r.name), dev):  # calibrated? tuned how?
                print(f"    {line}")
    return 0


def aliases_text(name: str, aliases: tuple[str, ...], target) -> str:
    """The aliases shown beside a backend: a bare alias runs this backend; ``cpu -> numpy``
    runs another one (it ranks first: built-ins before plugins), or no available backend."""
    words = []
    for a in aliases:
        to = target(a)
        words.append(a if to == name else f"{a} -> {to or 'no available backend'}")
    return f" (aliases: {', '.join(words)})" if words else ""
