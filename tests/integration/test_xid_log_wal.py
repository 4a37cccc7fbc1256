"""`peerwatch xid-log --wal-dir`: a line read during a Kafka outage survives the shipper's
kill -9 and is sent at its next start (issue 9: XID lines lived only in memory)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.lab.launchers import EmbeddedBroker, free_port
from tests.integration.harness import read_topic, wait_for

FIRST = "[ 8100.000001] NVRM: Xid (PCI:0000:3b:00): 13, pid=2231, name=python, Graphics Exception"
LINE = "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has fallen off"


def _logged(wal: Path) -> int:
    """Bytes in the write-ahead log's segments."""
    return sum(p.stat().st_size for p in wal.glob("*.wal"))


def _xid_log(port: int, wal: Path, stdin: int) -> subprocess.Popen[bytes]:
    args = ["xid-log", "--kafka", f"kafka://127.0.0.1:{port}", "--node", "gpu070"]
    return subprocess.Popen(
        [sys.executable, "-m", "streams", *args, "--group", "job-7", "--wal-dir", str(wal)],
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PEERWATCH_TOPIC_XID": "xid-wal"},
    )


@pytest.mark.long
async def test_a_line_read_during_an_outage_is_sent_after_a_kill(tmp_path: Path) -> None:
    port, wal = free_port(), tmp_path / "wal"
    shipper = _xid_log(port, wal, subprocess.PIPE)
    assert shipper.stdin is not None
    try:
        with EmbeddedBroker(port, workdir=tmp_path / "tansu-1") as broker:
            # a first line while the broker is up: delivered, and the log is empty again
            shipper.stdin.write(FIRST.encode() + b"\n")
            shipper.stdin.flush()
            await wait_for(lambda: read_topic(broker.bootstrap, "xid-wal"), 60, "the first line")
            deadline = time.monotonic() + 10  # the ack reaches the shipper a moment later
            while _logged(wal):
                assert time.monotonic() < deadline, "a delivered line stayed in the log"
                time.sleep(0.2)
        # the broker is gone (memory storage: with all it held); the second line waits
        shipper.stdin.write(LINE.encode() + b"\n")
        shipper.stdin.flush()
        deadline = time.monotonic() + 30
        while not _logged(wal):
            assert shipper.poll() is None, shipper.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the line never reached the write-ahead log"
            time.sleep(0.2)
    finally:
        shipper.kill()
        shipper.wait()
    with EmbeddedBroker(port, workdir=tmp_path / "tansu-2") as broker:
        restarted = _xid_log(port, wal, subprocess.DEVNULL)  # no new input: only the replay
        _, err = restarted.communicate(timeout=60)
        assert restarted.returncode == 0, err.decode(errors="replace")
        assert b"sent 1 XID lines" in err
        records = await read_topic(broker.bootstrap, "xid-wal")
    assert [(r["node"], r["group"], r["line"]) for r in records] == [("gpu070", "job-7", LINE)]
    assert not _logged(wal)  # nothing left to replay
