"""First-use tuning off, as in tests/conftest.py (these tests also run on their own)."""

import os

os.environ["TILEDMM_FIRST_USE_TUNING"] = "0"
