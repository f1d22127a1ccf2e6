"""How often one ``tiledmm.matmul`` call enters dispatch and checks its ``kernel`` argument.

    python -m benches.studies.route_counts [--shape 7,5,3]

For each (backend, kernel) of ``numpy``/``auto`` x ``auto``/``tiled``, one call on fresh float32
host operands, every cache cleared first (a call not seen before: the full route), in a fresh
cache directory with first-use tuning off (``TILEDMM_FIRST_USE_TUNING=0``: what the route does,
not what the tuner times). Counted by ``sys.settrace``:

- ``dispatch entries``: calls into a function of ``tiledmm/core/dispatch.py`` from outside it;
- ``dispatch calls``: every call of a function of that module (its own included);
- ``kernel checks``: calls of ``tiledmm.core.semantics.check_kernel`` (today's one check of a
  ``kernel`` argument), and executed lines elsewhere in ``tiledmm/`` that test a kernel name
  against the family list or a backend's ``kernels`` (``kernel not in KERNEL_FAMILIES``, ``fam
  not in be.kernels``), with the function each is in; the line of ``registry.candidates`` that
  keeps the backends having the kernel (``backend="auto"``: a selection, one line event per
  backend) is shown apart.

The second call of each pair is the hot path (a dict lookup): counted too.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

CHECK = re.compile(r"\b(kernel|fam)\s+(not\s+)?in\s+(KERNEL_FAMILIES|\w+\.kernels)\b")


def count(fn) -> dict:
    """Run ``fn`` under a tracer; the counts (see the module docstring)."""
    import tiledmm

    root = str(Path(tiledmm.__file__).parent)
    dispatch = str(Path(root, "core", "dispatch.py"))
    lines: dict[tuple[str, int], bool] = {}
    got = {"entries": Counter(), "calls": 0, "checks": Counter(), "filter": Counter()}

    def is_check(code, line: int) -> bool:
        key = (code.co_filename, line)
        if key not in lines:
            try:
                text = Path(code.co_filename).read_text().splitlines()[line - 1]
            except (OSError, IndexError):
                text = ""
            text = text.split("#")[0]
            lines[key] = bool(CHECK.search(text)) and " for " not in text
        return lines[key]

    def local(frame, event, arg):
        if event == "line" and is_check(frame.f_code, frame.f_lineno):
            where = f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_qualname}"
            if where != "semantics.check_kernel":
                got["filter" if "candidates" in where else "checks"][where] += 1
        return local

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        if not name.startswith(root):
            return None
        if event == "call" and frame.f_code.co_qualname == "check_kernel":
            got["checks"]["semantics.check_kernel"] += 1
        if event == "call" and name == dispatch:
            got["calls"] += 1
            if frame.f_back is None or frame.f_back.f_code.co_filename != dispatch:
                got["entries"][frame.f_code.co_qualname] += 1
        return local

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="7,5,3", help="m,n,k (default 7,5,3)")
    args = p.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split(","))
    os.environ.setdefault("TILEDMM_CACHE_DIR", tempfile.mkdtemp(prefix="tiledmm-route-"))
    os.environ.setdefault("TILEDMM_FIRST_USE_TUNING", "0")
    import tiledmm
    from tiledmm.core import dispatch

    rng = np.random.default_rng(36)
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    for backend in ("numpy", "auto"):
        for kernel in ("auto", "tiled"):
            dispatch.clear_caches()  # plans, backend choices and (by its key) the hot path

            def call(backend=backend, kernel=kernel):
                return tiledmm.matmul(a, b, backend=backend, kernel=kernel)

            for which in ("full route", "hot path"):
                c = count(call)
                entries = sum(c["entries"].values())
                checks = sum(c["checks"].values())
                print(f"backend={backend!r:8} kernel={kernel!r:8} {which:10}: dispatch entered "
                      f"{entries} ({c['calls']} calls) {dict(c['entries'])}; kernel checked "
                      f"{checks} {dict(c['checks'])}; selection {dict(c['filter'])}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
