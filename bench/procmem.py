"""A process's resident memory, and whether it grew over a run (overload and soak share it)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def rss_mib(pid: int) -> float:
    """``VmRSS`` of ``pid`` from ``/proc``; OSError if the process is gone."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ProcessLookupError(f"no VmRSS for pid {pid} (a zombie)")


def growth_mib(values: Sequence[float]) -> float | None:
    """Median of the last third minus median of the first third (a GC or a burst at one
    instant moves neither); None under three values."""
    third = len(values) // 3
    if third == 0:
        return None
    return statistics.median(values[-third:]) - statistics.median(values[:third])
