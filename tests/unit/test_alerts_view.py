"""The alerts viewer's memory: newest records by bucket, each alert's latest status."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from streams.alerts_view import AlertLog, alerts_table, decode_alert


def record(node: str, status: str, bucket_ts: int) -> dict:
    return {"status": status, "labels": {"alertname": "A", "node": node}, "bucket_ts": bucket_ts}


def test_records_are_kept_in_bucket_order_and_capped() -> None:
    log = AlertLog(keep=3)
    for node, ts in (("n3", 300), ("n1", 100), ("n4", 400), ("n2", 200)):
        log.add(record(node, "firing", ts))
    assert [r["labels"]["node"] for r in log.records] == ["n2", "n3", "n4"]
    assert log.count == 4


def test_firing_counts_each_alerts_latest_status() -> None:
    log = AlertLog()
    log.add(record("n1", "firing", 100))
    log.add(record("n2", "firing", 100))
    log.add(record("n1", "resolved", 130))
    assert log.firing == 1  # n2; n1 resolved


def test_table_shows_newest_rows_with_group_or_xid_offset() -> None:
    rows = [
        record(f"n{i}", "firing", 30_000 * i) | {"labels": {"node": f"n{i}", "group": "g"}}
        for i in range(1, 5)
    ]
    console = Console(width=200, record=True)
    console.print(alerts_table(rows, rows=2))
    text = console.export_text()
    assert "n3" in text and "n4" in text and "n2" not in text and " g " in text
    console.print(alerts_table(rows, rows=1, xid_bucket_ms=30_000 * 2, bucket_ms=30_000))
    assert "+2" in console.export_text()


@pytest.mark.parametrize(
    "value",
    [b"not json", b"[1]", b'{"labels": "x"}', b'{"labels": {}, "signals": [1]}', None],
)
def test_what_is_no_alert_record_is_left_out(value: bytes | None) -> None:
    assert decode_alert(value) is None


def test_an_alert_record_is_read() -> None:
    value = json.dumps(record("n1", "firing", 100) | {"signals": [{"feature": "f", "z": 1}]})
    assert decode_alert(value.encode())["labels"]["node"] == "n1"
