"""The live alerts table: ``peerwatch.alerts`` as rows, for ``peerwatch demo`` and
``peerwatch alerts [--follow]`` against any Kafka.

One row per alert record (newest last), one consumer that reads the topic from
its earliest retained offset without joining a group (a viewer commits nothing
and moves no partition away from anyone).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from detectors.features import DEFAULT_BUCKET_MS
from streams.kafka.options import client_options, start_client
from streams.kafka.reading import records_to_end
from streams.settings import Settings

ROWS = 15  # newest records shown


def _signal_text(signal: dict) -> str:
    """``feature z=-19.1``, or ``xid=79`` for signals without a peer z (XID, remaps)."""
    z = signal.get("z")
    if isinstance(z, (int, float)) and z == z:
        return f"{signal['feature']} z={z:+.1f}"
    value = signal.get("value")
    shown = f"{value:.4g}" if isinstance(value, float) else value
    return f"{signal['feature']}={shown}"


SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow"}
"""The alert's name in its severity's colour: a severity column would not fit 80 columns."""


def utc_clock(ms: int, fmt: str = "%H:%M:%S") -> str:
    return "--:--" if ms <= 0 else time.strftime(fmt, time.gmtime(ms / 1000))


def alerts_table(
    alerts: Sequence[dict],
    *,
    xid_bucket_ms: int | None = None,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    time_format: str = "%H:%M:%S",
    rows: int = ROWS,
) -> Table:
    """The newest ``rows`` records. With ``xid_bucket_ms`` (the demo knows when it injected
    its fault) a column says how many buckets before or after it each alert came;
    without, the alert's peer group."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("time", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("alert", no_wrap=True)  # its severity's colour (SEVERITY_STYLE)
    table.add_column("node", no_wrap=True)
    table.add_column("vs XID" if xid_bucket_ms is not None else "group", overflow="fold")
    table.add_column("signals", overflow="fold")
    # Partitions are read in no particular order: rows go by bucket (stable: ties by arrival).
    for a in sorted(alerts, key=_bucket)[-rows:]:
        labels = a.get("labels", {})
        bucket = a.get("bucket_ts", 0)
        if xid_bucket_ms is not None:
            where = f"{(bucket - xid_bucket_ms) // bucket_ms:+d}"
        else:
            where = labels.get("group", "-")
        # one signal a line: a long feature name wraps on its own, not into its neighbour's
        sigs = "\n".join(_signal_text(sig) for sig in (a.get("signals") or [])[:3])
        status = a.get("status", "")
        name = labels.get("alertname", "").removeprefix("Peerwatch")
        table.add_row(
            utc_clock(bucket, time_format),
            Text(status, style="red" if status == "firing" else "green"),
            Text(name, style=SEVERITY_STYLE.get(labels.get("severity", ""), "")),
            labels.get("node", "-"),
            where,
            sigs,
        )
    return table


def _bucket(record: dict) -> int:
    ts = record.get("bucket_ts", 0)
    return ts if isinstance(ts, int) else 0


@dataclass
class AlertLog:
    """What a long-running viewer keeps: the newest ``keep`` records by bucket, and the
    latest status of every alert (its labels identify it; one alert's records share a
    key, so a partition, and arrive in order)."""

    keep: int = 1_000
    records: list[dict] = field(default_factory=list)
    count: int = 0
    _status: dict[tuple[tuple[str, str], ...], str] = field(default_factory=dict, repr=False)

    def add(self, record: dict) -> None:
        self.count += 1
        self._status[tuple(sorted(record["labels"].items()))] = record.get("status", "")
        bisect.insort(self.records, record, key=_bucket)
        del self.records[: -self.keep]

    @property
    def firing(self) -> int:
        return sum(1 for status in self._status.values() if status == "firing")


def decode_alert(value: bytes | None) -> dict | None:
    """An alert record as the table reads it, or None for anything else on the topic."""
    try:
        record = json.loads(value or b"")
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("labels"), dict):
        return None
    signals = record.get("signals") or []
    if not isinstance(signals, list) or not all(
        isinstance(sig, dict) and "feature" in sig for sig in signals
    ):
        return None
    return record


async def alerts_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A started consumer of the alerts topic, every partition assigned (no group: a
    consumer without one is given all partitions of the topics it subscribes to once
    their metadata is in, which ``start`` waits for); stopped again if it cannot start."""
    consumer = AIOKafkaConsumer(
        settings.topic_alerts,
        **client_options(settings),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        await start_client(consumer, settings)
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def watch_alerts(settings: Settings, on_alert: Callable[[dict], None]) -> None:
    """Every record of the alerts topic, from the earliest, to ``on_alert``, forever."""
    consumer = await alerts_consumer(settings)
    try:
        async for msg in consumer:
            if (record := decode_alert(msg.value)) is not None:
                on_alert(record)
    finally:
        await consumer.stop()


async def read_alerts(settings: Settings, timeout_s: float = 30.0) -> AlertLog:
    """The records the topic holds now: each partition read up to its end offset as of the
    start (no wait for silence), within ``timeout_s``."""
    consumer = await alerts_consumer(settings)
    log = AlertLog()
    try:
        async for msg in records_to_end(consumer, timeout_s):
            if (record := decode_alert(msg.value)) is not None:
                log.add(record)
    finally:
        await consumer.stop()
    return log


def _view(settings: Settings, log: AlertLog, rows: int) -> Group:
    head = (
        f"[b]peerwatch alerts[/b]  topic {settings.topic_alerts} on {settings.broker_host_port}"
        f"   records {log.count}   firing now {log.firing}"
    )
    table = alerts_table(
        log.records, bucket_ms=settings.bucket_ms, time_format="%m-%d %H:%M:%S", rows=rows
    )
    return Group(Panel(head), table)


async def show_alerts(settings: Settings, console: Console, *, follow: bool, rows: int) -> None:
    """Print the table once, or (``follow``) keep it live until cancelled."""
    if not follow:
        console.print(_view(settings, await read_alerts(settings), rows))
        return
    log = AlertLog(keep=max(rows, AlertLog.keep))
    watcher = asyncio.create_task(watch_alerts(settings, log.add))
    try:
        with Live(_view(settings, log, rows), console=console, refresh_per_second=2) as live:
            while not watcher.done():
                live.update(_view(settings, log, rows))
                await asyncio.sleep(0.5)
        watcher.result()  # it only ends by failing
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
