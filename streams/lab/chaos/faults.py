"""The faults ``peerwatch chaos`` injects, and their schedule syntax.

A schedule is a comma-separated list of ``KIND@AT`` or ``KIND@AT:DURATION``
(seconds of wall time from the start of streaming), e.g.
``kill-worker@20,am-outage@40:300,am-stall@30:20``.
"""

from __future__ import annotations

from dataclasses import dataclass

# kind -> whether it lasts (takes a duration)
KINDS = {
    "kill-worker": False,  # SIGKILL the busiest worker, start it again at once
    "kill-ingest": False,  # SIGKILL the ingest, start it again at once
    "restart-broker": False,  # stop Kafka (controlled shutdown), start it again
    "am-outage": True,  # stop Alertmanager for DURATION s
    "am-stall": True,  # the proxy in front of Alertmanager forwards nothing for DURATION s
    "worker-join": False,  # start one more worker (a rebalance)
    "worker-leave": False,  # stop the busiest worker gracefully (a rebalance)
}


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {', '.join(KINDS)}")
        if self.at_s < 0 or self.duration_s < 0:
            raise ValueError(f"{self.kind}: times must be >= 0")
        if KINDS[self.kind] and self.duration_s <= 0:
            raise ValueError(f"{self.kind} needs a duration: {self.kind}@AT:SECONDS")

    def __str__(self) -> str:
        lasting = f":{self.duration_s:g}" if KINDS[self.kind] else ""
        return f"{self.kind}@{self.at_s:g}{lasting}"


def parse_faults(text: str) -> tuple[Fault, ...]:
    """``"kill-worker@20,am-outage@40:300"`` -> faults sorted by start."""
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, when = item.partition("@")
        if not sep:
            raise ValueError(f"{item!r}: expected KIND@AT or KIND@AT:DURATION")
        at, _, duration = when.partition(":")
        try:
            faults.append(Fault(kind, float(at), float(duration) if duration else 0.0))
        except ValueError as exc:
            raise ValueError(f"{item!r}: {exc}") from exc
    return tuple(sorted(faults, key=lambda f: f.at_s))
