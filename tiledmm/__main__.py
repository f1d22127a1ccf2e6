"""python -m tiledmm: the same as the `tiledmm` command."""

import sys

from .cli import main

sys.exit(main())
