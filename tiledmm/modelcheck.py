"""``python -m tiledmm.modelcheck [FILES]``: measured / predicted time of every results row, the
planner's own check (the table of :mod:`tiledmm.report.modelcheck`, under the shorter name)."""

from __future__ import annotations

import sys

__all__: list[str] = []

if __name__ == "__main__":
    from .report.modelcheck import main

    sys.exit(main())
