"""The decoded shape of Prometheus samples, shared by every input path."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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


@dataclass(frozen=True, slots=True)
class SampleBatch:
    """Series of one sample each, in columns: ``labels[i]`` was sampled ``values[i]`` at
    ``timestamps[i]`` (ms). The shape Prometheus sends, as the compiled decoder hands it
    out (``WriteRequestDecoder.decode_batch``) so the frame builder can work on arrays
    (``FrameBuilder.add_batch``); ``series()`` is the same data as ``Series``.
    """

    labels: list[dict[str, str]]
    timestamps: np.ndarray  # int64
    values: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.labels)

    def series(self) -> list[Series]:
        return [
            Series(labels, [(ts, value)])
            for labels, ts, value in zip(
                self.labels, self.timestamps.tolist(), self.values.tolist(), strict=True
            )
        ]
