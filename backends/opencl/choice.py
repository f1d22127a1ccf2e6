"""Which OpenCL device the backend opens: every platform's devices in the loader's order, the
ones whose compiler builds the probe kernel (``platforms.py``), ``TILEDMM_OPENCL_DEVICE``'s
choice among them, and the fork guard (OpenCL cannot run in a child forked after it started)."""

from __future__ import annotations

import os
from functools import cache

from . import platforms
from .state import cl_modules

__all__ = ["ENV", "NoUsableDevice", "FORKED", "RUNTIME", "check_fork", "all_devices", "usable",
           "skipped", "none_usable", "pick"]  # fmt: skip

ENV = "TILEDMM_OPENCL_DEVICE"
platforms.prepare_once()  # before anything in this process enumerates OpenCL platforms


class NoUsableDevice(RuntimeError):
    """OpenCL devices exist, but none builds a kernel (the message says why and the fix)."""


#: whether this process has queried OpenCL ("started"), and whether it is a child forked after
#: its parent did ("forked"): OpenCL cannot run there (see FORKED)
RUNTIME = {"started": False, "forked": False}
FORKED = (
    "OpenCL cannot run in this process: it was forked (os.fork, or multiprocessing's default "
    "'fork' start method on Linux) after OpenCL started in its parent, and the runtime's "
    "threads (PoCL's, a driver's) do not exist in a forked child, so its first call would "
    "hang (a fresh context hangs too); start the workers with the 'spawn' or 'forkserver' "
    "start method (multiprocessing.get_context('spawn')), or use OpenCL in the parent only "
    "after the fork"
)


def _after_fork_in_child() -> None:
    """A child of a process that queried OpenCL: every OpenCL call raises FORKED at once."""
    if RUNTIME["started"]:
        RUNTIME["forked"] = True
        all_devices.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def check_fork() -> None:
    if RUNTIME["forked"]:
        raise RuntimeError(FORKED)


@cache
def all_devices() -> tuple:
    """Every device of every platform, in the loader's order (a platform whose devices cannot
    be listed contributes none)."""
    check_fork()
    cl, _ = cl_modules()
    RUNTIME["started"] = True  # from the first platform query on, a forked child cannot run
    out = []
    for p in cl.get_platforms():
        try:
            out += p.get_devices()
        except Exception:  # noqa: BLE001 - DEVICE_NOT_FOUND and the like
            continue
    return tuple(out)


def usable() -> list:
    """The devices that pass the probe (each probed once per process), in the loader's order."""
    return [d for d in all_devices() if platforms.probe(d) is None]


def skipped() -> list[tuple[str, str]]:
    """(device, why) of every device probed so far that failed."""
    out = []
    for d in all_devices():
        why = platforms.probe(d) if platforms.probed(d) else None
        if why:
            out.append((platforms.label(d), why))
    return out


def none_usable(devs) -> NoUsableDevice:
    return NoUsableDevice(platforms.unusable_reason([(platforms.label(d), platforms.probe(d))
                                                     for d in devs]))  # fmt: skip


def pick(choice: str):
    devs = all_devices()
    if not devs:
        raise RuntimeError("no OpenCL device found")
    if choice:
        if choice.isdigit():
            ok = usable()
            if not ok:
                raise none_usable(devs)
            if int(choice) >= len(ok):
                raise RuntimeError(f"{ENV}={choice}: only {len(ok)} usable OpenCL device(s)")
            return ok[int(choice)]
        matches = [d for d in devs if choice.lower() in f"{d.platform.name} {d.name}".lower()]
        if not matches:
            names = ", ".join(d.name.strip() for d in devs)
            raise RuntimeError(f"{ENV}={choice!r} matches no OpenCL device (found: {names})")
        for d in matches:
            if platforms.probe(d) is None:
                return d
        raise none_usable(matches)
    cl, _ = cl_modules()
    gpus = [d for d in devs if d.type & cl.device_type.GPU]
    for d in gpus + [d for d in devs if d not in gpus]:  # the first usable GPU, else device
        if platforms.probe(d) is None:
            return d
    raise none_usable(devs)
