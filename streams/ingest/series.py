"""The decoded shape of Prometheus samples, shared by every input path."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Series:
    """One time series as remote_write carries it: labels (incl. ``__name__``) and samples.

    ``samples`` are ``(timestamp_ms, value)`` pairs; a value may be NaN, and the
    Prometheus stale marker is a NaN with a specific bit pattern (see
    ``streams.ingest.remote_write.is_stale_marker``).
    """

    labels: dict[str, str]
    samples: list[tuple[int, float]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")
