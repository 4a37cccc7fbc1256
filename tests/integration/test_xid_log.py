"""Kernel-log XIDs: `peerwatch xid-log` → topic peerwatch.xid → worker → Alertmanager.

A node's ``NVRM: Xid`` line arrives on the xid topic; the worker that owns the
node's group judges it with the group's next bucket and pages with the
catalog's action (79, fallen off the bus: restart the machine, then support);
the driver's "fallen off the bus" line without an Xid prefix is the same XID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from streams.lab.simulator import ClusterConfig, replay
from streams.settings import Settings
from streams.sources.xid_log import ship_xid_lines
from tests.integration.harness import Deployment, alerts_in_alertmanager, read_topic, wait_for

BUCKET_MS = 30_000
LINE = (
    "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, "
    "GPU has fallen off the bus."
)
# no Xid prefix, and a bus id the simulated dcgm-exporter reports (GPU 1's, pci_bus_id label)
FALLEN_OFF = "[ 8123.456789] NVRM: GPU at PCI:0000:43:00: GPU has fallen off the bus."


async def replay_around_kernel_lines(
    deployment: Deployment, settings: Settings, lines: list[str]
) -> int:
    """Ten buckets of a healthy job, ``lines`` shipped as gpu070's kernel log, four more
    buckets (which carry the log XID with them); returns how many lines were sent."""
    now_ms = int(time.time() * 1000)
    start = (now_ms - 3600_000) // BUCKET_MS * BUCKET_MS
    config = ClusterConfig(seed=3, job_name=deployment.job, start_ms=start)
    await replay(deployment.write_url, config, end_ms=start + 10 * BUCKET_MS)
    sent = await ship_xid_lines(lines, settings, "gpu070", deployment.job)
    await replay(
        deployment.write_url,
        config,
        start_ms=start + 10 * BUCKET_MS,
        end_ms=start + 14 * BUCKET_MS,
    )
    return sent


@pytest.mark.parametrize(
    ("line", "gpu"),
    [
        (LINE, "0000:3b:00.0"),  # a bus id no frame named: the alert names the bus id
        (FALLEN_OFF, "1"),  # the frames' pci_bus_id map puts it on DCGM's GPU index
    ],
)
async def test_a_kernel_xid_line_pages_with_its_action(
    kafka_bootstrap: str, alertmanager_url: str, tmp_path: Path, line: str, gpu: str
) -> None:
    deployment = Deployment.new(kafka_bootstrap, alertmanager_url, tmp_path)
    settings = Settings(
        kafka=f"kafka://{kafka_bootstrap}", topic_xid=deployment.env["PEERWATCH_TOPIC_XID"]
    )
    with deployment.ingest(), deployment.worker():
        lines = ["kernel noise that is not an XID", line]
        assert await replay_around_kernel_lines(deployment, settings, lines) == 1

        async def xid_alert() -> list[dict]:
            alerts = await alerts_in_alertmanager(alertmanager_url, deployment.job)
            return [a for a in alerts if a["labels"]["alertname"] == "PeerwatchXid"]

        (alert,) = await wait_for(xid_alert, 60, "the XID alert")
    assert alert["labels"]["node"] == "gpu070"
    assert alert["labels"]["gpu"] == gpu
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["action"] in {"RESTART_BM", "CONTACT_SUPPORT"}


async def test_xid_log_ships_xid_lines_with_bytes_that_are_not_utf8(kafka_bootstrap: str) -> None:
    """`peerwatch xid-log` reads stdin as bytes (drivers print anything): a stray byte once
    stopped it, by UnicodeDecodeError on reading or, under surrogateescape, on sending."""
    topic = f"xid-bytes-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PEERWATCH_KAFKA": f"kafka://{kafka_bootstrap}",
        "PEERWATCH_TOPIC_XID": topic,
    }
    bad_line = LINE.encode().replace(b"name=python", b"name=py\xffthon")
    done = subprocess.run(
        [sys.executable, "-m", "streams", "xid-log", "--node", "gpu070", "--group", "job-x"],
        input=b"usb 1-1: \xfe garbage \xc3(\n" + bad_line + b"\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert b"sent 1 XID lines" in done.stderr
    (record,) = await read_topic(kafka_bootstrap, topic)
    assert record["node"] == "gpu070"
    assert record["line"] == LINE.replace("name=python", "name=py\ufffdthon")
