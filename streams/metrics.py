"""peerwatch's own Prometheus metrics, one registry per process (no globals)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class IngestMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "peerwatch_ingest_requests",
            "remote_write requests by HTTP status",
            ["code"],
            registry=r,
        )
        self.samples = Counter(
            "peerwatch_ingest_samples",
            "samples by outcome (accepted or drop reason)",
            ["outcome"],
            registry=r,
        )
        self.frames_sent = Counter(
            "peerwatch_ingest_frames_sent", "frames acknowledged by Kafka", registry=r
        )
        self.backlog = Gauge(
            "peerwatch_ingest_backlog_frames",
            "frames built but not yet acknowledged by Kafka",
            registry=r,
        )
        self.kafka_errors = Counter(
            "peerwatch_ingest_kafka_errors", "failed produce attempts (retried)", registry=r
        )


@dataclass
class WorkerMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.ready = Gauge(
            "peerwatch_worker_ready", "1 once the worker owns its partitions", registry=r
        )
        self.frames = Counter("peerwatch_worker_frames", "frames consumed", registry=r)
        self.frames_late = Counter(
            "peerwatch_worker_frames_late",
            "frames dropped because their bucket was already scored",
            ["group"],
            registry=r,
        )
        self.buckets = Counter(
            "peerwatch_worker_buckets_scored", "group buckets scored", ["group"], registry=r
        )
        self.bucket_nodes = Gauge(
            "peerwatch_worker_bucket_nodes",
            "nodes present in the last scored bucket",
            ["group"],
            registry=r,
        )
        self.score_seconds = Histogram(
            "peerwatch_worker_score_seconds",
            "time to score one group bucket",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
        )
        self.alerts = Counter(
            "peerwatch_worker_alert_changes",
            "alert transitions",
            ["alertname", "status"],
            registry=r,
        )
        self.deliveries = Counter(
            "peerwatch_worker_alert_deliveries",
            "alert deliveries by sink and outcome",
            ["sink", "outcome"],
            registry=r,
        )
