"""Run samples through the live code path in one process, on a simulated clock.

Samples → ``FrameBuilder`` (the ingest's) → ``Pipeline`` (the worker's) →
alert changes. No Kafka, no HTTP: the same objects, called in the same order,
with event time standing in for the wall clock. ``peerwatch simulate --direct``,
the demo's quick check and the evaluator use it; an integration test compares
it with the real Kafka path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from detectors.vocabulary import AlertChange
from streams.frames import Frame
from streams.gc_pause import gc_paused
from streams.ingest.builder import AddStats, FrameBuilder, frame_builder_for
from streams.ingest.series import SampleBatch, Series
from streams.settings import Settings
from streams.worker.pipeline import Pipeline, Scored


@dataclass
class OfflineRun:
    changes: list[AlertChange] = field(default_factory=list)
    buckets: int = 0
    frames: int = 0
    late_frames: int = 0


def build_pair(settings: Settings) -> tuple[FrameBuilder, Pipeline]:
    """The ingest's frame builder and the worker's pipeline, configured alike."""
    return frame_builder_for(settings), Pipeline.from_settings(settings)


def score_rounds(
    rounds: Iterable[tuple[int, list[Series] | SampleBatch]],
    settings: Settings,
    before_round: Callable[[Pipeline, int | None], None] | None = None,
    on_added: Callable[[AddStats], None] | None = None,
) -> Iterator[tuple[list[Frame], list[Scored]]]:
    """For every scrape round: the frames it closed and the buckets they completed.

    A round is its ``Series`` or, as the simulator's ``generate_batches`` makes it, a
    ``SampleBatch`` (columns: ``FrameBuilder.add_batch`` reads them without a ``Series``
    per sample; the same frames).

    ``before_round(pipeline, t_ms)``, if given, runs before each round's samples go in
    (everything of earlier rounds is scored by then), and once more with ``None``
    after the last flush: the moment to hand the pipeline inputs that are not samples
    (e.g. job events), in event time. ``on_added``, if given, gets what the builder did
    with each round's samples (accepted, dropped by reason).
    """
    builder, pipeline = build_pair(settings)
    now_s = 0.0
    pending = iter(rounds)
    while True:
        # A round is ~10,000 Series, each a few GC-tracked objects alive until the
        # builder has read them. With the collector on they outlive a collection or
        # two, and each of those rescans them and promotes them towards the old
        # generation, whose full collections then rescan everything alive: about a
        # third of an evaluation's time. So the collector waits from the round's
        # making until the builder has it; the Series die by refcount, and what the
        # builder keeps (contribution tuples, partial frames) is collected as usual.
        with gc_paused():
            item = next(pending, None)
            if item is None:
                break
            t_ms, series = item
            if before_round is not None:
                before_round(pipeline, t_ms)
            now_s = t_ms / 1000.0
            added = builder.add_batch(series, now_s=now_s)
            if on_added is not None:
                on_added(added)
            del item, series
        frames = builder.close_due_by_watermark(now_s=now_s, idle_s=settings.ingest_idle_flush_s)
        yield frames, _feed(pipeline, frames, now_s)
    frames = builder.flush_all()
    yield frames, _feed(pipeline, frames, now_s + settings.grace_s)
    if before_round is not None:
        before_round(pipeline, None)


def _feed(pipeline: Pipeline, frames: list[Frame], now_s: float) -> list[Scored]:
    for f in frames:
        pipeline.add(f, now_s)
    scored: list[Scored] = []
    for group in {f.group for f in frames} | set(pipeline.groups_waiting(now_s)):
        scored.extend(pipeline.due(group, now_s))
    return scored


def run_offline(
    rounds: Iterable[tuple[int, list[Series] | SampleBatch]], settings: Settings
) -> OfflineRun:
    run = OfflineRun()
    for frames, scored in score_rounds(rounds, settings):
        run.frames += len(frames)
        for item in scored:
            run.buckets += not item.ended
            run.changes.extend(item.changes)
    return run
