"""`peerwatch alerts [--follow]` against the session's Apache Kafka: the alerts topic as
the demo's table, in a real terminal (a pty) and piped."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid

from aiokafka import AIOKafkaProducer

from streams.lab.launchers import free_port
from streams.records import AlertRecord

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BUCKET_TS = 1_764_590_400_000  # 2025-12-01 12:00:00 UTC


def alert(status: str, node: str, bucket_ts: int = BUCKET_TS) -> bytes:
    record = AlertRecord(
        status=status,
        labels={
            "alertname": "PeerwatchNodeCollapse",
            "node": node,
            "group": "job-7",
            "severity": "critical",
        },
        annotations={"summary": "test"},
        starts_at="2025-12-01T12:00:00Z",
        ends_at=None,
        score=9.5,
        signals=[{"feature": "nvlink_bw", "z": -19.1, "value": 1.0, "median": 40.0, "gpu": "3"}],
        bucket_ts=bucket_ts,
    )
    return record.dumps()


async def send(bootstrap: str, topic: str, node: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=node.encode())
    finally:
        await producer.stop()


def env_for(bootstrap: str, topic: str) -> dict[str, str]:
    return {
        **os.environ,
        "PEERWATCH_KAFKA": f"kafka://{bootstrap}",
        "PEERWATCH_TOPIC_ALERTS": topic,
        "COLUMNS": "200",
        "TERM": "xterm-256color",
    }


class Terminal:
    """A command on a pseudo-terminal, its screen output read as plain text."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.text = ""

    def wait_for(self, pattern: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.text):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} on screen in {timeout_s:.0f} s:\n{self.text[-3000:]}"
            if select.select([self.master], [], [], min(left, 0.5))[0]:
                try:
                    self.text += ANSI.sub("", os.read(self.master, 65536).decode(errors="replace"))
                except OSError:  # the command exited: its side of the pty is gone
                    assert re.search(pattern, self.text), self.text[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.master)


def test_follow_shows_alerts_written_before_and_while_it_runs(kafka_bootstrap: str) -> None:
    topic = f"alerts-view-{uuid.uuid4().hex[:8]}"
    asyncio.run(send(kafka_bootstrap, topic, "gpu-node-7", alert("firing", "gpu-node-7")))
    term = Terminal(
        [sys.executable, "-m", "streams", "alerts", "--follow"], env_for(kafka_bootstrap, topic)
    )
    try:
        term.wait_for(r"firing\s.*NodeCollapse\s.*gpu-node-7\s.*job-7", 60)
        term.wait_for(r"nvlink_bw z=-19\.1", 1)
        term.wait_for(r"12-01 12:00:00", 1)
        assert re.search(r"firing now 1", term.text), term.text[-2000:]
        asyncio.run(send(kafka_bootstrap, topic, "gpu-node-7", alert("resolved", "gpu-node-7")))
        term.wait_for(r"resolved\s.*gpu-node-7", 30)
        term.wait_for(r"records 2\s+firing now 0", 5)
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop
        assert term.proc.wait(timeout=15) == 0
    finally:
        term.close()


def test_without_follow_the_table_is_printed_once(kafka_bootstrap: str) -> None:
    topic = f"alerts-view-{uuid.uuid4().hex[:8]}"
    # the later bucket first: rows go by bucket, not by the order partitions are read in
    for node, bucket_ts in (("gpu-node-2", BUCKET_TS + 30_000), ("gpu-node-1", BUCKET_TS)):
        asyncio.run(send(kafka_bootstrap, topic, node, alert("firing", node, bucket_ts)))
    done = subprocess.run(
        [sys.executable, "-m", "streams", "alerts", "--rows", "1"],
        env=env_for(kafka_bootstrap, topic),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "records 2   firing now 2" in done.stdout, done.stdout
    assert "gpu-node-2" in done.stdout and "gpu-node-1" not in done.stdout, done.stdout


def test_an_unreachable_kafka_is_one_error_line_and_status_1() -> None:
    dead = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "streams", "alerts", "--follow"],
        env=env_for(dead, "peerwatch.alerts"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Error: KafkaConnectionError: Unable to bootstrap" in done.stderr
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr, done.stderr
