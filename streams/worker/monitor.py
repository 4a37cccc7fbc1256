"""The worker's Faust ``Monitor``: only the bookkeeping something reads, per message.

Faust calls its monitor for every message and stream event (counters by topic, by
stream and by task name, a timing dict per event, a latency history). Nothing of the
worker reads those: its figures are its own (``streams.telemetry.metrics``) and Faust's web
views are off. What is read stays: ``tp_read_offsets`` (the consumer lag,
``streams.worker.app.frames_lag``) and ``stream_inbound_time`` (Faust's warning that a
partition's stream stopped processing). Commits, sends and rebalances, a few a
second, keep Faust's bookkeeping.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from faust.sensors import Monitor
from faust.types import TP


class LeanMonitor(Monitor):  # type: ignore[misc]  # faust is untyped here
    def on_message_in(self, tp: TP, offset: int, message: Any) -> None:
        self.tp_read_offsets[tp] = offset

    def on_stream_event_in(self, tp: TP, offset: int, stream: Any, event: Any) -> None:
        self.stream_inbound_time[tp] = monotonic()

    def on_stream_event_out(
        self, tp: TP, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        pass

    def on_message_out(self, tp: TP, offset: int, message: Any) -> None:
        pass

    def on_table_get(self, table: Any, key: Any) -> None:
        pass

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        pass

    def on_table_del(self, table: Any, key: Any) -> None:
        pass
