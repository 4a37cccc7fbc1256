"""Run the simulated cluster: rounds on the simulated clock, ground truth, remote_write replay.

``generate`` yields scrape rounds; ``ground_truth`` lists what an evaluator
scores against; ``post_remote_write`` / ``replay`` send rounds to a
remote_write receiver (``peerwatch ingest``, Prometheus, VictoriaMetrics) the
way Prometheus does: requests of at most ``max_samples_per_send`` samples,
the same bytes retried with exponential backoff on 5xx and network errors
(never dropped), and 4xx treated as final.

A receiver may drop samples too far ahead of its wall clock: replay as fast as
possible (``speed=None``) from a start in the past, or at ``speed=1`` from now.

Errors::

    Exception
     └── RemoteWriteFailed           a request could not be delivered
          ├── RemoteWriteRejected    the receiver answered 4xx (status_code, message)
          └── RemoteWriteUnavailable still 5xx or unreachable after ``max_attempts``
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from detectors.errors import PeerwatchError
from streams.ingest.series import SampleBatch, Series
from streams.lab.simulator.cluster import ClusterSimulator
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.faults import GroundTruth
from streams.lab.simulator.timeline import plan_job
from streams.telemetry.logs import EventLog

log = EventLog(__name__)

REMOTE_WRITE_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
MAX_SAMPLES_PER_SEND = 2000  # Prometheus' queue_config default

Encoder = Callable[[Iterable[Series]], bytes]


# --- rounds ---------------------------------------------------------------------------------


def generate(
    config: ClusterConfig, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[tuple[int, list[Series]]]:
    """``(t_ms, series)`` for every scrape round starting in ``[start_ms, end_ms)``.

    ``start_ms`` defaults to ``config.start_ms``; rounds before it are still
    computed (without building series) so counters and temperatures are what
    a run from the beginning would show. ``end_ms=None`` runs forever.
    """
    return _rounds(config, start_ms, end_ms, ClusterSimulator.scrape)


def generate_batches(
    config: ClusterConfig, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[tuple[int, SampleBatch]]:
    """``generate`` in columns (``ClusterSimulator.scrape_batch``): the same samples in the
    same order, no ``Series``; ``streams.worker.offline.score_rounds`` reads them as they are."""
    return _rounds(config, start_ms, end_ms, ClusterSimulator.scrape_batch)


_Round = TypeVar("_Round")


def _rounds(
    config: ClusterConfig,
    start_ms: int | None,
    end_ms: int | None,
    scrape: Callable[[ClusterSimulator, int], _Round],
) -> Iterator[tuple[int, _Round]]:
    interval = config.interval_ms
    start = config.start_ms if start_ms is None else max(start_ms, config.start_ms)
    first = config.start_ms + -(-(start - config.start_ms) // interval) * interval  # ceil to grid
    sim = ClusterSimulator(config)
    t = config.start_ms
    while t < first:
        sim.advance(t)
        t += interval
    while end_ms is None or t < end_ms:
        yield t, scrape(sim, t)
        t += interval


# --- ground truth ---------------------------------------------------------------------------


def ground_truth(config: ClusterConfig, end_ms: int | None = None) -> list[GroundTruth]:
    """Every fault of ``config`` plus the cluster events it causes, ordered by onset.

    Checkpoint saves are endless, so they are listed only up to ``end_ms``.
    """
    rows = [fault.ground_truth() for fault in config.faults]
    rows += plan_job(config).ground_truth(end_ms)
    return sorted(rows, key=lambda r: (r.onset_ms, r.kind, r.node or ""))


def write_ground_truth(path: str | Path, rows: Iterable[GroundTruth]) -> int:
    """Write ``rows`` as JSON lines; returns how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(asdict(row), sort_keys=True) + "\n")
            count += 1
    return count


def read_ground_truth(path: str | Path) -> list[GroundTruth]:
    """The rows ``write_ground_truth`` wrote."""
    with Path(path).open(encoding="utf-8") as f:
        return [GroundTruth(**json.loads(line)) for line in f if line.strip()]


# --- remote_write ---------------------------------------------------------------------------


class RemoteWriteFailed(PeerwatchError):
    """A remote_write request could not be delivered."""


class RemoteWriteRejected(RemoteWriteFailed):
    """The receiver refused a request with a 4xx status (Prometheus drops such data)."""

    def __init__(self, status_code: int, message: str):
        super().__init__(f"remote_write rejected with HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


class RemoteWriteUnavailable(RemoteWriteFailed):
    """The receiver kept answering 5xx (or could not be reached) for ``max_attempts`` tries."""


def split_samples(series: Iterable[Series], max_samples: int) -> Iterator[list[Series]]:
    """Batches of series with at most ``max_samples`` samples each (a long series is cut)."""
    if max_samples < 1:
        raise ValueError("max_samples must be >= 1")
    batch: list[Series] = []
    room = max_samples
    for s in series:
        samples = s.samples
        while samples:
            if len(samples) <= room:
                batch.append(s if samples is s.samples else Series(s.labels, samples))
                room -= len(samples)
                samples = []
            else:
                batch.append(Series(s.labels, samples[:room]))
                samples = samples[room:]
                room = 0
            if room == 0:
                yield batch
                batch, room = [], max_samples
    if batch:
        yield batch


async def _post_with_retry(
    url: str,
    body: bytes,
    client: httpx.AsyncClient,
    *,
    min_backoff_s: float,
    max_backoff_s: float,
    max_attempts: int | None,
) -> None:
    backoff = min_backoff_s
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await client.post(url, content=body, headers=REMOTE_WRITE_HEADERS)
        except httpx.TransportError as exc:
            status: int | str = type(exc).__name__
        else:
            if response.status_code < 300:
                return
            if response.status_code < 500:
                raise RemoteWriteRejected(response.status_code, response.text.strip())
            status = response.status_code
        if max_attempts is not None and attempt >= max_attempts:
            raise RemoteWriteUnavailable(
                f"remote_write to {url} still failing after {attempt} attempts ({status})"
            )
        log.warning(
            "remote_write_retry", url=url, status=status, attempt=attempt, backoff_s=backoff
        )
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2.0, max_backoff_s)


async def post_remote_write(
    url: str,
    series: Iterable[Series],
    client: httpx.AsyncClient,
    *,
    max_samples_per_send: int = MAX_SAMPLES_PER_SEND,
    encode: Encoder | None = None,
    min_backoff_s: float = 0.03,
    max_backoff_s: float = 5.0,
    max_attempts: int | None = None,
) -> int:
    """POST ``series`` as remote_write 1.0 requests; returns how many requests were sent.

    Each request holds at most ``max_samples_per_send`` samples. A 5xx answer
    or a network error retries the same bytes with exponential backoff
    (``min_backoff_s`` doubling up to ``max_backoff_s``), forever unless
    ``max_attempts`` is given (then ``RemoteWriteUnavailable``); a 4xx answer raises
    ``RemoteWriteRejected`` with the receiver's message. ``encode`` defaults
    to ``streams.ingest.remote_write.encode_write_request``.
    """
    if encode is None:
        from streams.ingest.remote_write import encode_write_request

        encode = encode_write_request
    requests = 0
    for batch in split_samples(series, max_samples_per_send):
        await _post_with_retry(
            url,
            encode(batch),
            client,
            min_backoff_s=min_backoff_s,
            max_backoff_s=max_backoff_s,
            max_attempts=max_attempts,
        )
        requests += 1
    return requests


@dataclass(frozen=True)
class ReplayStats:
    """What ``replay`` sent."""

    rounds: int
    samples: int
    requests: int


async def replay(
    url: str,
    config: ClusterConfig,
    start_ms: int | None = None,
    end_ms: int | None = None,
    speed: float | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    max_samples_per_send: int = MAX_SAMPLES_PER_SEND,
    encode: Encoder | None = None,
    min_backoff_s: float = 0.03,
    max_backoff_s: float = 5.0,
    not_ahead_of: Callable[[], float] | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> ReplayStats:
    """Send the rounds of ``generate(config, start_ms, end_ms)`` to ``url``.

    ``not_ahead_of`` (e.g. ``time.time``) holds each round back until that
    clock has passed its end, so a fast replay that catches up with the present
    continues in real time instead of running into the future.
    ``on_round(t_ms, samples)`` is called after each round is delivered.

    With ``speed`` a round is sent once ``speed`` x real time has passed its
    end (when all its scrapes have happened); ``None`` sends as fast as the
    receiver accepts. A round that is late is sent at once. Retries as
    ``post_remote_write`` does; a 4xx stops the replay with ``RemoteWriteRejected``.
    """
    if speed is not None and speed <= 0:
        raise ValueError("speed must be > 0 (or None for as fast as possible)")
    if client is None:
        async with httpx.AsyncClient(timeout=30.0) as own_client:
            return await replay(
                url,
                config,
                start_ms,
                end_ms,
                speed,
                client=own_client,
                max_samples_per_send=max_samples_per_send,
                encode=encode,
                min_backoff_s=min_backoff_s,
                max_backoff_s=max_backoff_s,
                not_ahead_of=not_ahead_of,
                on_round=on_round,
            )
    loop = asyncio.get_running_loop()
    wall_start = loop.time()
    first_t: int | None = None
    rounds = samples = requests = 0
    for t, series in generate(config, start_ms, end_ms):
        if speed is not None:
            first_t = t if first_t is None else first_t
            due = wall_start + (t + config.interval_ms - first_t) / 1000.0 / speed
            if not_ahead_of is not None:
                due = max(due, loop.time() + (t + config.interval_ms) / 1000.0 - not_ahead_of())
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        requests += await post_remote_write(
            url,
            series,
            client,
            max_samples_per_send=max_samples_per_send,
            encode=encode,
            min_backoff_s=min_backoff_s,
            max_backoff_s=max_backoff_s,
        )
        rounds += 1
        n = sum(len(s.samples) for s in series)
        samples += n
        if on_round is not None:
            on_round(t, n)
    return ReplayStats(rounds, samples, requests)
