"""What both history sources share: the time range, the selector, the errors, the HTTP
seam, and cutting a chunk of history into the time-ordered rounds the frame builder takes.

Errors (each one line for the CLI, never with a secret in it)::

    BacktestError
    ├── BadRange          start/end unreadable, or not start < end
    ├── BadSelector       not a ``{label matchers}`` selector
    ├── SourceUnreachable no connection, or no answer within the timeout
    ├── SourceRejected    the server answered an error (HTTP status, or an error body)
    │   └── SourceBusy    ... a 5xx: a chunk is retried on it, as on SourceUnreachable
    └── NoSeries          the selector matches no series the catalog reads in the range

A chunk (an hour or two of history) is fetched at once and cut into rounds one
bucket wide, in time order, so the builder sees time advance as it does live:
a whole chunk in one ``add`` would move its watermark to the chunk's end and drop
the chunk's first half as late.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
from pydantic import SecretStr

from detectors.errors import PeerwatchError
from streams.ingest.series import Series
from streams.retry import RetryCallState, fixed, retrying_blocking
from streams.sinks.credentials import BearerAuth, without_userinfo
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.backtest")

# (labels, timestamps in ms ascending, values) of one series, as a source parsed it
ParsedSeries = tuple[dict[str, str], list[int], list[float]]
# (round start in ms, the round's series): what ``streams.worker.offline.score_rounds`` takes
Round = tuple[int, list[Series]]


class BacktestError(PeerwatchError):
    """A backtest cannot run as asked; the message says why in one line."""


class BadRange(BacktestError):
    pass


class BadSelector(BacktestError):
    pass


class SourceUnreachable(BacktestError):
    pass


class SourceRejected(BacktestError):
    pass


class SourceBusy(SourceRejected):
    pass


class NoSeries(BacktestError):
    pass


# --- the time range -----------------------------------------------------------------------------

_RELATIVE = re.compile(r"now(?:-(\d+(?:\.\d+)?)([smhdw]))?")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time_ms(text: str, now_ms: int) -> int:
    """``text`` as epoch ms: RFC 3339 / ISO 8601 (UTC unless it says), unix seconds,
    ``now`` or ``now-<N><s|m|h|d|w>``."""
    value = text.strip()
    relative = _RELATIVE.fullmatch(value)
    if relative:
        amount, unit = relative.groups()
        return now_ms - (round(float(amount) * _UNIT_S[unit] * 1000) if amount else 0)
    try:
        return round(float(value) * 1000)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRange(
            f"{text!r} is not a time: give RFC 3339 (2026-10-01T00:00:00Z), unix seconds, "
            "now or now-55d"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)


def iso_time(ms: int) -> str:
    """Epoch ms as RFC 3339 UTC, for messages."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class TimeRange:
    """``[start_ms, end_ms)`` on the bucket grid (start rounded down, end up)."""

    start_ms: int
    end_ms: int

    @classmethod
    def on_grid(cls, start_ms: int, end_ms: int, bucket_ms: int) -> TimeRange:
        if not start_ms < end_ms:
            raise BadRange(
                f"the range is empty: start {iso_time(start_ms)} is not before "
                f"end {iso_time(end_ms)}"
            )
        return cls(start_ms // bucket_ms * bucket_ms, -(-end_ms // bucket_ms) * bucket_ms)

    def chunks(self, chunk_ms: int) -> Iterator[tuple[int, int]]:
        """``[lo, hi)`` pieces of at most ``chunk_ms``, in order."""
        lo = self.start_ms
        while lo < self.end_ms:
            hi = min(lo + chunk_ms, self.end_ms)
            yield lo, hi
            lo = hi

    def __str__(self) -> str:
        return f"{iso_time(self.start_ms)} .. {iso_time(self.end_ms)}"


# --- the selector -------------------------------------------------------------------------------


def series_selector(selector: str, metric_names: Iterable[str]) -> str:
    """The operator's ``{label matchers}`` narrowed to the metrics the catalog reads: one
    selector (``match[]`` entries are OR-ed, so the two cannot be separate ones)."""
    inner = selector.strip()
    if inner:
        if not (inner.startswith("{") and inner.endswith("}")):
            raise BadSelector(
                f"selector {selector!r} must be label matchers in braces, e.g. "
                '{job="dcgm"} or {cluster=~"b200-.*"}'
            )
        inner = inner[1:-1].strip().rstrip(",").strip()
    names = sorted(set(metric_names))
    if not names:
        raise BadSelector("the feature catalog reads no metrics")
    # catalog names are [a-zA-Z_:][a-zA-Z0-9_:]* (streams.deploy_config): nothing to escape
    matchers = [f'__name__=~"{"|".join(names)}"', *([inner] if inner else [])]
    return "{" + ",".join(matchers) + "}"


# --- chunks to rounds ---------------------------------------------------------------------------


class LabelInterner:
    """One dict per label set across chunks: the builder resolves a label dict once (by
    identity), and a long run keeps one copy of each series' labels, not one per chunk."""

    def __init__(self, max_series: int = 1_000_000) -> None:
        self._dicts: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self.max_series = max_series

    def __call__(self, labels: Mapping[str, str]) -> dict[str, str]:
        key = tuple(sorted(labels.items()))
        found = self._dicts.get(key)
        if found is None:
            if len(self._dicts) >= self.max_series:  # churn beyond any fleet's: start afresh
                self._dicts.clear()
            found = self._dicts[key] = dict(key)
        return found

    def __len__(self) -> int:
        return len(self._dicts)


def rounds_of(
    parsed: Iterable[ParsedSeries],
    start_ms: int,
    end_ms: int,
    step_ms: int,
    intern: LabelInterner,
) -> list[Round]:
    """The samples of ``parsed`` in ``[start_ms, end_ms)`` as rounds ``step_ms`` wide, each
    round's series holding only that round's samples; an empty round stays (time moves on)."""
    count = -(-(end_ms - start_ms) // step_ms)
    slots: list[list[Series]] = [[] for _ in range(count)]
    for labels, stamps, values in parsed:
        if not stamps:
            continue
        if stamps != sorted(stamps):  # sorted by the servers; cheap to make sure
            pairs = sorted(zip(stamps, values, strict=True))
            stamps, values = [t for t, _ in pairs], [v for _, v in pairs]
        shared = intern(labels)
        i, hi = bisect_left(stamps, start_ms), bisect_left(stamps, end_ms)
        while i < hi:
            k = (stamps[i] - start_ms) // step_ms
            j = bisect_left(stamps, start_ms + (k + 1) * step_ms, i, hi)
            slots[k].append(Series(shared, list(zip(stamps[i:j], values[i:j], strict=True))))
            i = j
    return [(start_ms + k * step_ms, series) for k, series in enumerate(slots)]


class HistorySource(Protocol):
    """A history server read chunk by chunk: ``chunk`` parses ``[lo_ms, hi_ms)`` of the
    selector's series; ``count_series`` says whether the selector matches any."""

    what: str
    step_ms: int
    chunk_ms: int

    def count_series(self, time_range: TimeRange) -> int: ...

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterable[ParsedSeries]: ...


SERIES_PATH = "/api/v1/series"  # the same in Prometheus and VictoriaMetrics


def api_seconds(ms: int) -> str:
    """Epoch ms as the APIs' ``start`` / ``end``: seconds with the milliseconds."""
    return f"{ms / 1000:.3f}"


class ChunkedSource:
    """What the two sources share: a client, a selector, the step and chunk sizes, and
    the ``/api/v1/series`` check both servers answer alike."""

    what = "history"
    max_steps: int | None = None  # steps per series one chunk may ask for (None: any)

    def __init__(
        self,
        client: HistoryClient,
        selector: str,
        step_ms: int,
        chunk_ms: int = 3_600_000,
        *,
        asked: str | None = None,
    ) -> None:
        if step_ms <= 0 or chunk_ms < step_ms:
            raise ValueError("need 0 < step_ms <= chunk_ms")
        if self.max_steps is not None and chunk_ms // step_ms > self.max_steps:
            raise ValueError(
                f"a chunk of more than {self.max_steps} steps is refused by {self.what}"
            )
        self.client = client
        self.selector = selector  # what is sent
        self.asked = selector if asked is None else asked  # the operator's, for the report
        self.step_ms = step_ms
        self.chunk_ms = chunk_ms

    def count_series(self, time_range: TimeRange) -> int:
        """Series matching the selector in the range, at most ``limit`` where the server
        knows the parameter (VictoriaMetrics; Prometheus from 2.49, older ones ignore it
        and list all): whether there is any is all the run asks, and a 55-day listing
        can pass VictoriaMetrics' ``-search.maxSeries`` (30,000) and be refused."""
        data = self.client.get_json(
            SERIES_PATH,
            {
                "match[]": self.selector,
                "start": api_seconds(time_range.start_ms),
                "end": api_seconds(time_range.end_ms - 1),
                "limit": "1",
            },
        )
        return len(data.get("data") or [])

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterable[ParsedSeries]:
        raise NotImplementedError


CHUNK_RETRY_WAITS_S = (2.0, 8.0, 30.0)  # a server restarting, a proxy's 503: minutes, not days


def history_rounds(
    source: HistorySource,
    time_range: TimeRange,
    intern: LabelInterner | None = None,
    retry_waits_s: Sequence[float] = CHUNK_RETRY_WAITS_S,
) -> Iterator[Round]:
    """Every round of ``time_range`` in time order, fetched a chunk at a time: memory holds
    one chunk, whatever the range. A chunk the server could not give (unreachable, 5xx) is
    asked again after each of ``retry_waits_s``: a 55-day run does not die of one 503. A
    chunk is parsed whole before its first round goes out, so a retry repeats nothing."""
    intern = intern if intern is not None else LabelInterner()
    for lo, hi in time_range.chunks(source.chunk_ms):
        rounds: list[Round] = []
        for attempt in retrying_blocking(
            fixed(*retry_waits_s),
            on=(SourceUnreachable, SourceBusy),
            attempts=len(retry_waits_s) + 1,
            before_sleep=_chunk_retry_logger(lo),
        ):
            with attempt:
                rounds = rounds_of(source.chunk(lo, hi), lo, hi, source.step_ms, intern)
        yield from rounds


def _chunk_retry_logger(lo_ms: int) -> Callable[[RetryCallState], None]:
    def log_retry(state: RetryCallState) -> None:
        wait = state.next_action.sleep if state.next_action else 0.0
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "history_chunk_retry",
            start=iso_time(lo_ms),
            wait_s=wait,
            error=str(error),
            fmt={"wait_s": "%.0f"},
        )

    return log_retry


def as_float(value: Any) -> float:
    """A sample value as JSON carries it (number, or a string such as "NaN" / "+Inf")."""
    if value is None:
        return math.nan
    return float(value)


# --- the HTTP seam ------------------------------------------------------------------------------


class HistoryClient:
    """GETs against a history server. The bearer token goes per request (never in the
    URL, a repr or a message); transport and HTTP errors become ``BacktestError``s."""

    def __init__(
        self,
        url: str,
        what: str,
        *,
        token: SecretStr | None = None,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base, basic = without_userinfo(url.rstrip("/"))
        auth: httpx.Auth | None = BearerAuth(token.get_secret_value()) if token else basic
        self.base_url = base
        self.what = what
        self._client = httpx.Client(
            base_url=base, auth=auth, timeout=timeout_s, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HistoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def stream(self, path: str, params: Mapping[str, str]) -> Iterator[httpx.Response]:
        """The response of ``GET path`` with its body not yet read (a 2xx one)."""
        try:
            with self._client.stream("GET", path, params=params) as response:
                if response.status_code >= 400:
                    body = response.read().decode("utf-8", "replace")
                    error = SourceBusy if response.status_code >= 500 else SourceRejected
                    raise error(
                        f"{self.what} at {self.base_url} answered HTTP {response.status_code} "
                        f"to {path}: {_one_line(body)}"
                    )
                yield response
        except httpx.TransportError as exc:
            raise SourceUnreachable(
                f"{self.what} at {self.base_url} is unreachable ({type(exc).__name__}"
                f"{': ' + str(exc) if str(exc) else ''})"
            ) from None

    def get_json(self, path: str, params: Mapping[str, str]) -> Any:
        """``GET path`` as JSON; a Prometheus-style ``{"status": "error"}`` body is an error."""
        with self.stream(path, params) as response:
            body = response.read()
        try:
            data = json.loads(body)
        except ValueError:
            raise SourceRejected(
                f"{self.what} at {self.base_url} sent no JSON for {path}: "
                f"{_one_line(body.decode('utf-8', 'replace'))}"
            ) from None
        raise_for_error_body(data, f"{self.what} at {self.base_url}", path)
        return data


def raise_for_error_body(data: Any, who: str, path: str) -> None:
    """``{"status": "error", "errorType": ..., "error": ...}`` (the Prometheus API's error
    envelope, which VictoriaMetrics shares) as a ``SourceRejected``."""
    if isinstance(data, dict) and data.get("status") == "error":
        kind = data.get("errorType") or "error"
        raise SourceRejected(f"{who} refused {path}: {kind}: {_one_line(str(data.get('error')))}")


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
