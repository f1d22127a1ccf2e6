"""How long a case takes, and so how it is measured: the rules ``tiledmm bench`` and
``pytest benches/`` share.

- :class:`Pace` predicts one call of a case from the same backend, family and dtype's rate on
  the shape measured before it, and skips a case predicted over the per-call cap
  (``Settings.max_call_seconds``: 5 s, 0.5 s with ``--quick``). Naive kernels at 2048^3 on a
  2-core CPU (10-25 s a call) would otherwise dominate the run. A prediction can fall short (a
  naive kernel slows more than its FLOPs grow once its operands leave the caches; a busy
  machine): a case whose correctness check itself took over the cap is not timed either, unless
  it was the first shape of its kind (that call may have compiled the kernel).
- :func:`time_fn` sizes the timed rounds to the time budget. A call that alone outlasts the
  budget needs no warm-up after the check that just ran it, and three rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Pace", "time_fn", "SLOW_ROUNDS"]

#: Rounds of a call that alone outlasts the time budget (at most ``min_rounds``).
SLOW_ROUNDS = 3


class Pace:
    """The last measured FLOP/s per (backend, kernel family, dtype)."""

    def __init__(self) -> None:
        self.rates: dict[tuple[str, str, str], float] = {}

    def record(self, backend: str, kernel: str, dtype: str, flops: float, seconds: float) -> None:
        if seconds > 0:
            self.rates[(backend, kernel, dtype)] = flops / seconds

    def predict(self, backend: str, kernel: str, dtype: str, flops: float) -> float | None:
        """Seconds for one call of ``flops``, or None before any shape of the kind ran."""
        rate = self.rates.get((backend, kernel, dtype))
        return flops / rate if rate else None

    def skip_reason(self, backend: str, kernel: str, dtype: str, flops: float,
                    cap: float) -> str | None:  # fmt: skip
        """Why a case is skipped (one call predicted over ``cap`` seconds), or None."""
        est = self.predict(backend, kernel, dtype, flops)
        if est is not None and est > cap:
            return f"about {est:.3g} s per call, over the {cap} s cap"
        return None

    def after_check(self, backend: str, kernel: str, dtype: str, flops: float, seconds: float,
                    cap: float) -> str | None:  # fmt: skip
        """Why a case whose check call took ``seconds`` is not timed, or None: over ``cap``
        after a smaller shape of its kind ran (then the next shape is predicted from it)."""
        if (backend, kernel, dtype) not in self.rates or not seconds > cap:
            return None
        self.record(backend, kernel, dtype, flops, seconds)
        return f"its check call took {seconds:.3g} s, over the {cap} s cap"


def time_fn(be: Any, fn: Callable[[], Any], settings: Any, first: float | None = None,
            rest: Callable[[int], list[float]] | None = None) -> list[float]:  # fmt: skip
    """Seconds per call via ``be.timings``: one probe sizes the round count to
    ``settings.budget`` (within ``min_rounds..max_rounds``; :data:`SLOW_ROUNDS` at least when
    the probe alone outlasts the budget).

    ``first``: the seconds of a call just made on the same arrays (the correctness check):
    over the budget, it was the warm-up. ``rest(n)``: times n more calls (default
    ``be.timings``; ``benches/`` passes pytest-benchmark's rounds, so nothing runs twice)."""
    slow = first is not None and first > settings.budget
    times = list(be.timings(fn, repeat=1, warmup=0 if slow else settings.warmup))
    low = (
        min(settings.min_rounds, SLOW_ROUNDS) if times[0] > settings.budget else settings.min_rounds
    )
    rounds = max(low, min(settings.max_rounds, int(settings.budget / max(times[0], 1e-9))))
    if rounds > 1:
        more = rest or (lambda n: be.timings(fn, repeat=n, warmup=0))
        times += more(rounds - 1)
    return times
