"""`peerwatch demo`: the whole service on one laptop, with a simulated job.

Starts an embedded Kafka-compatible broker (or uses ``--kafka``), the ingest
and a Faust worker as child processes, replays a simulated 60-node job (plus 3
spares) into the ingest over real remote_write, faster than real time, with one
NVLink + bus fault injected, and shows the ``peerwatch.alerts`` topic live.
Ctrl-C (or ``--duration``) stops everything; children run in their own process
groups and are terminated, then killed, so nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel

from detectors.features import DEFAULT_BUCKET_MS
from streams.alerts_view import alerts_table, utc_clock, watch_alerts
from streams.kafka.topics import ensure_topics
from streams.lab.launchers import EmbeddedBroker, PeerwatchProcess, free_port, peerwatch_env
from streams.lab.simulator import ClusterConfig, NvlinkBusFault, replay
from streams.settings import Settings

BUCKET_MS = DEFAULT_BUCKET_MS


@dataclass
class DemoPlan:
    """What the demo simulates; times are simulated epoch ms."""

    start_ms: int
    fault_ms: int
    config: ClusterConfig
    speed: float

    @classmethod
    def build(cls, speed: float, fault_after_s: float, seed: int, nodes: int) -> DemoPlan:
        now_ms = int(time.time() * 1000)
        # Start far enough in the past that the fast replay reaches the fault
        # before it catches up with the wall clock (the ingest refuses samples
        # from the future).
        start_ms = (now_ms - 3 * 3600_000) // BUCKET_MS * BUCKET_MS
        fault_ms = start_ms + int(fault_after_s * 1000) // BUCKET_MS * BUCKET_MS + 7_000
        victim = f"gpu{64 + nodes // 3:03d}"
        config = ClusterConfig(
            seed=seed,
            job_nodes=nodes,
            start_ms=start_ms,
            checkpoint_interval_s=420.0,  # a few saves before the fault: they must not page
            faults=(NvlinkBusFault(node=victim, gpu=3, onset_ms=fault_ms),),
        )
        return cls(start_ms, fault_ms, config, speed)

    @property
    def victim(self) -> str:
        node = getattr(self.config.faults[0], "node", None)
        if not isinstance(node, str):
            raise TypeError("the demo's fault names no node")
        return node


@dataclass
class DemoView:
    plan: DemoPlan
    sim_ms: int = 0
    rounds: int = 0
    samples: int = 0
    started: float = field(default_factory=time.monotonic)
    first_alert_wall_s: float | None = None
    alerts: list[dict] = field(default_factory=list)
    status: str = "starting"

    def on_round(self, t_ms: int, samples: int) -> None:
        self.sim_ms, self.rounds, self.samples = t_ms, self.rounds + 1, self.samples + samples

    def on_alert(self, record: dict) -> None:
        if self.first_alert_wall_s is None and record.get("status") == "firing":
            self.first_alert_wall_s = time.monotonic() - self.started
        self.alerts.append(record)

    def render(self) -> Group:
        plan = self.plan
        elapsed = time.monotonic() - self.started
        fault_bucket = (plan.fault_ms - plan.start_ms) // BUCKET_MS
        head = (
            f"[b]peerwatch demo[/b]  {self.status}   wall {elapsed:5.0f} s   "
            f"sim {utc_clock(self.sim_ms)} UTC   rounds {self.rounds}   "
            f"samples {self.samples:,}\n"
            f"job: {plan.config.job_nodes} nodes + {plan.config.spares} spares, "
            f"checkpoint saves every ~{plan.config.checkpoint_interval_s / 60:.0f} min, "
            f"replay {plan.speed:g}x real time\n"
            f"injected: NVLink + bus fault on [b]{plan.victim}[/b] GPU 3 "
            f"(XID 145 → 79) at sim {utc_clock(plan.fault_ms)} (bucket {fault_bucket})"
        )
        if self.first_alert_wall_s is not None:
            head += f"\nfirst alert {self.first_alert_wall_s:.0f} s after start"
        table = alerts_table(
            self.alerts, xid_bucket_ms=plan.fault_ms // BUCKET_MS * BUCKET_MS, bucket_ms=BUCKET_MS
        )
        return Group(Panel(head), table)


async def run_demo(
    kafka: str | None,
    speed: float,
    duration_s: float | None,
    fault_after_s: float,
    seed: int,
    nodes: int,
    alertmanager_url: str | None,
    console: Console,
) -> DemoView:
    for noisy in ("httpx", "aiokafka"):  # per-request lines would scroll the view away
        logging.getLogger(noisy).setLevel(logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="peerwatch-demo-"))
    plan = DemoPlan.build(speed, fault_after_s, seed, nodes)
    view = DemoView(plan)
    with contextlib.ExitStack() as stack:
        if kafka is None:
            console.print("starting the embedded broker (Tansu) …")
            broker = stack.enter_context(EmbeddedBroker(workdir=workdir / "broker"))
            kafka = f"kafka://{broker.bootstrap}"
        ingest_port, metrics_port = free_port(), free_port()
        env = peerwatch_env(
            kafka,
            # the scheduler's label: spares and excluded nodes are not job peers
            group_labels=["train_job"],
            ingest_port=ingest_port,
            datadir=workdir / "worker",
            worker_web_port=metrics_port,
            alertmanager_url=alertmanager_url or "",
            app_id=f"peerwatch-demo-{os.getpid()}",
        )
        settings = Settings(kafka=kafka)
        await ensure_topics(settings)
        console.print(f"starting ingest (:{ingest_port}) and worker; logs in {workdir}")
        # Starting them waits for readiness (a blocking poll): keep it off the loop.
        ingest, worker = await asyncio.gather(
            asyncio.to_thread(
                stack.enter_context,
                PeerwatchProcess(
                    ["ingest"],
                    env,
                    workdir / "ingest.log",
                    f"http://127.0.0.1:{ingest_port}/-/ready",
                ),
            ),
            asyncio.to_thread(
                stack.enter_context,
                PeerwatchProcess(
                    ["worker"],
                    env,
                    workdir / "worker.log",
                    f"http://127.0.0.1:{metrics_port}/metrics",
                    "peerwatch_worker_ready 1.0",
                ),
            ),
        )
        procs = [ingest, worker]
        view.status = "running"
        tasks = [
            asyncio.create_task(watch_alerts(settings, view.on_alert)),
            asyncio.create_task(
                replay(
                    f"http://127.0.0.1:{ingest_port}/api/v1/write",
                    plan.config,
                    speed=speed,
                    not_ahead_of=time.time,
                    on_round=view.on_round,
                )
            ),
        ]
        try:
            with Live(view.render(), console=console, refresh_per_second=2) as live:
                deadline = None if duration_s is None else time.monotonic() + duration_s
                while deadline is None or time.monotonic() < deadline:
                    for p in procs:
                        if not p.running:
                            raise RuntimeError(f"{p.name} exited; see {p.log_path}")
                    for t in tasks:
                        if t.done() and t.exception():
                            raise t.exception()  # type: ignore[misc]
                    live.update(view.render())
                    await asyncio.sleep(0.5)
                view.status = "finished"
                live.update(view.render())
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            console.print("stopping …")
    return view
