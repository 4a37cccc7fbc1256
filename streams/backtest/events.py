"""The operator's known failures (XIDs, job deaths) the backtest scores its alerts against.

A file of events, one per line, either JSON lines or CSV (chosen by the file's
suffix: ``.csv`` is CSV, anything else JSON lines)::

    {"ts_ms": 1730000000000, "node": "gpu071", "group": "job-17", "kind": "xid79"}
    {"time": "2026-10-27T03:14:00Z", "node": "gpu096", "kind": "xid94"}
    {"time": "2026-10-28T11:00:00+09:00", "group": "job-17", "kind": "job_death"}
    {"time": "2026-10-29T08:00:00Z", "end": "2026-10-29T20:00:00Z", "node": "gpu124",
     "kind": "gpu_slow"}

    ts_ms,node,group,kind          (a header row; time may stand for ts_ms, end_ms or end follow)
    1730000000000,gpu071,job-17,xid79
    2026-10-28T02:00:00Z,,job-17,job_death

Fields: ``ts_ms`` (epoch milliseconds) or ``time`` (ISO 8601 with a zone);
``kind`` (free text: ``xid79``, ``job_death``, …); at least one of ``node`` and
``group`` (an empty CSV cell is none); optionally ``end_ms`` or ``end`` (the
same forms), when the fault was over: alerts on its node until then are its
consequence, not false alerts. Blank lines and lines starting with
``#`` are skipped. A bad line raises :class:`EventsFileError` naming the file
and line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from detectors.checks import check_fields, int_rule, maybe, rule, text_rule
from detectors.errors import InputError
from detectors.state_codec import JsonState

__all__ = ["EventsFileError", "KnownEvent", "load_events", "read_lines"]

_T = TypeVar("_T")

_FIELDS = ("ts_ms", "time", "end_ms", "end", "node", "group", "kind")


class EventsFileError(InputError):
    """A known-events file cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class KnownEvent(JsonState):
    """One known failure: when, on which node and/or group, of what kind."""

    ts_ms: int = field(metadata=rule(int_rule(minimum=0, why="epoch ms", numpy=False)))
    node: str | None
    group: str | None
    kind: str = field(metadata=rule(text_rule("e.g. xid79, job_death")))
    # when it was over (None: an instant, e.g. an XID)
    end_ms: int | None = field(
        default=None, metadata=rule(maybe(int_rule(minimum=0, why="epoch ms", numpy=False)))
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.end_ms is not None and self.end_ms < self.ts_ms:
            raise ValueError(f"end_ms must be an int >= ts_ms ({self.ts_ms}), got {self.end_ms!r}")
        if self.node is None and self.group is None:
            raise ValueError("an event names a node, a group or both")


def load_events(path: str | Path) -> list[KnownEvent]:
    """Every event in ``path`` (JSON lines, or CSV for a ``.csv`` file), in time order."""
    events = read_lines(path, _event, csv_ok=True)
    return sorted(events, key=lambda e: (e.ts_ms, e.node or "", e.group or "", e.kind))


def read_lines(path: str | Path, parse: Callable[[Any], _T], *, csv_ok: bool) -> list[_T]:
    """``parse`` of every row of ``path`` (JSON lines; CSV for a ``.csv`` file if ``csv_ok``),
    in file order; a row it refuses (``ValueError``) is :class:`EventsFileError` naming the
    file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EventsFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = text.splitlines()
    out = []
    try:
        rows = _csv_rows(lines) if csv_ok and path.suffix.lower() == ".csv" else _json_rows(lines)
        for lineno, row in rows:
            try:
                out.append(parse(row))
            except (ValueError, TypeError) as exc:
                raise EventsFileError(f"line {lineno}: {exc}") from None
    except EventsFileError as exc:
        raise EventsFileError(f"{path}: {exc}") from None
    return out


def _skip(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def _json_rows(lines: list[str]) -> Iterator[tuple[int, Any]]:
    for lineno, line in enumerate(lines, 1):
        if _skip(line):
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise EventsFileError(f"line {lineno}: not JSON: {exc.msg}") from None


def _csv_rows(lines: list[str]) -> Iterable[tuple[int, Any]]:
    numbered = [(n, line) for n, line in enumerate(lines, 1) if not _skip(line)]
    if not numbered:
        return []
    header = [h.strip() for h in next(csv.reader([numbered[0][1]]))]
    out = []
    for lineno, line in numbered[1:]:
        cells = next(csv.reader([line]))
        if len(cells) != len(header):
            raise EventsFileError(
                f"line {lineno}: {len(cells)} cells, the header has {len(header)} ({header})"
            )
        out.append((lineno, {h: c.strip() or None for h, c in zip(header, cells, strict=True)}))
    return out


def _event(row: Any) -> KnownEvent:
    if not isinstance(row, Mapping):
        raise ValueError(f"an event is an object with ts_ms or time, kind, node/group; got {row!r}")
    unknown = set(row) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}; known: {', '.join(_FIELDS)}")
    if row.get("kind") is None:
        raise ValueError("kind is missing")
    return KnownEvent(
        ts_ms=_ts_ms(row, "ts_ms", "time"),
        node=_name(row.get("node")),
        group=_name(row.get("group")),
        kind=str(row["kind"]),
        end_ms=None
        if row.get("end_ms") is None and row.get("end") is None
        else _ts_ms(row, "end_ms", "end"),
    )


def _name(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _ts_ms(row: Mapping[str, Any], ms_key: str, iso_key: str) -> int:
    """``ms_key`` (an integer, or a CSV cell of digits), else ``iso_key`` (ISO 8601 with a zone)."""
    raw, when = row.get(ms_key), row.get(iso_key)
    if raw is not None and when is not None:
        raise ValueError(f"give {ms_key} or {iso_key}, not both")
    if raw is not None:
        if isinstance(raw, str) and raw.strip().isdigit():
            return int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        # a CSV's ts_ms column may hold ISO times too
        if isinstance(raw, str):
            return _iso_ms(raw)
        raise ValueError(f"{ms_key} must be an integer (epoch ms), got {raw!r}")
    if when is None:
        raise ValueError(f"{ms_key} or {iso_key} is missing")
    return _iso_ms(str(when))


def _iso_ms(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"time {text!r} is not ISO 8601 (e.g. 2026-10-27T03:14:00Z)") from None
    if moment.tzinfo is None:
        raise ValueError(f"time {text!r} has no zone (add Z or +09:00)")
    return round(moment.timestamp() * 1000)
