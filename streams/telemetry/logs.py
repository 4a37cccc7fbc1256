"""Logging for every peerwatch process: one handler on the root logger, so peerwatch's,
Faust's and aiokafka's own lines come out in one format -- text, or JSON (one object
per line) for a log pipeline.

JSON lines are python-json-logger's ``JsonFormatter``: a stdlib ``logging.Formatter``,
so the libraries' records need no adapter. Fields: ``time`` (ISO 8601, UTC), ``level``,
``logger``, ``message`` (the rendered line, ``event key=value ...`` for peerwatch's
own), ``exc_info`` with the traceback when there is one, and any ``extra=`` fields.
"""

from __future__ import annotations

import logging
import sys
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
