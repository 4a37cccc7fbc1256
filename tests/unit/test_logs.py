"""JSON logs: one object per line, the same fields for peerwatch's and the libraries' lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from streams.telemetry.logs import configure_logging


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_peerwatch_line_is_one_json_object_with_the_rendered_message(json_lines) -> None:
    logging.getLogger("peerwatch.worker").info("bucket_scored group=%s nodes=%d", "job-a", 8)
    (record,) = records(json_lines)
    assert record["message"] == "bucket_scored group=job-a nodes=8"
    assert record["level"] == "INFO"
    assert record["logger"] == "peerwatch.worker"
    assert record["time"].endswith("+00:00")  # ISO 8601, UTC


def test_library_lines_get_the_same_fields(json_lines) -> None:
    for name in ("faust.tables.recovery", "aiokafka.consumer.group_coordinator", "mode.worker"):
        logging.getLogger(name).warning("Restore complete!")
    assert [set(r) for r in records(json_lines)] == [{"time", "level", "logger", "message"}] * 3


def test_a_traceback_stays_inside_its_line(json_lines) -> None:
    try:
        raise ValueError("bad frame")
    except ValueError:
        logging.getLogger("peerwatch.worker").exception("frame_skipped stage=score")
    (record,) = records(json_lines)  # one line: the traceback is a field, not extra lines
    assert record["level"] == "ERROR"
    assert "ValueError: bad frame" in record["exc_info"]


def test_below_the_level_nothing_is_written(json_lines) -> None:
    logging.getLogger("aiokafka").debug("noise")
    assert json_lines.getvalue() == ""


def test_text_is_the_default_format() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        configure_logging("info", stream=stream)
        logging.getLogger("peerwatch.ingest").info("ingest_listening port=%d", 9201)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert stream.getvalue().rstrip().endswith("INFO peerwatch.ingest ingest_listening port=9201")
