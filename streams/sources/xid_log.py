"""`peerwatch xid-log`: ship a node's NVRM Xid kernel lines to the ``peerwatch.xid`` topic.

Runs on a GPU node, fed by the kernel log, e.g.
``journalctl -k -f -o cat | peerwatch xid-log --node gpu081 --group llm-pretrain``.
Only lines that parse as an XID are sent — ``NVRM: Xid`` lines and the
driver's "GPU … has fallen off the bus" line (XID 79) — the rest of the kernel
log stays on the node. Lines name the GPU by PCI bus id; the worker puts them
on dcgm-exporter's GPU index (``streams.worker.node_health``), so the same XID seen
in the log and in DCGM is one alert. Each line is sent and acknowledged before the next is
read, and a broker outage is retried, so a line read is a line delivered -- while the
shipper lives. With ``xid_log_wal_dir`` (``--wal-dir``) each line is on disk (the ingest's
``WriteAheadLog``: fsynced) before it is sent and dropped once Kafka acknowledged it; a
shipper killed during an outage, or a node rebooted after its GPU fell off the bus,
sends it at its next start. A line sent just before a kill may go twice (at least once).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from detectors.xid.kernel_log import parse_kernel_line
from streams.ingest.wal import WriteAheadLog
from streams.kafka.options import client_options, start_client
from streams.records import XidLine
from streams.settings import Settings
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.xid_log")


async def ship_xid_lines(lines: Iterable[str], settings: Settings, node: str, group: str) -> int:
    """Send every XID line of ``lines`` (first those a killed run left in its write-ahead
    log); returns how many were sent."""
    wal = WriteAheadLog(settings.xid_log_wal_dir) if settings.xid_log_wal_dir else None
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await start_client(producer, settings)
    sent = 0
    try:
        if wal is not None:
            for _, payload in wal.replay():
                await _send(producer, settings.topic_xid, payload, group)
                sent += 1
            _delivered(wal)
            if sent:
                log.info("xid_lines_replayed", lines=sent)
        for line in lines:
            event = parse_kernel_line(line)
            if event is None:
                continue
            record = XidLine(group=group, node=node, ts=int(time.time() * 1000), line=line.rstrip())
            payload = record.dumps(serializer="json")
            if wal is not None:
                wal.append(payload)
            await _send(producer, settings.topic_xid, payload, group)
            if wal is not None:
                _delivered(wal)
            sent += 1
            log.info("xid_line_sent", node=node, xid=event.xid)
    finally:
        await producer.stop()
        if wal is not None:
            wal.close()
    return sent


async def _send(producer: AIOKafkaProducer, topic: str, payload: bytes, group: str) -> None:
    """Until Kafka acknowledges it (an outage is waited out)."""
    while True:
        try:
            await producer.send_and_wait(topic, payload, key=group.encode())
            return
        except KafkaError as exc:
            log.warning("kafka_unavailable", error=exc, retry_in_s=1)
            await asyncio.sleep(1.0)


def _delivered(wal: WriteAheadLog) -> None:
    """Everything appended so far is acknowledged: delete it (no buckets to wait for here)."""
    wal.checkpoint(None, sequence=0, sent=0, roll=True)


def kernel_lines(stream: BinaryIO) -> Iterator[str]:
    """Lines of a kernel log byte stream; bytes that are not UTF-8 become U+FFFD.

    The kernel log carries whatever drivers print; one stray byte must not stop the
    shipper (strict decoding of ``sys.stdin`` raised ``UnicodeDecodeError`` there).
    """
    for raw in stream:
        yield raw.decode("utf-8", "replace")


def run_xid_log(settings: Settings, node: str, group: str) -> int:
    return asyncio.run(ship_xid_lines(kernel_lines(sys.stdin.buffer), settings, node, group))
