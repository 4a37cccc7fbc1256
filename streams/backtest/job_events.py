"""The scheduler's job lifecycle events, handed to the backtest's ``Pipeline`` in event time.

The file is JSON lines, one event per line in the worker's schema (docs/architecture.md,
"Job lifecycle events"; ``detectors.advisors.jobs.JobEvent``). The live worker gets an
event when the scheduler sends it, by which time it has scored the buckets that
history before the event completed. Here the history's clock stands in: an event
at ``ts`` goes to the pipeline after every round at or before ``ts`` and before the
first round later than ``ts``; the events after the last round go once the
history is flushed, those at or after the range's end not at all (nothing of the
history is left to see with them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from detectors.advisors.jobs import JobEvent
from detectors.vocabulary import Advice
from streams.backtest.events import read_lines
from streams.worker.pipeline import Pipeline

__all__ = ["JobEventFeed", "load_job_events"]


def load_job_events(path: str | Path) -> list[JobEvent]:
    """Every event in ``path`` in time order (ties in file order); ``EventsFileError`` names
    the file and line of one that does not parse."""
    return sorted(read_lines(path, JobEvent.from_dict, csv_ok=False), key=lambda e: e.ts)


class JobEventFeed:
    """``score_rounds``' ``before_round``: the events the clock has passed, each one's advice
    to ``on_advice``."""

    def __init__(
        self, events: Iterable[JobEvent], end_ms: int, on_advice: Callable[[Advice], None]
    ) -> None:
        self._events = sorted((e for e in events if e.ts < end_ms), key=lambda e: e.ts)
        self._next = 0
        self._on_advice = on_advice

    @property
    def handed(self) -> int:
        return self._next

    def __call__(self, pipeline: Pipeline, t_ms: int | None) -> None:
        events = self._events
        while self._next < len(events) and (t_ms is None or events[self._next].ts < t_ms):
            for advice in pipeline.add_job_event(events[self._next]):
                self._on_advice(advice)
            self._next += 1
