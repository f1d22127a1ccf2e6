"""The CLI's exit statuses, in one place, so a script can tell why a command stopped."""

from __future__ import annotations

__all__ = ["OK", "ERROR", "USAGE", "WRONG_RESULT", "INTERRUPTED"]

OK = 0
#: An error stopped the command (one line on stderr): bad input, a crash, nothing measured.
ERROR = 1
#: A malformed command line (argparse).
USAGE = 2
#: ``tiledmm bench``: the run went to the end and wrote everything, but a case failed its
#: check (a wrong result, or a kernel that raised): listed as FAILED and under
#: ``tiledmm.failures`` in the JSON.
WRONG_RESULT = 3
#: Ctrl-C.
INTERRUPTED = 130
