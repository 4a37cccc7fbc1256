"""`peerwatch xid-log`: ship a node's NVRM Xid kernel lines to the ``peerwatch.xid`` topic.

Runs on a GPU node, fed by the kernel log, e.g.
``journalctl -k -f -o cat | peerwatch xid-log --node gpu081 --group llm-pretrain``.
Only lines that parse as an XID are sent — ``NVRM: Xid`` lines and the
driver's "GPU … has fallen off the bus" line (XID 79) — the rest of the kernel
log stays on the node. Lines name the GPU by PCI bus id; the worker puts them
on dcgm-exporter's GPU index (``streams.node_health``), so the same XID seen
in the log and in DCGM is one alert. Each line is sent and acknowledged before the next is
read, and a broker outage is retried, so a line read is a line delivered.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from detectors.xid import parse_kernel_line
from streams.records import XidLine
from streams.settings import Settings

log = logging.getLogger("peerwatch.xid_log")


async def ship_xid_lines(lines: Iterable[str], settings: Settings, node: str, group: str) -> int:
    """Send every XID line of ``lines``; returns how many were sent."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.broker_host_port, acks="all")
    await producer.start()
    sent = 0
    try:
        for line in lines:
            event = parse_kernel_line(line)
            if event is None:
                continue
            record = XidLine(group=group, node=node, ts=int(time.time() * 1000), line=line.rstrip())
            payload = record.dumps(serializer="json")
            while True:
                try:
                    await producer.send_and_wait(settings.topic_xid, payload, key=group.encode())
                    break
                except KafkaError as exc:
                    log.warning("kafka_unavailable error=%r; retrying", exc)
                    await asyncio.sleep(1.0)
            sent += 1
            log.info("xid_line_sent node=%s xid=%d", node, event.xid)
    finally:
        await producer.stop()
    return sent


def kernel_lines(stream: BinaryIO) -> Iterator[str]:
    """Lines of a kernel log byte stream; bytes that are not UTF-8 become U+FFFD.

    The kernel log carries whatever drivers print; one stray byte must not stop the
    shipper (strict decoding of ``sys.stdin`` raised ``UnicodeDecodeError`` there).
    """
    for raw in stream:
        yield raw.decode("utf-8", "replace")


def run_xid_log(settings: Settings, node: str, group: str) -> int:
    return asyncio.run(ship_xid_lines(kernel_lines(sys.stdin.buffer), settings, node, group))
