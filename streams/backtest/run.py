"""History → the ingest's ``FrameBuilder`` → the worker's ``Pipeline``, in event time.

The same objects and the same ``Settings`` as live, called as ``streams.worker.offline``
calls them for the evaluator; only the clock is the history's. Every scored
bucket goes to ``on_scored`` (the report's ``Accumulator``). Memory holds one
chunk of history plus the pipeline's state, whatever the range.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from detectors.advisors.jobs import JobEvent
from detectors.vocabulary import Advice
from streams.backtest.history import (
    BadRange,
    BadSelector,
    ChunkedSource,
    HistoryClient,
    HistorySource,
    LabelInterner,
    NoSeries,
    NothingScored,
    Round,
    TimeRange,
    history_rounds,
    iso_time,
    series_selector,
)
from streams.backtest.job_events import JobEventFeed
from streams.backtest.prometheus import PrometheusSource
from streams.backtest.report import render_html
from streams.backtest.summary import Accumulator, KnownEvent
from streams.backtest.victoriametrics import VictoriaMetricsSource
from streams.catalog import features_for
from streams.deploy_config import catalog_metric_names
from streams.ingest.builder import AddStats
from streams.progress import progress
from streams.settings import Settings
from streams.worker.offline import score_rounds
from streams.worker.pipeline import Scored


@dataclass
class BacktestStats:
    rounds: int = 0
    samples: int = 0  # handed to the frame builder (it may still drop some, e.g. as late)
    accepted: int = 0  # ... the samples it took
    dropped: dict[str, int] = field(default_factory=dict)  # ... and those it did not, by reason
    series: int = 0  # distinct label sets seen
    requests: int = 0  # parts of the split: requests per chunk (more if one was halved)
    frames: int = 0
    buckets: int = 0  # scored group buckets
    changes: int = 0  # alert transitions
    job_events: int = 0  # handed to the pipeline (those at or after the range's end are not)
    seconds: float = 0.0


def run_backtest(
    source: HistorySource,
    time_range: TimeRange,
    settings: Settings,
    on_scored: Callable[[Scored], None],
    on_chunk: Callable[[int], None] | None = None,
    job_events: Sequence[JobEvent] = (),
    on_advice: Callable[[Advice], None] = lambda _: None,
) -> BacktestStats:
    """Score ``time_range`` of ``source``; ``on_chunk(end_ms)`` after each chunk's rounds.

    ``job_events`` go to the same pipeline as the history's clock passes them
    (``streams.backtest.job_events``); their advice (retry steps, the ledger's) to
    ``on_advice``, the buckets' own advice rides on the ``Scored``.

    Raises ``NoSeries`` when the selector matches nothing there (asked first, so a
    55-day run does not stream for nothing) or no sample arrived after all, and
    ``NothingScored`` when samples came but no bucket was scored (the builder's drops
    by reason, and what to change).
    """
    started = time.perf_counter()
    parts = source.split(time_range)
    if not parts:
        raise NoSeries(
            f"{source.what}: no series matches the selector in {time_range} "
            "(the selector is narrowed to the feature catalog's metrics)"
        )
    stats = BacktestStats(requests=len(parts))
    interner = LabelInterner()
    rounds = _counted(history_rounds(source, time_range, interner), stats, source, on_chunk)
    feed = JobEventFeed(job_events, time_range.end_ms, on_advice) if job_events else None

    def added(result: AddStats) -> None:
        stats.accepted += result.accepted
        for reason, n in result.dropped.items():
            stats.dropped[reason] = stats.dropped.get(reason, 0) + n

    for frames, scored in score_rounds(rounds, settings, feed, on_added=added):
        stats.frames += len(frames)
        for item in scored:
            stats.buckets += item.ended is None
            stats.changes += len(item.changes)
            on_scored(item)
    if on_chunk is not None:
        on_chunk(time_range.end_ms)
    stats.series = len(interner)
    stats.job_events = feed.handed if feed is not None else 0
    stats.seconds = time.perf_counter() - started
    if stats.samples == 0:
        raise NoSeries(f"{source.what}: the selector's series have no samples in {time_range}")
    if stats.buckets == 0:
        raise NothingScored(nothing_scored(stats, settings, interner.label_names()))
    return stats


# what to change, per drop reason of the frame builder's (streams.ingest.builder.DROP_REASONS)
_DROP_FIXES = {
    "late": "a bucket ended more than the builder's late horizon (10 min) before the newest "
    "sample: series far out of step with the rest",
    "future": "more than 5 min ahead of the round they came in",
    "series_limit": "raise ingest_max_series_per_node",
    "node_limit": "raise ingest_max_nodes",
    "group_limit": "raise ingest_max_nodes_per_group",
    "feature_limit": "raise ingest_max_features_per_group",
    "unknown_metric": "no feature of the catalog takes these series (their labels fail its match)",
}


def drop_counts(dropped: dict[str, int]) -> str:
    """``no_group 721,800, late 12``: the drops by reason, the most first."""
    ranked = sorted(dropped.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{reason} {n:,}" for reason, n in ranked if n)


def nothing_scored(stats: BacktestStats, settings: Settings, label_names: Iterable[str]) -> str:
    """Why a run that read samples scored no bucket: the frame builder's drops by reason,
    what each says about the series, and what to change (one line)."""
    names = sorted(set(label_names) - {"__name__"})
    carried = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    head = (
        f"no bucket was scored: {stats.samples:,} samples of {stats.series:,} series read, "
        f"{stats.accepted:,} taken by the frame builder"
    )
    held = stats.samples - stats.accepted - sum(stats.dropped.values())
    if held > 0:  # e.g. the last round's, still waiting for their node's group
        head += f", {held:,} still held when the history ended"
    if not stats.dropped:
        return (
            f"{head}, {stats.frames:,} frames built; the range may be shorter than a bucket "
            f"and its grace ({settings.bucket_ms // 1000} s + {settings.grace_s:g} s)"
        )
    why = [f"{head}; dropped: {drop_counts(stats.dropped)}"]
    if stats.dropped.get("no_node"):
        why.append(
            f"no_node: no series carried a node label (node_labels="
            f"[{', '.join(settings.node_labels)}]); the series carry {carried or 'none'}: "
            "pass --node-label NAME"
        )
    if stats.dropped.get("no_group"):
        why.append(
            f"no_group: no series carried a group label (group_labels="
            f"[{', '.join(settings.group_labels)}]); the series carry {carried or 'none'}: pass "
            "--group-label NAME for one they carry, or --extra-label NAME=VALUE for one the "
            "server does not store (Prometheus keeps no external labels: "
            f"--extra-label {settings.group_labels[0]}=<your cluster>)"
        )
    why.extend(
        f"{reason}: {fix}" for reason, fix in _DROP_FIXES.items() if stats.dropped.get(reason)
    )
    return "; ".join(why)


def _counted(
    rounds: Iterator[Round],
    stats: BacktestStats,
    source: HistorySource,
    on_chunk: Callable[[int], None] | None,
) -> Iterator[Round]:
    """``rounds`` as they are, counted; ``on_chunk`` when a round starts a new chunk."""
    chunk_end: int | None = None
    for t_ms, series in rounds:
        if chunk_end is None:
            chunk_end = t_ms + source.chunk_ms
        elif t_ms >= chunk_end:
            if on_chunk is not None:
                on_chunk(chunk_end)
            chunk_end += source.chunk_ms
        stats.rounds += 1
        stats.samples += sum(len(s.samples) for s in series)
        yield t_ms, series


def open_source(
    kind: str,
    url: str,
    selector: str,
    settings: Settings,
    chunk_ms: int,
    extra: Mapping[str, str] | None = None,
) -> ChunkedSource:
    """The history source ``kind`` names, reading only what the feature catalog needs,
    split by the group labels; ``extra`` labels join every series it reads."""
    sources: dict[str, type[ChunkedSource]] = {
        "victoriametrics": VictoriaMetricsSource,
        "prometheus": PrometheusSource,
    }
    if kind not in sources:
        raise BadSelector(f"unknown source {kind!r}: one of {', '.join(sources)}")
    source = sources[kind]
    client = HistoryClient(
        url,
        source.what,
        token=settings.backtest_bearer_token,
        timeout_s=settings.backtest_timeout_s,
    )
    names = catalog_metric_names(features_for(settings))
    series_selector(selector, names)  # the selector's braces, a catalog with metrics
    try:
        return source(
            client,
            selector,
            settings.bucket_ms,
            chunk_ms,
            names=names,
            split_labels=settings.group_labels,
            extra_labels=extra,
        )
    except ValueError as exc:  # a chunk shorter than a bucket
        raise BadRange(str(exc)) from None


def backtest_to(
    out_dir: Path,
    source: ChunkedSource,
    time_range: TimeRange,
    settings: Settings,
    events: list[KnownEvent],
    job_events: Sequence[JobEvent] = (),
) -> tuple[BacktestStats, dict[str, Any]]:
    """Run the backtest with a progress bar; write ``report.json``, then ``report.html``."""
    accumulator = Accumulator(events, settings.bucket_ms)
    chunks = len(list(time_range.chunks(source.chunk_ms)))
    with progress(chunks, "history") as advance:
        stats = run_backtest(
            source,
            time_range,
            settings,
            accumulator.add,
            on_chunk=lambda end_ms: advance(f"to {iso_time(end_ms)}"),
            job_events=job_events,
            on_advice=accumulator.add_advice,
        )
    stats.requests = len(source.parts)  # as the last chunk was asked: halved parts too
    result = accumulator.result()
    result["run"] = {
        "source": source.what,
        "url": source.client.base_url,  # without userinfo
        "selector": source.asked or "{}",
        "query": source.selector,  # narrowed to the catalog's metrics
        "split": [str(part) for part in source.parts],  # one request per chunk each
        "extra_labels": source.extra_labels,
        "range": {"start_ms": time_range.start_ms, "end_ms": time_range.end_ms},
        **asdict(stats),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    (out_dir / "report.html").write_text(render_html(result), encoding="utf-8")
    return stats, result
