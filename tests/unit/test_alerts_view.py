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


def test_the_table_reads_at_80_columns() -> None:
    """Names whole (no ``Peerwatch`` prefix), one signal a line, values rounded."""
    collapse = {
        "status": "firing",
        "labels": {"alertname": "PeerwatchNodeCollapse", "node": "gpu084", "severity": "critical"},
        "bucket_ts": 3_000_000,
        "signals": [
            {"feature": "gpu_util", "z": -50.0},
            {"feature": "gpu_power_w", "z": -26.2},
            {"feature": "intr_rate", "z": -19.08},
        ],
    }
    deviation = {
        "status": "resolved",
        "labels": {"alertname": "PeerwatchNodeDeviation", "node": "gpu012"},
        "bucket_ts": 3_030_000,
        "signals": [{"feature": "pgpgout_rate", "value": 50.38273799161797}],
    }
    console = Console(width=80, record=True)
    console.print(alerts_table([collapse, deviation], xid_bucket_ms=3_000_000, bucket_ms=30_000))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for whole in ("NodeCollapse", "NodeDeviation", "gpu_util z=-50.0", "intr_rate z=-19.1"):
        assert whole in text
    assert "pgpgout_rate=50.38" in text and "50.382" not in text
    assert "Peerwatch" not in text
