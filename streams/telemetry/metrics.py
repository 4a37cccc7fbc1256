"""peerwatch's own Prometheus metrics, one registry per process (no globals)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from detectors.advisors.checkpoint_family import CheckpointState
from detectors.advisors.ledger import LedgerFigures
from detectors.failslow.slo import SloSummary
from detectors.features import per_gpu_key
from detectors.fusion import NodeVerdict
from detectors.gpu_health import XID_ALERT
from detectors.phase import PHASES
from detectors.population import Composition
from detectors.vocabulary import Advice, AlertChange
from streams.telemetry.group_gauges import GroupGauge, exposition
from streams.telemetry.logs import EventLog
from streams.telemetry.process_metrics import register_process_metrics

log = EventLog("peerwatch.ingest")

# from a /metrics scrape (ms) to a large remote_write body under load (s)
REQUEST_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
LIMIT_LOG_EVERY_S = 60.0  # a cardinality limit's drops are logged at most this often per reason


@dataclass
class IngestMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    decoder: str | None = None  # the remote_write decoder in use (build info's label)
    # limit reason -> (time of its last log line, samples dropped since); see ``count_samples``
    _limit_log: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        r = self.registry
        register_process_metrics(r, self.decoder)
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
            "peerwatch_ingest_kafka_errors",
            "failed attempts to reach Kafka (creating topics, producing; retried)",
            registry=r,
        )
        self.in_flight = Gauge(
            "peerwatch_ingest_requests_in_flight", "writes being read or decoded", registry=r
        )
        self.request_seconds = Histogram(
            "peerwatch_ingest_request_duration_seconds",
            "time to answer an HTTP request, by route and status code",
            ["handler", "code"],
            registry=r,
            buckets=REQUEST_BUCKETS_S,
        )
        self.task_failures = Counter(
            "peerwatch_ingest_task_failures",
            "background tasks (producer, flusher) that died and were restarted",
            ["task"],
            registry=r,
        )
        self.frames_dropped = Counter(
            "peerwatch_ingest_frames_dropped",
            "frames Kafka can never take (logged, not retried), by reason",
            ["reason"],
            registry=r,
        )
        self.features_dropped = Counter(
            "peerwatch_ingest_frame_features_dropped",
            "features left out of a built frame (a sum or rate out of the float range), by reason",
            ["reason"],
            registry=r,
        )
        self.ha_failovers = Counter(
            "peerwatch_ingest_ha_failovers", "HA Prometheus replica elections changed", registry=r
        )
        self.wal_refused = Counter(
            "peerwatch_ingest_wal_refused",
            "writes answered 503 because the write-ahead log could not take them, by reason "
            "(full: it holds ingest_wal_max_bytes; write_error: the disk refused)",
            ["reason"],
            registry=r,
        )
        self.wal_bytes = Gauge(
            "peerwatch_ingest_wal_bytes",
            "bytes the write-ahead log holds: bodies answered 204 whose frames Kafka has not "
            "all acknowledged",
            registry=r,
        )
        self.auth_failures = Counter(
            "peerwatch_ingest_auth_failures",
            "writes refused with 401, by reason (missing, scheme, malformed, wrong)",
            ["reason"],
            registry=r,
        )

    def count_samples(self, accepted: int, dropped: Mapping[str, int], now_s: float) -> None:
        """One write's samples by outcome. Drops by a cardinality limit (``*_limit``) are
        also logged -- once per reason per ``LIMIT_LOG_EVERY_S``, with the count since the
        last line: a flood of new series must not become a flood of log lines."""
        self.samples.labels(outcome="accepted").inc(accepted)
        for reason, n in dropped.items():
            if not n:
                continue
            self.samples.labels(outcome=reason).inc(n)
            if reason.endswith("_limit"):
                self._log_limit(reason, n, now_s)

    def _log_limit(self, reason: str, n: int, now_s: float) -> None:
        last_s, pending = self._limit_log.get(reason, (None, 0))
        pending += n
        if last_s is not None and now_s - last_s < LIMIT_LOG_EVERY_S:
            self._limit_log[reason] = (last_s, pending)
            return
        since_s = 0.0 if last_s is None else now_s - last_s
        log.warning(
            "ingest_cardinality_limit",
            reason=reason,
            dropped_samples=pending,
            since_s=since_s,
            fmt={"since_s": "%.0f"},
        )
        self._limit_log[reason] = (now_s, 0)


@dataclass
class WorkerMetrics:
    """Every series of the worker: ``registry`` holds them all; ``live`` the ones rendered
    on each scrape, ``gauges`` the per-group ones whose text is kept (``page``)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    live: CollectorRegistry = field(default_factory=CollectorRegistry, init=False, repr=False)
    # (metric, group) -> the job total last exported, for counters fed from running totals
    _exported: dict[tuple[str, str], float] = field(default_factory=dict, init=False, repr=False)
    _lag_partitions: set[int] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        r = self.live
        register_process_metrics(r)
        self.ready = Gauge(
            "peerwatch_worker_ready",
            "1 while /-/ready answers 200 (assigned, state restored, agent running, Kafka up)",
            registry=r,
        )
        self.partitions = Gauge(
            "peerwatch_worker_partitions",
            "frames partitions of this worker's last assignment (a skew shows across workers)",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "peerwatch_worker_consumer_lag",
            "messages of the frames topic this worker has not read yet, per assigned partition",
            ["partition"],
            registry=r,
        )
        self.frames = Counter("peerwatch_worker_frames", "frames consumed", registry=r)
        self.frames_unacked = Gauge(
            "peerwatch_worker_frames_unacked",
            "frames consumed but not acked: held until a written snapshot covers their "
            "bucket (what a crash of this worker would have Kafka deliver again)",
            registry=r,
        )
        self.frames_failed = Counter(
            "peerwatch_worker_frames_failed",
            "frames skipped: undecodable (decode) or their handling raised (score)",
            ["stage"],
            registry=r,
        )
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
        self.group_nodes = GroupGauge(
            "peerwatch_group_nodes",
            "nodes of a group by population after its last scored bucket: job (scored as peers), "
            "busy (job nodes busy now), idle (spares and idle nodes: reported, never paged)",
            ["population"],
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
        self.group_phase = GroupGauge(
            "peerwatch_group_phase",
            "1 for the group's training phase in its last scored bucket (save, load, "
            "training, idle), 0 for the others",
            ["phase"],
        )
        self._slo_gauges()
        self._slo_counters()
        self.nodes = NodeSeries(r)
        self.advisors = AdvisorSeries(r)
        self.checkpoint = CheckpointSeries(r)
        self.gauges = [
            self.group_nodes,
            self.group_phase,
            self.job_throughput_baseline,
            self.job_throughput_p50,
            self.job_throughput_p5,
            self.job_slow,
            *self.nodes.gauges,
            *self.advisors.gauges,
            *self.checkpoint.gauges,
        ]
        self.registry.register(self.live)
        for gauge in self.gauges:
            self.registry.register(gauge)
        # at zero from the start, so rates and dashboards have a series before the first one
        for stage in ("decode", "score"):
            self.frames_failed.labels(stage=stage)

    def page(
        self, accept: str | None, accept_encoding: str | None = None
    ) -> tuple[bytes, list[tuple[str, str]]]:
        """The ``/metrics`` body and headers for a scrape's Accept and Accept-Encoding."""
        return exposition(self.live, self.gauges, accept, accept_encoding)

    def observe_lag(self, lag: Mapping[int, int]) -> None:
        """The lag of the partitions assigned now; a partition that moved away loses its series."""
        for partition, n in lag.items():
            self.consumer_lag.labels(partition=str(partition)).set(n)
        for labels in list(self._lag_partitions - set(lag)):
            self.consumer_lag.remove(str(labels))
        self._lag_partitions = set(lag)

    def forget_group(self, group: str) -> None:
        """The group ended: its series go (a gauge would go on showing its last bucket)."""
        for metric in (
            self.frames_late,
            self.buckets,
            self.bucket_nodes,
            self.job_below_slo_seconds,
            self.job_allocated_gpu_seconds,
            self.job_in_band_gpu_seconds,
            self.job_lost_gpu_seconds,
            self.job_healthy_waiting_gpu_seconds,
            self.job_slow_incidents,
        ):
            metric.remove(group)
        for gauge in self.gauges:
            gauge.forget(group)
        for key in [k for k in self._exported if k[1] == group]:
            del self._exported[key]
        self.nodes.forget(group)
        self.checkpoint.forget(group)
        self.advisors.forget(group)

    def observe_phase(self, group: str, phase: str) -> None:
        """One series per phase, so a dashboard can stack them and alerts can join on it."""
        self.group_phase.replace(group, {(name,): float(name == phase) for name in PHASES})

    def _slo_gauges(self) -> None:
        unit = "in the trainer's unit: tokens/s, or iterations/s"
        self.job_throughput_baseline = GroupGauge(
            "peerwatch_job_throughput_baseline",
            f"the job's expected throughput (median of its healthy buckets), {unit}",
        )
        self.job_throughput_p50 = GroupGauge(
            "peerwatch_job_throughput_p50", f"median of the job's observed throughput, {unit}"
        )
        self.job_throughput_p5 = GroupGauge(
            "peerwatch_job_throughput_p5",
            f"5th percentile of the job's observed throughput, {unit}",
        )
        self.job_slow = GroupGauge(
            "peerwatch_job_slow",
            "1 while a confirmed slowdown (>= 10 %, sustained) of the job is open",
        )

    def _slo_counters(self) -> None:
        r = self.live
        self.job_below_slo_seconds = Counter(
            "peerwatch_job_below_slo_seconds",
            "seconds the job ran below the SLO band (a fraction of its baseline)",
            ["group"],
            registry=r,
        )
        self.job_allocated_gpu_seconds = Counter(
            "peerwatch_job_allocated_gpu_seconds",
            "GPU-seconds allocated to the job",
            ["group"],
            registry=r,
        )
        self.job_in_band_gpu_seconds = Counter(
            "peerwatch_job_in_band_gpu_seconds",
            "GPU-seconds the job ran within the SLO band",
            ["group"],
            registry=r,
        )
        self.job_lost_gpu_seconds = Counter(
            "peerwatch_job_lost_gpu_seconds",
            "GPU-seconds lost to running below the baseline",
            ["group"],
            registry=r,
        )
        self.job_healthy_waiting_gpu_seconds = Counter(
            "peerwatch_job_healthy_waiting_gpu_seconds",
            "healthy GPU-seconds spent waiting on a slow culprit",
            ["group"],
            registry=r,
        )
        self.job_slow_incidents = Counter(
            "peerwatch_job_slow_incidents", "fail-slow incidents of the job", ["group"], registry=r
        )

    def observe_composition(self, group: str, composition: Composition) -> None:
        self.group_nodes.replace(
            group,
            {("job",): composition.job, ("busy",): composition.busy, ("idle",): composition.idle},
        )

    def observe_slo(self, group: str, summary: SloSummary, *, slow: bool | None = None) -> None:
        """Export one job's SLO figures (``FailSlow.figures``); ``slow``: the last verdict.

        The summary holds running totals; the counters advance by what the totals
        grew since the last call (a total that went down -- a group restored from
        an older snapshot -- is taken as the new mark without moving the counter).
        """
        for gauge, value in (
            (self.job_throughput_baseline, summary.baseline),
            (self.job_throughput_p50, summary.p50),
            (self.job_throughput_p5, summary.p5),
        ):
            if value is not None:
                gauge.set(group, (), value)
        if slow is not None:
            self.job_slow.set(group, (), 1.0 if slow else 0.0)
        for name, counter, total in (
            ("seconds_below", self.job_below_slo_seconds, summary.seconds_below),
            # the summary counts GPU-hours; Prometheus names carry base units (seconds)
            ("allocated", self.job_allocated_gpu_seconds, 3600 * summary.gpu_hours_allocated),
            ("in_band", self.job_in_band_gpu_seconds, 3600 * summary.gpu_hours_in_band),
            ("lost", self.job_lost_gpu_seconds, 3600 * summary.gpu_hours_lost),
            (
                "waiting",
                self.job_healthy_waiting_gpu_seconds,
                3600 * summary.healthy_gpu_hours_waiting,
            ),
            ("incidents", self.job_slow_incidents, float(summary.incident_count)),
        ):
            grown = total - self._exported.get((name, group), 0.0)
            child = counter.labels(group=group)  # from 0: increase() sees the first growth
            if grown > 0:
                child.inc(grown)
            self._exported[(name, group)] = total


REMAP_KINDS = ("correctable", "uncorrectable", "pending", "failure")


class GroupSeries:
    """Series labelled by group first, replaced as a set per group and dropped with it.

    Its gauges are ``GroupGauge``s (their text is kept between scrapes: they are most of
    the page); its counters, few, are prometheus_client's.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self.gauges: list[GroupGauge] = []
        # group -> counter -> label values (after the group) -> the series exported for it now
        self._held: dict[str, dict[Counter, dict[tuple[str, ...], Any]]] = {}

    def _gauge(self, name: str, text: str, labels: tuple[str, ...] = ()) -> GroupGauge:
        """A gauge labelled by group first, then ``labels``."""
        gauge = GroupGauge(name, text, labels)
        self.gauges.append(gauge)
        return gauge

    def _counter(self, name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, text, ["group", *labels], registry=self._registry)

    def forget(self, group: str) -> None:
        for gauge in self.gauges:
            gauge.forget(group)
        for metric, held in self._held.pop(group, {}).items():
            for labels in held:
                metric.remove(group, *labels)

    def _replace(
        self, gauge: GroupGauge, group: str, values: Mapping[tuple[str, ...], float]
    ) -> None:
        gauge.replace(group, values)

    def _child(self, metric: Counter, group: str, labels: tuple[str, ...]) -> Any:
        """The labelled series, kept: ``labels()`` validates and locks on every call, and
        this runs for every node of every bucket."""
        held = self._held.setdefault(group, {}).setdefault(metric, {})
        child = held.get(labels)
        if child is None:
            child = held[labels] = metric.labels(group, *labels)
        return child


class NodeSeries(GroupSeries):
    """Series labelled by node: what a dashboard draws per node (``deploy/grafana``).

    Bounded: only the nodes of the groups this worker scores now. Each scored bucket
    replaces its group's set (a node that left, went silent or stopped firing loses
    its series); a group's go when it ends or moves to another worker (``forget``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.score = self._gauge(
            "peerwatch_node_score",
            "the node's fused deviation score among its peers in the group's last scored "
            "bucket (scored nodes only; 0 = typical)",
            ("node",),
        )
        self.remapped_rows = self._gauge(
            "peerwatch_node_remapped_rows",
            "DCGM row remapping summed over the node's GPUs in the last scored bucket "
            "(rows correctable/uncorrectable, GPUs pending/failed); nodes with any only",
            ("node", "kind"),
        )
        self.alert_firing = self._gauge(
            "peerwatch_alert_firing",
            "1 for each alert firing after the group's last scored bucket "
            "(node empty: a group alert)",
            ("node", "alertname", "severity"),
        )
        self.xid_alerts = self._counter(
            "peerwatch_node_xid_alerts",
            "PeerwatchXid alerts raised (a new XID, or a new action for one) by node and XID",
            ("node", "xid"),
        )

    def observe(
        self,
        group: str,
        verdicts: Mapping[str, NodeVerdict],
        frames: Mapping[str, Mapping[str, float]],
        active: Iterable[AlertChange],
    ) -> None:
        """One scored bucket of ``group``: its scores, row remaps and firing alerts."""
        self._replace(
            self.score,
            group,
            {
                (node,): v.score
                for node, v in verdicts.items()
                if v.scored and not v.silent and math.isfinite(v.score)
            },
        )
        remaps: dict[tuple[str, ...], float] = {}
        for node, values in frames.items():
            totals = remapped_rows(values)
            if any(totals.values()):
                remaps.update({(node, kind): n for kind, n in totals.items()})
        self._replace(self.remapped_rows, group, remaps)
        firing: dict[tuple[str, ...], float] = {
            (a.node or "", a.alertname, a.severity): 1.0 for a in active
        }
        self._replace(self.alert_firing, group, firing)

    def count_xids(self, group: str, changes: Iterable[AlertChange]) -> None:
        for change in changes:
            if change.alertname == XID_ALERT and change.status == "firing":
                xid = f"{change.score:.0f}"  # an XID alert's score is its XID (gpu_health)
                self._child(self.xid_alerts, group, (change.node or "", xid)).inc()


class AdvisorSeries(GroupSeries):
    """What the advisors said and the figures behind it: advice given, the retry advisor's
    chains and downtimes, the node ledger's concentration and per-node counts (its window).

    Unlike the node series these outlive a group's end: a job's retries span its restarts.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.advice = self._counter(
            "peerwatch_advice",
            "advice given (peerwatch.alerts advice records), by advisor and kind",
            ("advisor", "kind"),
        )
        self.retry_chains = self._gauge(
            "peerwatch_retry_chains",
            "automatic retry chains of the group's jobs: opened, recovered (a retry trained)",
            ("outcome",),
        )
        self.retry_downtime = self._gauge(
            "peerwatch_retry_downtime_median_seconds",
            "median downtime from a training attempt's failure to training again, by who "
            "restarted it (auto, manual)",
            ("trigger",),
        )
        self.ledger_concentration = self._gauge(
            "peerwatch_ledger_exclusion_concentration",
            "share of the group's node exclusions in the ledger's window held by its top-k nodes",
        )
        self.ledger_xids = self._gauge(
            "peerwatch_ledger_node_xids",
            "XIDs per node and code in the ledger's window (nodes with any only)",
            ("node", "xid"),
        )
        self.ledger_exclusions = self._gauge(
            "peerwatch_ledger_node_exclusions",
            "times the node was left out of a job's next attempt, in the ledger's window",
            ("node",),
        )

    def count_advice(self, advice: Iterable[Advice]) -> None:
        for a in advice:
            self._child(self.advice, a.group, (a.advisor, a.kind)).inc()

    def observe_retry(self, group: str, summary: Mapping[str, Any]) -> None:
        """``summary``: :func:`detectors.advisors.retry.retry_summary`."""
        chains: dict[tuple[str, ...], float] = {
            ("opened",): summary["chains"],
            ("recovered",): summary["chains_recovered"],
        }
        self._replace(self.retry_chains, group, chains)
        downtimes: dict[tuple[str, ...], float] = {
            (trigger,): hours * 3600.0
            for trigger in ("auto", "manual")
            if (hours := summary[f"median_downtime_{trigger}_h"]) is not None
        }
        self._replace(self.retry_downtime, group, downtimes)

    def observe_ledger(self, group: str, figures: LedgerFigures) -> None:
        share = figures.concentration
        self._replace(self.ledger_concentration, group, {} if share is None else {(): share})
        xids = figures.xids
        self._replace(
            self.ledger_xids,
            group,
            {(node, str(code)): n for node, codes in xids.items() for code, n in codes.items()},
        )
        exclusions = figures.exclusions
        self._replace(self.ledger_exclusions, group, {(n,): c for n, c in exclusions.items()})


class CheckpointSeries(GroupSeries):
    """The checkpoint advisors' figures per group: the last save and load, where their NFS
    requests waited, and the interval against Young/Daly's optimum. They go with the group
    (its advisors' state does)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.interval = self._gauge(
            "peerwatch_checkpoint_interval_seconds",
            "median time between the job's checkpoint saves (actual) and Young/Daly's "
            "sqrt(2 x save cost x MTBF) (optimal)",
            ("kind",),
        )
        self.overhead = self._gauge(
            "peerwatch_checkpoint_overhead_ratio",
            "expected share of time lost to saves and rework, at the actual and the optimal "
            "interval: cost/T + T/(2 MTBF)",
            ("kind",),
        )
        self.mtbf = self._gauge(
            "peerwatch_checkpoint_mtbf_seconds",
            "the job's mean time between failures: time run over failures seen, with the prior",
        )
        self.failures = self._gauge(
            "peerwatch_checkpoint_failures",
            "failures the interval advice counted (XID fail-stops, job deaths; one per outage)",
        )
        self.save_cost = self._gauge(
            "peerwatch_checkpoint_save_cost_seconds",
            "training time the group's last checkpoint save took (its GPU-util dip)",
        )
        self.load = self._gauge(
            "peerwatch_checkpoint_load_seconds", "length of the group's last restart load"
        )
        self.bytes = self._gauge(
            "peerwatch_checkpoint_bytes",
            "NFS bytes of the group's last checkpoint save / restart load",
            ("direction",),
        )
        self.storage_share = self._gauge(
            "peerwatch_checkpoint_storage_bandwidth_ratio",
            "the last save's / load's mean rate over the storage's maximum (write / read)",
            ("direction",),
        )
        self.rpc = self._gauge(
            "peerwatch_checkpoint_nfs_request_seconds",
            "seconds per NFS request in the last save (WRITE) / load (READ), queued and "
            "waiting for the response (node mean)",
            ("operation", "part"),
        )

    def observe(self, group: str, state: CheckpointState) -> None:
        f = state.figures
        pairs: dict[tuple[str, ...], float] = {}
        costs: dict[tuple[str, ...], float] = {}
        if f is not None:
            pairs = {("actual",): f.actual_s, ("optimal",): f.optimal_s}
            costs = {("actual",): f.actual_overhead, ("optimal",): f.optimal_overhead}
        self._replace(self.interval, group, pairs)
        self._replace(self.overhead, group, costs)
        self._replace(self.mtbf, group, {} if f is None else {(): f.mtbf_s})
        self._replace(self.failures, group, {(): float(state.interval.failures)})
        save, load = state.io.last_save, state.io.last_load
        self._replace(self.save_cost, group, {} if save is None else {(): save.lost_s})
        self._replace(self.load, group, {} if load is None else {(): load.seconds})
        volume: dict[tuple[str, ...], float] = {}
        share: dict[tuple[str, ...], float] = {}
        rpc: dict[tuple[str, ...], float] = {}
        for direction, op, event in (("write", "WRITE", save), ("read", "READ", load)):
            if event is None:
                continue
            volume[(direction,)] = event.bytes
            if math.isfinite(event.storage_share):
                share[(direction,)] = event.storage_share
            if event.rpc is not None:
                rpc[(op, "queue")] = event.rpc.queue_s
                rpc[(op, "response")] = event.rpc.response_s
        self._replace(self.bytes, group, volume)
        self._replace(self.storage_share, group, share)
        self._replace(self.rpc, group, rpc)


def remapped_rows(values: Mapping[str, float]) -> dict[str, float]:
    """A frame's ``remap_<kind>@<gpu>`` values summed over its GPUs, by kind."""
    totals = dict.fromkeys(REMAP_KINDS, 0.0)
    keys = values.keys() & _REMAP_KEYS.keys()
    if not any(values[k] for k in keys):  # almost every GPU has remapped nothing
        return totals
    for key in keys:
        if math.isfinite(value := values[key]):
            totals[_REMAP_KEYS[key]] += value
    return totals


# Every key a frame's remap values can have (dcgm-exporter's ``gpu`` label is the GPU's
# index), for a set intersection: it runs for every node of every bucket, and a scan of
# the frame's keys took three times as long (37 against 12 us for an 88-key frame).
_REMAP_KEYS = {
    per_gpu_key(f"remap_{kind}", str(gpu)): kind for kind in REMAP_KINDS for gpu in range(256)
}
