"""``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID per GPU, not a count: an XID is a *change*."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from detectors.checks import Checked, flag, int_rule, rule
from detectors.state_codec import JsonState, rows
from detectors.xid.events import XidEvent

__all__ = ["XidGaugeParams", "XidGaugeTracker"]


@dataclass(frozen=True)
class XidGaugeParams(Checked):
    """How :class:`XidGaugeTracker` treats a GPU it has no state for.

    ``initial_known`` (default True): a non-zero first value is an XID that
    happened before we looked, not a new one. The gauge keeps the last XID for
    as long as the exporter runs — days — so a worker that restarts without its
    state (or starts fresh) would otherwise re-page every GPU that ever had an
    XID, and those stale events would make the escalator count a second reset
    and isolate healthy nodes. The cost: an XID raised while no tracker state
    existed is missed on the metric path (the kernel-log path and the peer
    detectors still see the fault). Set False for backfills, where the first
    sample lies inside the period under study.
    """

    initial_known: bool = flag(True)


_MAX_XID = 2**31 - 1


class XidGaugeTracker:
    """``DCGM_FI_DEV_XID_ERRORS`` samples → an :class:`XidEvent` per *change* to a non-zero code.

    The gauge holds the last XID per GPU (0 = none yet). A code repeated in
    later scrapes is the same XID; a code that follows another code, or follows
    0 (the exporter restarted), is a new one. Samples older than or as old as
    the GPU's last one are ignored (out-of-order delivery, resends), and so are
    NaN, negative and non-integral values. State holds one (code, ts) per GPU.

    >>> t = XidGaugeTracker(XidGaugeParams(initial_known=False))
    >>> [e.xid if e else None for e in (t.observe("n1", "0", ts, v)
    ...  for ts, v in [(0, 0), (30, 94), (60, 94), (90, 0), (120, 94)])]
    [None, 94, None, None, 94]
    """

    def __init__(self, params: XidGaugeParams | None = None) -> None:
        self.params = params or XidGaugeParams()
        self._last: dict[tuple[str, str], tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def observe(
        self,
        node: str,
        gpu: str,
        ts_ms: int,
        value: float,
        *,
        pci_bus_id: str | None = None,
    ) -> XidEvent | None:
        """Feed one sample; return the XID it reveals, if any."""
        key = (str(node), str(gpu))
        ts = int(ts_ms)
        prev = self._last.get(key)
        if prev is not None and ts <= prev[1]:
            return None
        if prev is not None and type(value) is float and value == prev[0]:
            self._last[key] = (prev[0], ts)  # the same code again (the usual sample): no XID
            return None
        code = _gauge_code(value)
        if code is None:
            return None
        self._last[key] = (code, ts)
        if code == 0:
            return None
        if prev is None:
            if self.params.initial_known:
                return None
            was = "no state"
        elif prev[0] == code:
            return None
        else:
            was = f"was {prev[0]}"
        return XidEvent(
            xid=code,
            source="metric",
            raw=f"DCGM_FI_DEV_XID_ERRORS={code} ({was})",
            node=key[0],
            gpu=key[1],
            ts_ms=ts,
            pci_bus_id=pci_bus_id,
        )

    def prune(self, before_ms: int) -> int:
        """Forget GPUs last sampled before ``before_ms``; return how many were dropped."""
        stale = [k for k, (_, ts) in self._last.items() if ts < before_ms]
        for key in stale:
            del self._last[key]
        return len(stale)

    def to_dict(self) -> dict[str, Any]:
        series = tuple((n, g, v, ts) for (n, g), (v, ts) in sorted(self._last.items()))
        return _GaugeState(series).to_dict()

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], params: XidGaugeParams | None = None
    ) -> XidGaugeTracker:
        tracker = cls(params)
        for node, gpu, value, ts_ms in _GaugeState.from_dict(data).series:
            tracker._last[(node, gpu)] = (value, ts_ms)
        return tracker


@dataclass(frozen=True)
class _Sample(JsonState):
    """One GPU's last gauge reading."""

    node: str
    gpu: str
    value: int = field(metadata=rule(int_rule(minimum=0)))
    ts_ms: int


@dataclass(frozen=True)
class _GaugeState(JsonState):
    """What an :class:`XidGaugeTracker` persists: the last reading per GPU, in (node, gpu) order
    (held as the tracker's tuples: written every bucket, a :class:`_Sample` per GPU would
    be built only to be encoded)."""

    series: tuple[tuple[str, str, int, int], ...] = field(default=(), metadata=rows(_Sample))

    VERSION = ("version", 1)
    LABEL = "XID gauge state"


def _gauge_code(value: object) -> int | None:
    if isinstance(value, bool | str | bytes):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy scalars, Decimal, int, float
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or not number.is_integer():
        return None
    code = int(number)
    return code if 0 <= code <= _MAX_XID else None
