"""EventLog: one event rendered as ``event k=v ...`` in text, with its fields as keys in JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from streams.telemetry.logs import RESERVED_FIELDS, EventLog, LogFormat, configure_logging

log = EventLog("peerwatch.worker")


@pytest.fixture
def output() -> Iterator[Callable]:
    """Configure the root logger in a format on a StringIO; restore it afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level

    def configure(log_format: LogFormat, level: str = "info") -> io.StringIO:
        stream = io.StringIO()
        configure_logging(level, log_format, stream=stream)
        return stream

    yield configure
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def alert_firing() -> None:
    log.info(
        "alert_firing",
        alertname="PeerwatchNodeCollapse",
        group="g1",
        node="n3",
        bucket=1_800_000,
        score=7.123,
        reason="gpu_util low",
        ended=False,
        gone=None,
        fmt={"score": "%.2f"},
    )


def test_json_has_the_event_and_its_fields_as_keys_with_their_types(output) -> None:
    stream = output("json")
    alert_firing()
    record = json.loads(stream.getvalue())
    assert record["message"] == (
        "alert_firing alertname=PeerwatchNodeCollapse group=g1 node=n3 bucket=1800000 "
        "score=7.12 reason=gpu_util low ended=False gone=None"
    )
    assert record["event"] == "alert_firing"
    assert record["level"] == "INFO" and record["logger"] == "peerwatch.worker"
    fields = {k: record[k] for k in ("group", "node", "bucket", "score", "ended", "gone")}
    assert fields == {
        "group": "g1",
        "node": "n3",
        "bucket": 1_800_000,  # an int, not "1800000"
        "score": 7.123,  # the value; the %.2f is the text's
        "ended": False,
        "gone": None,
    }


def test_text_is_exactly_event_and_key_value_pairs(output) -> None:
    stream = output("text")
    alert_firing()
    line = stream.getvalue().rstrip("\n")
    assert line.endswith(
        " INFO peerwatch.worker alert_firing alertname=PeerwatchNodeCollapse group=g1 node=n3"
        " bucket=1800000 score=7.12 reason=gpu_util low ended=False gone=None"
    )
    assert "\n" not in line


def test_values_render_as_the_old_formats_did(output) -> None:
    stream = output("text")
    log.warning("frame_skipped", stage="decode", error=ValueError("x" * 500), offset="?")
    log.warning("worker_not_ready", reason="no partition assignment yet", fmt={"reason": "%r"})
    log.warning("ingest_cardinality_limit", since_s=61.4, wait_s=2.5, fmt={"since_s": "%.0f"})
    log.warning("topics_created", names=["a", "b"], partitions=4)
    messages = [ln.split(" peerwatch.worker ", 1)[1] for ln in stream.getvalue().splitlines()]
    assert messages == [
        f"frame_skipped stage=decode error={repr(ValueError('x' * 500))[:300]} offset=?",
        "worker_not_ready reason='no partition assignment yet'",
        "ingest_cardinality_limit since_s=61 wait_s=2.500",  # floats: %.3f unless told
        "topics_created names=['a', 'b'] partitions=4",
    ]


def test_json_values_are_json_friendly(output) -> None:
    stream = output("json")
    error = ConnectionError("refused " + "y" * 400)
    log.warning("kafka_unavailable", error=error, names=("a", "b"), path=io.StringIO)
    record = json.loads(stream.getvalue())
    assert record["error"] == repr(error)[:300]  # an exception: its repr, cut like the text
    assert record["names"] == ["a", "b"]
    assert record["path"] == str(io.StringIO)  # anything else: as the text shows it


def test_a_field_named_like_a_record_attribute_does_not_raise(output) -> None:
    stream = output("json")
    log.info("job_event", name="train-1", module="m", lineno=3, message="hi", level="x", event="e")
    record = json.loads(stream.getvalue())
    assert (
        record["message"] == "job_event name=train-1 module=m lineno=3 message=hi level=x event=e"
    )
    assert record["logger"] == "peerwatch.worker" and record["level"] == "INFO"
    assert record["event"] == "job_event"
    renamed = {k: record[k] for k in ("name_", "module_", "lineno_", "message_", "level_")}
    assert renamed == {"name_": "train-1", "module_": "m", "lineno_": 3, "message_": "hi"} | {
        "level_": "x"
    }
    assert record["event_"] == "e"


def test_every_logrecord_attribute_is_a_field_name_too(output) -> None:
    assert set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"} <= RESERVED_FIELDS
    stream = output("json")
    names = sorted(RESERVED_FIELDS - {"exc_info"})  # exc_info is the keyword for a traceback
    for key in names:  # each would be a KeyError from makeRecord as it is
        log.info("any", **{key: 1})
    records = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    assert [r[f"{key}_"] for key, r in zip(names, records, strict=True)] == [1] * len(names)
    assert [r["message"] for r in records] == [f"any {key}=1" for key in names]


def test_exc_info_gives_the_traceback(output) -> None:
    stream = output("json")
    try:
        raise ValueError("bad frame")
    except ValueError as exc:
        log.error("frame_skipped", stage="score", error=exc, exc_info=exc)
        log.exception("agent_died", agent="score_frames")
    skipped, died = (json.loads(ln) for ln in stream.getvalue().splitlines())
    assert skipped["message"] == "frame_skipped stage=score error=ValueError('bad frame')"
    assert "ValueError: bad frame" in skipped["exc_info"]
    assert died["level"] == "ERROR" and died["agent"] == "score_frames"
    assert "Traceback" in died["exc_info"] and "ValueError: bad frame" in died["exc_info"]


def test_exc_info_in_text_follows_the_line(output) -> None:
    stream = output("text")
    try:
        raise ValueError("bad frame")
    except ValueError:
        log.exception("agent_died", agent="score_frames")
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith("ERROR peerwatch.worker agent_died agent=score_frames")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: bad frame"


def test_a_disabled_level_renders_nothing(output) -> None:
    stream = output("json", level="info")

    class Costly:
        def __str__(self) -> str:
            raise AssertionError("rendered although the level is disabled")

        __repr__ = __str__

    log.debug("frame_late", group=Costly(), error=Costly(), fmt={"group": "%r"})
    assert stream.getvalue() == ""


def test_the_record_names_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="peerwatch.worker")
    for emit in (log.debug, log.info, log.warning, log.error):
        emit("here", n=1)
    try:
        raise ValueError
    except ValueError:
        log.exception("here")
    assert [(r.filename, r.funcName) for r in caplog.records] == [
        ("test_event_logs.py", "test_the_record_names_the_caller")
    ] * 5
    assert [r.levelno for r in caplog.records] == [10, 20, 30, 40, 40]
    assert log.name == "peerwatch.worker"
