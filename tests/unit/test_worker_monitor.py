"""The worker's Faust monitor and producer/consumer settings
(streams.worker.monitor, create_app)."""

from __future__ import annotations

from faust.types import TP

from streams.settings import Settings
from streams.worker.app import create_app
from streams.worker.monitor import LeanMonitor

FRAMES = TP("peerwatch.frames", 2)


def test_the_monitor_keeps_what_the_lag_and_faust_s_stall_warning_read() -> None:
    monitor = LeanMonitor()
    monitor.on_message_in(FRAMES, 41, object())
    monitor.on_message_in(FRAMES, 42, object())
    assert monitor.on_stream_event_in(FRAMES, 42, object(), object()) is None
    assert monitor.tp_read_offsets == {FRAMES: 42}
    assert FRAMES in monitor.stream_inbound_time


def test_the_monitor_counts_no_event() -> None:
    """Per-message counters, read by nothing in the worker, stay as they started."""
    monitor = LeanMonitor()
    for offset in range(3):
        monitor.on_message_in(FRAMES, offset, object())
        monitor.on_stream_event_in(FRAMES, offset, object(), object())
        monitor.on_stream_event_out(FRAMES, offset, object(), object(), None)
        monitor.on_message_out(FRAMES, offset, object())
    assert monitor.messages_received_total == 0
    assert monitor.events_total == 0
    assert not monitor.events_by_stream


def test_the_worker_fetches_big_and_sends_its_snapshots_at_once() -> None:
    app = create_app(Settings())
    conf = app.conf
    assert isinstance(app.monitor, LeanMonitor)
    # no linger: a snapshot waiting in the producer while its frames are committed is lost
    # to the next owner after a rebalance (streams.worker.app.FAUST_THROUGHPUT)
    assert app.producer.linger_ms == 0
    assert conf.consumer_max_fetch_size > 1024**2
