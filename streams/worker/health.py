"""The worker's HTTP side: ``/metrics``, ``/-/healthy`` and ``/-/ready``.

Served from threads, not the event loop, so a scrape or a probe is answered
while the loop is busy scoring a large bucket; ``/-/healthy`` asks the loop
itself to run a callback, so a wedged loop is seen as one.

Ready means: the frames agent runs, a partition assignment has completed and
the table state it brought is restored (Faust's ``on_rebalance_complete``;
a new rebalance takes readiness down until then), and the last Kafka probe
answered. Each change of readiness is logged (``worker_ready`` /
``worker_not_ready reason=...``): a probe sees a short rebalance only by luck.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import WorkerMetrics

log = EventLog("peerwatch.worker")

LIVENESS_TIMEOUT_S = 5.0  # the event loop must run a callback within this to be healthy


class WorkerHealth:
    """Set from the event loop, read from the HTTP threads (plain attributes: atomic)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics
        self.loop: asyncio.AbstractEventLoop | None = None
        self.partitions: int | None = None  # frames partitions of the last assignment
        self.restored = False
        self.agent = False
        self.kafka_error: str | None = None
        self._said: str | None = "starting"  # the reason last logged (None: ready)

    def rebalancing(self) -> None:
        self.restored = False
        self._update()

    def assigned(self, partitions: int) -> None:
        self.partitions = partitions
        self.metrics.partitions.set(partitions)
        self._update()

    def rebalance_complete(self) -> None:
        self.restored = True
        self._update()

    def agent_running(self, running: bool) -> None:
        self.agent = running
        self._update()

    def kafka(self, error: str | None) -> None:
        self.kafka_error = error
        self._update()

    def _update(self) -> None:
        reason = self.not_ready()
        self.metrics.ready.set(0 if reason else 1)
        if reason != self._said:
            if reason is None:
                log.info("worker_ready")
            else:
                log.info("worker_not_ready", reason=reason, fmt={"reason": "%r"})
            self._said = reason

    def not_ready(self) -> str | None:
        """Why the worker is not ready, or None."""
        if self.partitions is None:
            return "no partition assignment yet"
        if not self.restored:
            return "rebalancing: table state not restored yet"
        if not self.agent:
            return "frames agent not running"
        if self.kafka_error is not None:
            return f"kafka unreachable: {self.kafka_error}"
        return None

    def not_live(self, timeout_s: float = LIVENESS_TIMEOUT_S) -> str | None:
        """Why the worker should be restarted (its event loop does not answer), or None."""
        loop = self.loop
        if loop is None or not loop.is_running():
            return None  # starting or stopping: the process is there
        answered = threading.Event()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # closed in the meantime
            return None
        if answered.wait(timeout_s):
            return None
        return f"event loop did not answer within {timeout_s:g} s"


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a probe every few seconds
        pass


def worker_wsgi_app(health: WorkerHealth) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body, headers = health.metrics.page(
                environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING")
            )
            start_response("200 OK", headers)
            return [body]
        if path in ("/-/healthy", "/-/ready"):
            reason = health.not_live() if path == "/-/healthy" else health.not_ready()
            status = "503 Service Unavailable" if reason else "200 OK"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [(reason or "ok").encode() + b"\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found; try /metrics, /-/healthy or /-/ready\n"]

    return app


def serve_worker_http(host: str, port: int, health: WorkerHealth) -> WSGIServer:
    """Start serving in a daemon thread; returns the server (``shutdown()`` stops it)."""
    server = make_server(
        host,
        port,
        worker_wsgi_app(health),
        server_class=_ThreadingWSGIServer6 if ":" in host else _ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="worker-http", daemon=True).start()
    return server
