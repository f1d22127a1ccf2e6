"""A busy machine, said out loud: the load average against the CPUs, and the spread of the
vendor GEMM's times.

Other work on a shared machine slows the vendor's multi-threaded GEMM most (its threads wait
for the slowest core), so the *of vendor* column can read 3000% with no other sign. On a
2-core EPYC with one core taken, OpenBLAS's times clustered on multiples of 4 ms: the
scheduler's time slices (CONFIG_HZ=250). ``tiledmm bench`` and ``pytest benches/`` print the
load beside the table and warn with :class:`BusyMachineWarning` when either sign shows.
"""

from __future__ import annotations

import os
import statistics
import warnings
from collections.abc import Iterable, Sequence

__all__ = [
    "BusyMachineWarning",
    "LOAD_SHARE",
    "MIN_LOAD",
    "MAX_SPREAD",
    "TICKS",
    "load_average",
    "cpus",
    "spread",
    "tick_of",
    "load_text",
    "busy_reasons",
    "warn_if_busy",
]

#: Busy: a 1-minute load average, when the run starts, of at least this share of the CPUs ...
LOAD_SHARE = 0.25
#: ... and at least this many cores' worth of other work.
MIN_LOAD = 0.5
#: A timing series is noisy when its interquartile range exceeds this share of its median.
MAX_SPREAD = 0.25
#: Scheduler ticks (CONFIG_HZ = 100, 250, 1000): times that sit on multiples of one were cut
#: into time slices by other work on the same core.
TICKS = (0.010, 0.004, 0.001)


class BusyMachineWarning(UserWarning):
    """Other work shared the machine while it was measured: the timings are skewed."""


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages (empty where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return []


def cpus() -> int:
    """The CPUs the load average counts (all online ones, not this process's affinity)."""
    return os.cpu_count() or 1


def tick_of(times: Sequence[float], share: float = 0.8) -> float | None:
    """The scheduler tick (seconds) whose multiples hold ``share`` of ``times``, on two
    multiples at least, or None. A quiet series spans less than a tick and is never flagged."""
    ts = sorted(t for t in times if t > 0)
    if len(ts) < 5:
        return None
    for q in TICKS:
        if ts[-1] - ts[0] < q:
            continue
        on = [
            round(t / q) for t in ts if round(t / q) >= 1 and abs(t - q * round(t / q)) <= 0.08 * q
        ]
        if len(on) >= share * len(ts) and len(set(on)) >= 2:
            return q
    return None


def spread(times: Sequence[float]) -> dict:
    """``{"spread": IQR / median, "tick": tick_of(times)}`` of one timing series."""
    ts = [t for t in times if t > 0]
    if len(ts) < 4:
        return {"spread": 0.0, "tick": None}
    q1, _, q3 = statistics.quantiles(ts, n=4)
    return {"spread": (q3 - q1) / statistics.median(ts), "tick": tick_of(ts)}


def load_text(start: Sequence[float], end: Sequence[float] = (), ncpus: int | None = None) -> str:
    """One line for beside the table: the load when the run started (and ended) on N CPUs."""
    ncpus = ncpus or cpus()
    if not start:
        return f"load average: not available here ({ncpus} CPUs)"
    text = "load average {} (1, 5, 15 min) when the run started, on {} CPUs".format(
        " / ".join(f"{x:.2f}" for x in start), ncpus
    )
    return text + (f"; {end[0]:.2f} (1 min) when it ended" if end else "")


def busy_reasons(load: Sequence[float], ncpus: int, rows: Iterable[dict]) -> list[str]:
    """Why these timings cannot be trusted, one sentence each (none on a quiet machine).

    ``load``: the load averages when the run started; ``rows``: the results' ``extra_info``
    (``vendor_spread`` and ``vendor_tick`` from :func:`spread` of the vendor's times)."""
    rows = list(rows)
    reasons = []
    cpu = any(r.get("device_kind", "cpu") == "cpu" for r in rows)
    if load and cpu and load[0] >= max(MIN_LOAD, LOAD_SHARE * ncpus):
        reasons.append(
            f"the load average was {load[0]:.2f} on {ncpus} CPUs when the run started: other "
            "work shares the cores, and the vendor GEMM (every core) and each 'of vendor' "
            "figure suffer most; rerun when `uptime` shows a quiet machine"
        )
    vendor: dict[tuple, dict] = {}  # one vendor measurement per backend, dtype and shape
    for r in rows:
        vendor.setdefault(tuple(r.get(x) for x in ("backend", "dtype", "m", "n", "k")), r)
    noisy = [r for r in vendor.values() if (r.get("vendor_spread") or 0) > MAX_SPREAD]
    ticked = [r for r in vendor.values() if r.get("vendor_tick")]
    if noisy or ticked:
        worst = max(noisy or ticked, key=lambda r: r.get("vendor_spread") or 0)
        what = []
        if noisy:
            what.append(
                f"spread over {MAX_SPREAD:.0%} of the median on {len(noisy)} of "
                f"{len(vendor)} shapes (up to {worst['vendor_spread']:.0%}: {_where(worst)})"
            )
        if ticked:
            ticks = sorted({r["vendor_tick"] for r in ticked})
            ms = " or ".join(f"{t * 1e3:g} ms" for t in ticks)
            what.append(f"sat on multiples of {ms} (scheduler time slices) on {len(ticked)}")
        reasons.append(
            "the vendor GEMM's times " + " and ".join(what) + ": other work is taking turns "
            "on the cores, so its rate and every 'of vendor' figure are unreliable"
        )
    return reasons


def _where(r: dict) -> str:
    return f"{r.get('backend')} {r.get('dtype')} {r.get('m')}x{r.get('n')}x{r.get('k')}"


def warn_if_busy(load: Sequence[float], ncpus: int, rows: Iterable[dict]) -> list[str]:
    """:func:`busy_reasons`, each one a :class:`BusyMachineWarning`; returns them."""
    reasons = busy_reasons(load, ncpus, rows)
    for text in reasons:
        warnings.warn(text, BusyMachineWarning, stacklevel=2)
    return reasons
