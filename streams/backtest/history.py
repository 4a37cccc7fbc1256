"""What both history sources share: the time range, the selector, the errors, the HTTP
seam, and cutting a chunk of history into the time-ordered rounds the frame builder takes.

Errors (each one line for the CLI, never with a secret in it)::

    BacktestError
    ├── BadRange          start/end unreadable, or not start < end
    ├── BadSelector       not a ``{label matchers}`` selector
    ├── SourceUnreachable no connection, or no answer within the timeout
    ├── SourceRejected    the server answered an error (HTTP status, or an error body)
    │   ├── SourceBusy    ... a 5xx: a chunk is retried on it, as on SourceUnreachable
    │   └── SourceLimited ... a limit of the server's (too many series or samples): the
    │                     request is asked again in halves, and names the flag if it still is
    ├── NoSeries          the selector matches no series the catalog reads in the range
    └── NothingScored     samples came, but none became a scored bucket (and why)

Never one request over the whole fleet: ``ChunkedSource.split`` asks the server which
catalog metrics and which values of the group labels the selector's series carry
(``/api/v1/label/<name>/values``, the selector as ``match[]``) and reads each chunk as
one request per group (and per metric for the series with no group label); a request
the server refuses for a limit is asked again in halves by metric name.

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


class SourceLimited(SourceRejected):
    """Refused for one of the server's size limits: a smaller request may pass."""


class NoSeries(BacktestError):
    pass


class NothingScored(BacktestError):
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
    names = sorted(set(metric_names))
    if not names:
        raise BadSelector("the feature catalog reads no metrics")
    return selector_of(names, operator_matchers(selector))


def operator_matchers(selector: str) -> str:
    """The matchers inside the operator's ``{...}`` (``""`` for none), checked for braces."""
    inner = selector.strip()
    if inner:
        if not (inner.startswith("{") and inner.endswith("}")):
            raise BadSelector(
                f"selector {selector!r} must be label matchers in braces, e.g. "
                '{job="dcgm"} or {cluster=~"b200-.*"}'
            )
        inner = inner[1:-1].strip().rstrip(",").strip()
    return inner


def selector_of(names: Sequence[str], *matchers: str) -> str:
    """``{__name__=~"a|b",m1,m2}``: ``names`` (none: no name matcher) and the matchers."""
    # catalog names are [a-zA-Z_:][a-zA-Z0-9_:]* (streams.deploy_config): nothing to escape
    parts = [f'__name__=~"{"|".join(names)}"'] if names else []
    return "{" + ",".join([*parts, *(m for m in matchers if m)]) + "}"


def equals(label: str, value: str) -> str:
    """The matcher ``label="value"``, the value quoted as PromQL and MetricsQL read it
    (``""`` matches the series without the label)."""
    return f"{label}={json.dumps(value, ensure_ascii=False)}"


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def label_name(text: str, what: str = "label") -> str:
    """``text`` if it is a label name Prometheus takes, else ``BadSelector``."""
    if not _LABEL_NAME.fullmatch(text):
        raise BadSelector(f"{what} {text!r} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    return text


def extra_labels(pairs: Iterable[str]) -> dict[str, str]:
    """``NAME=VALUE`` options (``--extra-label``) as a dict; the last of a name wins."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not value:
            raise BadSelector(f"--extra-label {pair!r} must be NAME=VALUE, e.g. cluster=b200-a")
        found[label_name(name.strip(), "--extra-label")] = value
    return found


# --- splitting the fleet ------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One request's share of the selector's series: the catalog metrics it names (none:
    the selector as given) and the matchers the split adds (``cluster="b200-a"``, or
    ``cluster=""`` for the series without the label)."""

    names: tuple[str, ...] = ()
    matchers: tuple[str, ...] = ()

    def halves(self) -> tuple[Part, Part] | None:
        """The part as two by metric name, or None when it names fewer than two."""
        if len(self.names) < 2:
            return None
        mid = len(self.names) // 2
        return Part(self.names[:mid], self.matchers), Part(self.names[mid:], self.matchers)

    def __str__(self) -> str:
        """``cluster="b200-a"``; with the metric when it names one (the report's split)."""
        named = (equals(NAME, self.names[0]),) if len(self.names) == 1 else ()
        return ",".join((*self.matchers, *named)) or "(all)"


# (label, metric names, matchers) -> the label's values on those series, in the range
LabelValues = Callable[[str, Sequence[str], Sequence[str]], list[str]]
NAME = "__name__"


def split_parts(
    values_of: LabelValues, names: Sequence[str], split_labels: Sequence[str]
) -> list[Part]:
    """The requests that read every series of ``names`` (the catalog's metrics, under the
    operator's selector that ``values_of`` adds): one per value of the first of
    ``split_labels`` the series carry; the series without it split by the next label
    the same way, and those with none of them one request per metric name. Empty when
    nothing matches. Each part names only the metrics its series have."""
    return _split(values_of, list(names), (), list(split_labels))


def _split(
    values_of: LabelValues, names: list[str], matchers: tuple[str, ...], labels: list[str]
) -> list[Part]:
    present = sorted(set(values_of(NAME, names, matchers)) & set(names)) if names else []
    if names and not present:
        return []
    while labels:
        label, labels = labels[0], labels[1:]
        values = sorted(v for v in values_of(label, present, matchers) if v)
        if values:
            parts = [Part(tuple(present), (*matchers, equals(label, v))) for v in values]
            return parts + _split(values_of, present, (*matchers, equals(label, "")), labels)
    if not present:  # no metric names to split by (the selector as given)
        return [Part((), matchers)]
    return [Part((name,), matchers) for name in present]


def in_halves(ask: Callable[[Part], list[Any]], part: Part) -> list[Any]:
    """``ask(part)``; refused for a limit (``SourceLimited``), its two halves by metric
    name in turn, and so on down to one metric, whose refusal is the error."""
    try:
        return ask(part)
    except SourceLimited:
        halves = part.halves()
        if halves is None:
            raise
        first, second = halves
        return in_halves(ask, first) + in_halves(ask, second)


# --- what a refusal says -------------------------------------------------------------------------

# the texts of a refusal for size (Debian's victoria-metrics 1.79.5: "the number of
# matching timeseries exceeds 30000; either narrow down the search or increase
# -search.max* command-line flag values"; Prometheus: "query processing would load too
# many samples into memory in query execution")
_LIMIT_SIGNS = ("matching timeseries exceeds", "-search.max", "too many samples")


def is_limit(text: str) -> bool:
    """Whether a refusal's text is one of a server's size limits."""
    return any(sign in text for sign in _LIMIT_SIGNS)


def limit_flag(what: str, path: str, text: str) -> str | None:
    """The server flag that raises the limit a refusal of ``path`` hit, or None.

    VictoriaMetrics names only ``-search.max*``; which one is per API (its ``-help``):
    ``-search.maxSeries`` for ``/api/v1/series``, ``-search.maxExportSeries`` for
    ``/api/v1/export``, ``-search.maxUniqueTimeseries`` for the label values and queries.
    """
    if what == "VictoriaMetrics":
        if "maxQueryDuration" in text:
            return "-search.maxQueryDuration"
        if not is_limit(text):
            return None
        if path.startswith("/api/v1/series"):
            return "-search.maxSeries"
        if path.startswith("/api/v1/export"):
            return "-search.maxExportSeries"
        if "points" in text:
            return "-search.maxPointsPerTimeseries"
        return "-search.maxUniqueTimeseries"
    if "too many samples" in text:
        return "--query.max-samples"
    if "timed out" in text:
        return "--query.timeout"
    return None


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

    def label_names(self) -> set[str]:
        """Every label name of the series seen (those kept)."""
        return {name for labels in self._dicts.values() for name in labels}


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
    """A history server read chunk by chunk: ``split`` plans the requests over the range
    (none: the selector matches nothing), ``chunk`` parses ``[lo_ms, hi_ms)`` of the
    selector's series."""

    what: str
    step_ms: int
    chunk_ms: int

    def split(self, time_range: TimeRange) -> Sequence[Part]: ...

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterable[ParsedSeries]: ...


LABEL_VALUES_PATH = "/api/v1/label/{}/values"  # both servers; match[] from Prometheus 2.24


def api_seconds(ms: int) -> str:
    """Epoch ms as the APIs' ``start`` / ``end``: seconds with the milliseconds."""
    return f"{ms / 1000:.3f}"


class ChunkedSource:
    """What the two sources share: a client, the selector and its split into requests,
    the step and chunk sizes, the labels the server does not store.

    ``selector`` is the operator's; with ``names`` (the catalog's metrics) it is narrowed
    to them, without it sent as it is. ``split_labels`` (the group labels) are what
    ``split`` cuts the fleet by; ``extra_labels`` join every series read (its own label
    of the name wins, as Prometheus' external labels do)."""

    what = "history"

    def __init__(
        self,
        client: HistoryClient,
        selector: str,
        step_ms: int,
        chunk_ms: int = 3_600_000,
        *,
        names: Sequence[str] = (),
        split_labels: Sequence[str] = (),
        extra_labels: Mapping[str, str] | None = None,
    ) -> None:
        if step_ms <= 0 or chunk_ms < step_ms:
            raise ValueError("need 0 < step_ms <= chunk_ms")
        self.client = client
        self.asked = selector.strip()  # the operator's, for the report
        self.names = tuple(sorted(set(names)))
        self._inner = operator_matchers(selector)
        self.selector = selector_of(self.names, self._inner) if self.names else self.asked
        self.step_ms = step_ms
        self.chunk_ms = chunk_ms
        self.split_labels = tuple(split_labels)
        self.extra_labels = dict(extra_labels or {})
        # until ``split``: the selector whole, one request (as a test asks a chunk)
        self.parts: list[Part] = [Part(self.names)]

    def part_selector(self, part: Part) -> str:
        """What one request sends: the operator's matchers, the part's names and matchers."""
        if not part.names and not part.matchers:
            return self.selector
        if not self.names:  # not narrowed: the operator's selector plus the part's matchers
            return selector_of((), self._inner, *part.matchers)
        return selector_of(part.names, self._inner, *part.matchers)

    def split(self, time_range: TimeRange) -> list[Part]:
        """Plan the requests of every chunk (``split_parts``) from the label values over
        ``time_range``: no request lists the whole fleet's series (VictoriaMetrics
        refuses ``/api/v1/series`` past ``-search.maxSeries``, 30,000)."""

        def values_of(label: str, names: Sequence[str], matchers: Sequence[str]) -> list[str]:
            def ask(part: Part) -> list[str]:
                return self.label_values(label, self.part_selector(part), time_range)

            found = in_halves(ask, Part(tuple(names), tuple(matchers)))
            return sorted(set(found))

        parts = split_parts(values_of, self.names, self.split_labels)
        if parts and not self.names:  # not narrowed (a test's source): does anything match?
            parts = parts if self.label_values(NAME, self.selector, time_range) else []
        self.parts = parts
        return parts

    def label_values(self, label: str, selector: str, time_range: TimeRange) -> list[str]:
        """``/api/v1/label/<label>/values`` of ``selector``'s series in the range."""
        data = self.client.get_json(
            LABEL_VALUES_PATH.format(label),
            {
                "match[]": selector,
                "start": api_seconds(time_range.start_ms),
                "end": api_seconds(time_range.end_ms - 1),
            },
        )
        return [str(v) for v in data.get("data") or []]

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterator[ParsedSeries]:
        """``[lo_ms, hi_ms)`` of every part, a part the server refuses for a limit asked
        again in halves (and so split for the chunks after), with the extra labels."""
        extra = self.extra_labels
        parts: list[Part] = []
        for part in self.parts:

            def ask(piece: Part) -> list[tuple[Part, list[ParsedSeries]]]:
                return [(piece, list(self.fetch(self.part_selector(piece), lo_ms, hi_ms)))]

            for piece, parsed in in_halves(ask, part):
                parts.append(piece)
                for labels, stamps, values in parsed:
                    yield ({**extra, **labels} if extra else labels), stamps, values
        self.parts = parts

    def fetch(self, selector: str, lo_ms: int, hi_ms: int) -> Iterable[ParsedSeries]:
        """``[lo_ms, hi_ms)`` of ``selector``'s series: one request (or a few)."""
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
                    raise refusal(
                        f"{self.what} at {self.base_url} answered HTTP {response.status_code} "
                        f"to {path}",
                        self.what,
                        path,
                        _error_text(body),
                        busy=response.status_code >= 500,
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
        raise_for_error_body(data, f"{self.what} at {self.base_url}", path, self.what)
        return data


def raise_for_error_body(data: Any, who: str, path: str, what: str = "Prometheus") -> None:
    """``{"status": "error", "errorType": ..., "error": ...}`` (the Prometheus API's error
    envelope, which VictoriaMetrics shares) as a ``SourceRejected``."""
    if isinstance(data, dict) and data.get("status") == "error":
        kind = data.get("errorType") or "error"
        raise refusal(f"{who} refused {path}", what, path, f"{kind}: {data.get('error')}")


def refusal(head: str, what: str, path: str, text: str, busy: bool = False) -> SourceRejected:
    """The error of a refusal, one line: ``head: <the server's reason, whole>``, and for a
    size limit the flag that raises it. A limit is a ``SourceLimited`` (asked again
    smaller), a 5xx a ``SourceBusy`` (asked again later)."""
    reason = _one_line(text)
    message = f"{head}: {reason}"
    flag = limit_flag(what, path, reason)
    if flag is not None:
        message += f" -- raise the server's {flag} or narrow --selector"
    if busy:
        return SourceBusy(message)
    return SourceLimited(message) if is_limit(reason) else SourceRejected(message)


def _error_text(body: str) -> str:
    """A refusal's body: the ``error`` of a JSON envelope, else the text as it is."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if isinstance(data, dict) and "error" in data:
        kind = data.get("errorType")
        return f"{kind}: {data['error']}" if kind else str(data["error"])
    return body


def _one_line(text: str, limit: int = 4000) -> str:
    """``text`` on one line, whole: the servers put the cause and the fix at the end, after
    echoing the query (VictoriaMetrics echoes it twice, as the URI and as its filters).
    Past ``limit`` (a proxy's HTML page) its middle goes, never its end."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    keep = (limit - 5) // 2
    return f"{flat[:keep]} ... {flat[-keep:]}"
