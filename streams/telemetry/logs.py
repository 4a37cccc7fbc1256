"""Logging for every peerwatch process: one handler on the root logger, so peerwatch's,
Faust's and aiokafka's own lines come out in one format -- text, or JSON (one object
per line) for a log pipeline.

JSON lines are python-json-logger's ``JsonFormatter``: a stdlib ``logging.Formatter``,
so the libraries' records need no adapter. Fields: ``time`` (ISO 8601, UTC), ``level``,
``logger``, ``message`` (the rendered line, ``event key=value ...`` for peerwatch's
own), ``exc_info`` with the traceback when there is one, and any ``extra=`` fields.

peerwatch's own lines come from an ``EventLog``: ``log.info("bucket_scored", group=g,
bucket=ts)`` writes the text line ``bucket_scored group=g bucket=ts`` and passes the event
and its fields as ``extra=``, so a JSON line also has ``"event": "bucket_scored"``,
``"group": "g"`` and ``"bucket": ts`` as top-level keys (ints stay ints) to filter on. A
field named like a LogRecord attribute or one of the keys above (``name``, ``module``,
``level``, ...) keeps its name in the text and gets a ``_`` appended in JSON (``name_``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import IO, Literal

from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def log_formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter(
            "{levelname}{name}{message}",
            style="{",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",
        )
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(
    level: str, log_format: LogFormat = "text", stream: IO[str] | None = None
) -> None:
    """Replace the root logger's handlers with one stderr handler in ``log_format``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(log_formatter(log_format))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


# Keys ``Logger.makeRecord`` refuses in ``extra`` (KeyError), and the JSON line's own.
RESERVED_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",  # a LogRecord attribute from Python 3.12 on
    "event",
    "time",
    "level",
    "logger",
}
REPR_LIMIT = 300  # an exception's repr is cut here, in the text and in JSON


def _text(value: object, spec: str | None) -> str:
    if spec is not None:
        return spec % (value,)
    if isinstance(value, BaseException):
        return repr(value)[:REPR_LIMIT]
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _json(value: object) -> object:
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, BaseException):
        return repr(value)[:REPR_LIMIT]
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return str(value)


class EventLog:
    """A ``logging.Logger`` for peerwatch's lines: an event name and its fields.

    ``log.warning("kafka_unavailable", attempt=3, error=exc)`` renders the message
    ``kafka_unavailable attempt=3 error=KafkaError(...)`` -- values with ``str``, floats
    as ``%.3f``, exceptions as their ``repr`` cut at 300 characters; ``fmt={"score":
    "%.2f"}`` gives a field a %-format of its own -- and hands ``{"event": ..., **fields}``
    (JSON-friendly: str, int, float, bool, None and lists of them as they are, exceptions
    as that repr, anything else as ``str``) to the record as ``extra=``. Nothing is rendered
    when the level is disabled; the record's location is the caller's.
    """

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    @property
    def name(self) -> str:
        return self.logger.name

    def debug(
        self,
        event: str,
        /,
        *,
        exc_info: bool | BaseException | None = None,
        fmt: Mapping[str, str] | None = None,
        **fields: object,
    ) -> None:
        self._log(logging.DEBUG, event, fields, fmt, exc_info)

    def info(
        self,
        event: str,
        /,
        *,
        exc_info: bool | BaseException | None = None,
        fmt: Mapping[str, str] | None = None,
        **fields: object,
    ) -> None:
        self._log(logging.INFO, event, fields, fmt, exc_info)

    def warning(
        self,
        event: str,
        /,
        *,
        exc_info: bool | BaseException | None = None,
        fmt: Mapping[str, str] | None = None,
        **fields: object,
    ) -> None:
        self._log(logging.WARNING, event, fields, fmt, exc_info)

    def error(
        self,
        event: str,
        /,
        *,
        exc_info: bool | BaseException | None = None,
        fmt: Mapping[str, str] | None = None,
        **fields: object,
    ) -> None:
        self._log(logging.ERROR, event, fields, fmt, exc_info)

    def exception(
        self, event: str, /, *, fmt: Mapping[str, str] | None = None, **fields: object
    ) -> None:
        """``error`` with the traceback of the exception being handled."""
        self._log(logging.ERROR, event, fields, fmt, True)

    def _log(
        self,
        level: int,
        event: str,
        fields: dict[str, object],
        fmt: Mapping[str, str] | None,
        exc_info: bool | BaseException | None,
    ) -> None:
        if not self.logger.isEnabledFor(level):
            return
        specs = fmt or {}
        message = " ".join([event, *(f"{k}={_text(v, specs.get(k))}" for k, v in fields.items())])
        extra: dict[str, object] = {"event": event}
        extra.update((f"{k}_" if k in RESERVED_FIELDS else k, _json(v)) for k, v in fields.items())
        # 3: past _log and debug/info/...: the record names the line that called those
        self.logger.log(level, message, exc_info=exc_info, extra=extra, stacklevel=3)
