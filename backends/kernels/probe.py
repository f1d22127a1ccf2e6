"""The calibration probes' text (``probes.cl``: the level probes ``tiledmm calibrate`` runs
through a backend's ``compile_probe``) made complete for a compiler: ``gemm_common.h`` inlined
and the host's defines prepended, as :func:`tiledmm_backends.kernels.source` does for the GEMM
families."""

from __future__ import annotations

from pathlib import Path

__all__ = ["probe_source", "has_probe"]

_HEADER = Path(__file__).resolve().parent / "gemm_common.h"
PROBES = Path(__file__).resolve().parent / "probes.cl"


def probe_source(source: str | None, defines: dict[str, int]) -> str:
    """``source`` (None: ``probes.cl``) with the header inlined and ``defines`` as
    ``#define`` lines in front."""
    source = PROBES.read_text() if source is None else source
    body = source.replace('#include "gemm_common.h"', _HEADER.read_text())
    return "".join(f"#define {k} {int(v)}\n" for k, v in sorted(defines.items())) + body


def has_probe(kernel: str, source: str | None = None) -> bool:
    """Whether ``source`` (None: ``probes.cl``) defines the probe ``kernel``: a backend asked
    for another backend's probe (numba-cpu's ``register_block``) answers None instead of
    handing its compiler a kernel that is not there."""
    text = PROBES.read_text() if source is None else source
    return f"KERNEL {kernel}(" in text or f"void {kernel}(" in text
