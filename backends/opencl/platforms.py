"""Which OpenCL devices the backend may use: those whose compiler builds and runs a trivial
kernel (probed once per device, cached for the process). A device failing the probe is
skipped with its reason recorded, never used; where none passes, the backend is unavailable
with one sentence naming the cause and the fix (:func:`unusable_reason`).

Why: pyopencl's wheel bundles a PoCL (3.0-rc2, LLVM 14) whose LLVM does not know CPUs newer
than itself (Zen 5: ``error: unknown target CPU 'generic'``, pocl#1049). A newer PoCL from the
system (Debian/Ubuntu: ``apt-get install pocl-opencl-icd``, registered in
``/etc/OpenCL/vendors``) then sits beside it as a second platform, and the probe picks it.

:func:`prepare_icd` runs before pyopencl's ICD loader first enumerates platforms (at this
backend's import): where the user has not set ``OCL_ICD_VENDORS``, the system directory holds
ICDs, and the loader bundled with pyopencl was built without that directory, it points
``OCL_ICD_VENDORS`` there (recent pyopencl wheels read it themselves: nothing is set then).
``TILEDMM_OPENCL_SYSTEM_ICD=0`` turns that off.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SYSTEM_VENDORS", "ICD_ENV", "OPT_OUT", "prepare_icd", "prepare_once", "icd_note",
           "probe", "probed", "build_probe", "label", "unusable_reason", "forget"]  # fmt: skip

SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
ICD_ENV = "OCL_ICD_VENDORS"
OPT_OUT = "TILEDMM_OPENCL_SYSTEM_ICD"
PROBE_SOURCE = "__kernel void tiledmm_probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"
FIX = (
    "install a PoCL whose LLVM knows this CPU: on Debian/Ubuntu `apt-get install "
    "pocl-opencl-icd` (it registers in /etc/OpenCL/vendors, which pyopencl's loader reads, or "
    "tiledmm points it there; else set OCL_ICD_VENDORS=/etc/OpenCL/vendors), or a newer pocl "
    "(conda install -c conda-forge pocl)"
)

_probed: dict[int, str | None] = {}  # device pointer -> None (usable) or why not
_icd: list[str] = []  # what prepare_icd did, once per process


def _bundled_loader(spec_name: str = "pyopencl") -> Path | None:
    """The ICD loader in pyopencl's wheel (``pyopencl/.libs/libOpenCL*``), found without
    importing pyopencl; None for a pyopencl linked against the system's loader."""
    try:
        spec = importlib.util.find_spec(spec_name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for where in spec.submodule_search_locations:
        found = sorted(Path(where, ".libs").glob("libOpenCL*"))
        if found:
            return found[0]
    return None


def prepare_icd(environ: Any = None, system: Path = SYSTEM_VENDORS,
                loader: Path | None = None) -> str:  # fmt: skip
    """Point ``OCL_ICD_VENDORS`` at the system ICD directory where that is needed and safe
    (see the module docstring); returns what it did, in words ("" when nothing). Call it
    before pyopencl's first ``get_platforms`` in the process (the loader reads the variable
    once)."""
    env = os.environ if environ is None else environ
    if env.get(ICD_ENV) or env.get(OPT_OUT, "").strip().lower() in ("0", "false", "no", "off"):
        return ""
    try:
        if not any(system.glob("*.icd")):
            return ""
    except OSError:
        return ""
    loader = loader or _bundled_loader()
    if loader is None:
        return ""  # pyopencl uses the system's loader, which reads the system directory
    try:
        reads_system = str(system).encode() in loader.read_bytes()
    except OSError:
        return ""
    if reads_system:
        return ""
    env[ICD_ENV] = str(system)
    return f"{ICD_ENV}={system} set by tiledmm (pyopencl's bundled loader does not read it)"


def icd_note() -> str:
    """What :func:`prepare_icd` did in this process ("" when nothing)."""
    return _icd[0] if _icd else ""


def prepare_once() -> None:
    """:func:`prepare_icd` once per process (the backend's import calls it)."""
    if not _icd:
        _icd.append(prepare_icd())


def label(dev: Any) -> str:
    """``platform / device (PoCL x.y, LLVM z)`` for messages."""
    version = getattr(dev.platform, "version", "")
    bits = [m.group(0) for m in (re.search(r"PoCL \S+", version), re.search(r"LLVM \S+", version))
            if m]  # fmt: skip
    more = f" ({', '.join(b.rstrip(',') for b in bits)})" if bits else ""
    return f"{dev.platform.name.strip()} / {dev.name.strip()}{more}"


def build_probe(dev: Any) -> None:
    """Build :data:`PROBE_SOURCE` for ``dev`` and run it on one work-item (PoCL compiles the
    kernel for the CPU at the first launch); raises what pyopencl raises."""
    import pyopencl as cl

    ctx = cl.Context([dev])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyopencl's CompilerWarning for a non-empty log
        prg = cl.Program(ctx, PROBE_SOURCE).build()
    queue = cl.CommandQueue(ctx)
    host = np.zeros(1, np.float32)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    prg.tiledmm_probe(queue, (1,), None, buf)
    cl.enqueue_copy(queue, host, buf)
    queue.finish()
    if host[0] != 1.0:
        raise RuntimeError(f"the probe kernel computed {host[0]} instead of 1.0")


def _one_line(exc: BaseException) -> str:
    """The build log's first error line where there is one, else the message's first line."""
    text = str(exc) or type(exc).__name__
    for line in text.splitlines():
        if "error:" in line:
            return line[line.index("error:") :].strip()
    return next((s.strip() for s in text.splitlines() if s.strip()), text)


def probe(dev: Any) -> str | None:
    """None when ``dev`` builds and runs the probe kernel, else why not (one line); once per
    device and process."""
    key = int(getattr(dev, "int_ptr", id(dev)))
    if key not in _probed:
        try:
            build_probe(dev)
            _probed[key] = None
        except Exception as exc:  # noqa: BLE001 - any failure: the device is skipped
            _probed[key] = _one_line(exc)
    return _probed[key]


def probed(dev: Any) -> bool:
    """Whether ``dev`` has been probed in this process."""
    return int(getattr(dev, "int_ptr", id(dev))) in _probed


def forget() -> None:
    """Drop the probe results (tests that replace :func:`build_probe`)."""
    _probed.clear()


def unusable_reason(skipped: list[tuple[str, str]]) -> str:
    """One sentence for a machine where no device passed the probe: each device and why, the
    cause and the fix."""
    what = "; ".join(f"{name}: {why}" for name, why in skipped)
    pocl = any("PoCL" in name or "Portable Computing Language" in name for name, _ in skipped)
    if pocl and any("unknown target CPU" in why for _, why in skipped):
        cause = (
            "PoCL's LLVM cannot target this CPU (the PoCL bundled with pyopencl's wheel is "
            "3.0-rc2 with LLVM 14, older than recent CPUs such as Zen 5, pocl#1049)"
        )
    elif pocl:
        cause = "PoCL cannot compile for this CPU"
    else:
        return f"no OpenCL device here builds a kernel ({what}): install a working driver or PoCL"
    return f"no OpenCL device here builds a kernel ({what}): {cause}; fix: {FIX}"
