"""`peerwatch` command line: demo | ingest | worker | simulate | evaluate | chaos | ….

Each command builds one ``Settings`` (file < env < flags) and hands it to the
part that runs. Only peerwatch's own errors (``PeerwatchError``, for every command
at once) and bad settings are caught here and printed as ``Type: message``, exit 1;
anything else is a bug and keeps its traceback. A command that checks something
(``evaluate``, ``chaos``) exits 1 when the check fails, as promtool and amtool do.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from detectors.errors import PeerwatchError
from streams.settings import Settings, load_settings
from streams.telemetry.logs import configure_logging


def _settings(ctx: click.Context, **flags: Any) -> Settings:
    try:
        settings = load_settings(ctx.obj["config"], **flags)
    except ValidationError as exc:
        raise click.ClickException(f"ValidationError: {_without_inputs(exc)}") from None
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    if settings.log_format != "text":  # main() set up text before any settings were read
        configure_logging(ctx.obj["log_level"], settings.log_format)
    return settings


def _without_inputs(exc: ValidationError) -> str:
    """The errors by setting name, without the values given: pydantic's own text quotes
    them, and the value of a misspelled secret setting is still a secret."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in errors)


class _Commands(click.Group):
    """peerwatch's commands: its own errors end any of them as ``Type: message``, exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PeerwatchError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML or TOML settings file (env PEERWATCH_CONFIG).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.version_option(package_name="peerwatch", prog_name="peerwatch")
@click.pass_context
def main(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """peerwatch: peer-group anomaly detection for GPU training clusters."""
    configure_logging(log_level)
    ctx.obj = {"config": config, "log_level": log_level}


def _needs_the_lab(command: str) -> None:
    """The lab's commands (demo, simulate, evaluate, chaos) need ``streams.lab``, which the
    service image leaves out: say so instead of a ModuleNotFoundError traceback."""
    import importlib.util

    if importlib.util.find_spec("streams.lab") is None:
        raise click.ClickException(
            f"peerwatch {command} is lab tooling (streams/lab: simulator, evaluation, demo), "
            "which this install of the service leaves out; run it from a checkout of the "
            "repository (pip install -e .)"
        )


@main.command()
@click.option("--kafka", help="Kafka URL, e.g. kafka://127.0.0.1:9092 (env PEERWATCH_KAFKA).")
@click.option("--host", "ingest_host", help="Listen address.")
@click.option("--port", "ingest_port", type=int, help="Listen port (default 9201).")
@click.pass_context
def ingest(ctx: click.Context, **flags: Any) -> None:
    """Receive Prometheus remote_write and put per-node frames on Kafka."""
    from streams.ingest.server import run_ingest

    run_ingest(_settings(ctx, **flags))


@main.command()
@click.option("--kafka", help="Kafka URL (env PEERWATCH_KAFKA).")
@click.option("--alertmanager-url", help="Alertmanager base URL; '' disables.")
@click.option("--datadir", type=click.Path(path_type=Path), help="Faust state directory.")
@click.option("--store", help="Table store: memory:// or rocksdb:// (on disk in --datadir).")
@click.option("--web-host", "worker_web_host", help="/metrics, /-/healthy, /-/ready address.")
@click.option("--web-port", "worker_web_port", type=int, help="Their port (6066); 0: no server.")
@click.pass_context
def worker(ctx: click.Context, **flags: Any) -> None:
    """Score frames per peer group and send alerts (a Faust worker)."""
    from streams.worker.app import run_worker

    run_worker(_settings(ctx, **flags), loglevel=ctx.obj["log_level"])


@main.command()
@click.option("--kafka", default=None, help="Use this Kafka instead of the embedded broker.")
@click.option("--speed", default=20.0, show_default=True, help="Replay speed (x real time).")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@click.option(
    "--fault-after",
    default=900.0,
    show_default=True,
    help="Simulated seconds before the injected fault.",
)
@click.option("--nodes", default=60, show_default=True, help="Nodes in the simulated job.")
@click.option("--seed", default=1, show_default=True)
@click.option("--alertmanager-url", default=None, help="Also send alerts to this Alertmanager.")
def demo(
    kafka: str | None,
    speed: float,
    duration: float | None,
    fault_after: float,
    nodes: int,
    seed: int,
    alertmanager_url: str | None,
) -> None:
    """Run broker, ingest, worker and a simulated 60-node job with one fault; show alerts."""
    _needs_the_lab("demo")
    import asyncio

    from rich.console import Console

    from streams.lab.demo import run_demo

    kafka = kafka or os.environ.get("PEERWATCH_KAFKA")
    console = Console()
    try:
        view = asyncio.run(
            run_demo(kafka, speed, duration, fault_after, seed, nodes, alertmanager_url, console)
        )
    except KeyboardInterrupt:
        console.print("stopped.")
        return
    except (RuntimeError, TimeoutError, ConnectionError) as exc:  # the lab's services
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    firing = sorted(
        {
            a["labels"]["node"]
            for a in view.alerts
            if a["status"] == "firing" and "node" in a["labels"]
        }
    )
    console.print(f"nodes alerted: {', '.join(firing) or 'none'} (injected: {view.plan.victim})")


@main.command()
@click.option(
    "--url",
    default="http://127.0.0.1:9201/api/v1/write",
    show_default=True,
    help="remote_write endpoint to send to.",
)
@click.option("--hours", default=1.0, show_default=True, help="Simulated hours to send.")
@click.option("--speed", type=float, default=None, help="x real time; default as fast as accepted.")
@click.option("--nodes", default=60, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--fault-node", default=None, help="Inject an NVLink + bus fault on this host.")
@click.option("--fault-after", default=1800.0, show_default=True, help="Simulated seconds.")
@click.option(
    "--truth",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the ground truth here (JSON lines).",
)
@click.option("--spares", default=3, show_default=True, help="Idle spares beside the job.")
@click.option(
    "--job-label",
    default="train_job",
    show_default=True,
    help="Scheduler job label on the job's nodes ('none': no job label).",
)
@click.option(
    "--job-label-on",
    type=click.Choice(["all", "dcgm"]),
    default="all",
    show_default=True,
    help="Which series carry the job label (dcgm: only dcgm-exporter's, like hpc_job).",
)
@click.option(
    "--scrape-offsets",
    type=click.Choice(["inside", "spread"]),
    default="inside",
    show_default=True,
    help="spread: offsets hashed over the whole interval, as Prometheus does.",
)
@click.option("--jitter-ms", default=25, show_default=True, help="Scrape jitter (+- ms).")
@click.option(
    "--replicas",
    default="",
    help="HA pair: comma-separated replica names, e.g. replica-a,replica-b.",
)
def simulate(
    url: str,
    hours: float,
    speed: float | None,
    nodes: int,
    seed: int,
    fault_node: str | None,
    fault_after: float,
    truth: Path | None,
    spares: int,
    job_label: str,
    job_label_on: str,
    scrape_offsets: str,
    jitter_ms: int,
    replicas: str,
) -> None:
    """Send a simulated cluster to a remote_write receiver (ends in the present)."""
    _needs_the_lab("simulate")
    import asyncio
    import time

    from detectors.features import DEFAULT_BUCKET_MS
    from streams.lab.simulator import (
        ClusterConfig,
        NvlinkBusFault,
        ground_truth,
        replay,
        write_ground_truth,
    )

    bucket = DEFAULT_BUCKET_MS
    end_ms = int(time.time() * 1000) // bucket * bucket
    start_ms = end_ms - int(hours * 3600_000) // bucket * bucket
    faults = (
        (NvlinkBusFault(node=fault_node, gpu=3, onset_ms=start_ms + int(fault_after * 1000)),)
        if fault_node
        else ()
    )
    try:
        config = ClusterConfig(
            seed=seed,
            job_nodes=nodes,
            spares=spares,
            start_ms=start_ms,
            faults=faults,
            job_label=None if job_label == "none" else job_label,
            job_label_on=job_label_on,
            scrape_offsets=scrape_offsets,
            scrape_jitter_ms=jitter_ms,
            replicas=tuple(r for r in replicas.split(",") if r),
        )
    except ValueError as exc:
        raise click.ClickException(f"ValueError: {exc}") from exc
    if truth:
        write_ground_truth(truth, ground_truth(config, end_ms))
    stats = asyncio.run(replay(url, config, end_ms=end_ms, speed=speed, not_ahead_of=time.time))
    click.echo(f"sent {stats.rounds} rounds, {stats.samples} samples in {stats.requests} requests")


@main.command()
@click.option(
    "--scenario", "names", multiple=True, help="Scenario name (repeatable); default suite."
)
@click.option(
    "--tag",
    default=None,
    help="Only scenarios with this tag (fail-stop, fail-slow, must-not-page, precursor, "
    "real-fleet: the opt-in real-fleet shapes).",
)
@click.option("--seeds", default=None, type=int, help="Seeds per scenario (default 3, max 20).")
@click.option(
    "--seed-set",
    type=click.Choice(["reporting", "tuning"]),
    default="reporting",
    show_default=True,
    help="Report on seeds never used for tuning.",
)
@click.option("--long", "include_long", is_flag=True, help="Include the multi-day scenarios.")
@click.option(
    "--jobs",
    default=lambda: os.cpu_count() or 1,
    show_default="CPU count",
    type=int,
    help="Worker processes.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--details", is_flag=True, help="With --json: every fault, event and false page per run."
)
@click.option("--markdown", is_flag=True, help="Print the tables of docs/detection-quality.md.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Score heatmap of the first run, as PNG.",
)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def evaluate(
    names: tuple[str, ...],
    tag: str | None,
    seeds: int | None,
    seed_set: str,
    include_long: bool,
    jobs: int,
    as_json: bool,
    details: bool,
    markdown: bool,
    plot: Path | None,
    list_only: bool,
) -> None:
    """Run labelled scenarios through the detectors and print recall, lead time vs XID,
    false pages per group-day (critical, node warnings, group alerts) and culprit
    accuracy against their targets. Each scenario runs with its own worker settings.
    Exits 1 when a target is missed (MISS), naming each on stderr."""
    _needs_the_lab("evaluate")
    import json
    import time

    from streams.lab.evaluation import build_report, render_markdown, render_text, summarize
    from streams.lab.evaluation.runner import run_suite
    from streams.lab.simulator import scenarios as library
    from streams.progress import progress

    try:
        chosen = (
            [library.get_scenario(n) for n in names]
            if names
            else list(library.scenarios(tag, include_long=include_long))
        )
    except ValueError as exc:
        raise click.ClickException(f"ValueError: {exc}") from exc
    if list_only:
        for sc in chosen:
            click.echo(f"{sc.name:28} {','.join(sorted(sc.tags)):28} {sc.description}")
        return
    pool = library.REPORTING_SEEDS if seed_set == "reporting" else library.TUNING_SEEDS
    seed_list = list(pool)[: seeds or library.DEFAULT_SEEDS]
    started = time.perf_counter()
    with progress(len(chosen) * len(seed_list), "runs") as advance:
        results = run_suite(
            [sc.name for sc in chosen],
            seed_list,
            jobs=jobs,
            plot_first=bool(plot),
            on_done=lambda r: advance(f"{r.scenario} seed {r.seed}"),
        )
    runtime = time.perf_counter() - started
    runs: dict[str, list] = {}
    per_scenario: dict[str, float] = {}
    for r in results:
        runs.setdefault(r.scenario, []).append(r.score)
        per_scenario[r.scenario] = per_scenario.get(r.scenario, 0.0) + r.seconds
    report = build_report(
        runs,
        runtime_s=runtime,
        scenario_runtimes_s=per_scenario,
        meta={
            "seeds": seed_list,
            "seed_set": seed_set,
            "jobs": jobs,
            "seconds_per_group_day": {
                name: per_scenario[name] / summarize(scores).group_days
                for name, scores in runs.items()
                if summarize(scores).group_days
            },
        },
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(details), indent=2))
    elif markdown:
        click.echo(render_markdown(report))
    else:
        click.echo(render_text(report))
    if plot:
        from streams.lab.evaluation.plot import plot_score_heatmap, score_matrix

        first = results[0]
        scenario = library.get_scenario(first.scenario)
        nodes, buckets, matrix = score_matrix(first.node_scores)
        plot_score_heatmap(
            plot,
            nodes,
            buckets,
            matrix,
            scenario.ground_truth(first.seed),
            first.changes,
            title=f"{first.scenario} seed {first.seed}: node scores",
        )
        click.echo(f"plot: {plot}", err=True)
    if missed := report.missed():  # a check that fails exits non-zero, as chaos does
        click.echo(f"evaluate: {len(missed)} target(s) missed: {'; '.join(missed)}", err=True)
        sys.exit(1)


@main.command()
@click.option("--groups", default=6, show_default=True, help="Simulated jobs (peer groups).")
@click.option("--nodes", default=12, show_default=True, help="Nodes per job.")
@click.option("--partitions", default=8, show_default=True, help="Of the frames topic.")
@click.option("--rounds", default=660, show_default=True, help="Scrape rounds (30 s each).")
@click.option("--rounds-per-s", default=1.0, show_default=True, help="Streaming pace.")
@click.option("--workers", default=2, show_default=True)
@click.option(
    "--faults",
    default=None,
    help="KIND@AT[:SECONDS],... (wall seconds into the stream); kinds: kill-worker, "
    "kill-ingest, restart-broker, am-outage, am-stall, worker-join, worker-leave. "
    "Default: every fault once, a 5-minute Alertmanager outage last.",
)
@click.option("--resend-s", default=60.0, show_default=True, help="Workers' Alertmanager re-send.")
@click.option("--kafka", default=None, help="Use this broker (host:port): no broker restart.")
@click.option(
    "--ingest-wal",
    is_flag=True,
    help="Run the ingest with its write-ahead log (the service's default; the lab runs "
    "without it unless asked, as its earlier runs did).",
)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def chaos(
    groups: int,
    nodes: int,
    partitions: int,
    rounds: int,
    rounds_per_s: float,
    workers: int,
    faults: str | None,
    resend_s: float,
    kafka: str | None,
    ingest_wal: bool,
    workdir: Path | None,
    json_path: Path | None,
) -> None:
    """Stream simulated jobs through real Kafka, Alertmanager, ingest and workers while
    killing and stalling them; report samples, buckets and alerts lost or doubled."""
    _needs_the_lab("chaos")
    import asyncio
    import json
    import tempfile

    from streams.lab.chaos.faults import parse_faults
    from streams.lab.chaos.run import DEFAULT_FAULTS, ChaosPlan, run_chaos

    try:
        plan = ChaosPlan(
            groups=groups,
            nodes=nodes,
            rounds=rounds,
            rounds_per_s=rounds_per_s,
            faults=parse_faults(DEFAULT_FAULTS if faults is None else faults),
            workers=workers,
            resend_s=resend_s,
            ingest_wal=ingest_wal,
            partitions=partitions,
        )
    except ValueError as exc:
        raise click.ClickException(f"ValueError: {exc}") from exc
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll otherwise
    where = workdir or Path(tempfile.mkdtemp(prefix="peerwatch-chaos-"))
    click.echo(f"lab in {where}; streaming {plan.stream_s:.0f} s", err=True)
    try:
        report = asyncio.run(run_chaos(plan, where, kafka))
    except ValueError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(report.render())
    if json_path:
        json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    if not report.ok:
        sys.exit(1)


@main.command()
@click.option("--kafka", help="Kafka URL (env PEERWATCH_KAFKA).")
@click.option("--topic", "topic_alerts", help="Alerts topic (setting topic_alerts).")
@click.option("--follow", "-f", is_flag=True, help="Keep the table live until Ctrl-C.")
@click.option("--rows", default=15, show_default=True, help="Newest alert records shown.")
@click.pass_context
def alerts(
    ctx: click.Context, kafka: str | None, topic_alerts: str | None, follow: bool, rows: int
) -> None:
    """Show the alerts topic as the demo's table: once, or live with --follow."""
    import asyncio

    from aiokafka.errors import KafkaError
    from rich.console import Console

    from streams.alerts_view import show_alerts

    settings = _settings(ctx, kafka=kafka, topic_alerts=topic_alerts)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # its retries would scroll the view
    try:
        asyncio.run(show_alerts(settings, Console(), follow=follow, rows=rows))
    except KeyboardInterrupt:
        return
    except KafkaError as exc:  # its text starts with its type name
        raise click.ClickException(str(exc)) from exc


@main.command("xid-log")
@click.option("--kafka", help="Kafka URL (env PEERWATCH_KAFKA).")
@click.option("--node", required=True, help="This node's name (as peerwatch names it).")
@click.option("--group", required=True, help="The peer group (job) the node belongs to.")
@click.option(
    "--wal-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep each line on disk until Kafka has it (env PEERWATCH_XID_LOG_WAL_DIR).",
)
@click.pass_context
def xid_log(
    ctx: click.Context, kafka: str | None, node: str, group: str, wal_dir: Path | None
) -> None:
    """Ship NVRM Xid kernel log lines from stdin to the xid topic."""
    from streams.sources.xid_log import run_xid_log

    sent = run_xid_log(_settings(ctx, kafka=kafka, xid_log_wal_dir=wal_dir), node, group)
    click.echo(f"sent {sent} XID lines", err=True)


@main.command("settings")
@click.pass_context
def show_settings(ctx: click.Context) -> None:
    """Print the effective settings (file < env < flags) as YAML, secrets masked."""
    import yaml

    click.echo(yaml.safe_dump(_settings(ctx).redacted(), sort_keys=False), nl=False)


@main.command("prometheus-config")
@click.option(
    "--url",
    default=None,
    help="The ingest's remote_write URL (default http://peerwatch-ingest:9201/api/v1/write).",
)
@click.option("--bearer-token-file", help="Prometheus sends the token in this file.")
@click.option("--basic-auth-username", help="Prometheus sends basic auth with this user ...")
@click.option("--basic-auth-password-file", help="... and the password in this file.")
@click.option("--ca-file", help="Prometheus verifies the ingest's HTTPS certificate with this CA.")
@click.option("--cert-file", help="Prometheus' client certificate (the ingest asks for one) ...")
@click.option("--key-file", help="... and its key.")
@click.pass_context
def prometheus_config(ctx: click.Context, url: str | None, **auth: str | None) -> None:
    """Print the remote_write snippet for prometheus.yml that keeps what peerwatch reads."""
    from streams.catalog import features_for
    from streams.deploy_config import DEFAULT_WRITE_URL, WriterAuth, remote_write_config

    settings = _settings(ctx)
    try:
        features = features_for(settings)
        writer_auth = WriterAuth(**auth) if any(auth.values()) else None
    except ValueError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    text = remote_write_config(features, url or DEFAULT_WRITE_URL, writer_auth)
    click.echo(text, nl=False)


@main.command()
@click.option(
    "--source",
    "kind",
    type=click.Choice(["victoriametrics", "prometheus"]),
    required=True,
    help="victoriametrics: raw samples from /api/v1/export; prometheus: /api/v1/query_range.",
)
@click.option("--url", required=True, help="The server's base URL, e.g. http://victoria:8428.")
@click.option(
    "--selector",
    default="",
    help='Label matchers, e.g. {cluster="b200-a"}; only the feature catalog\'s metrics are read.',
)
@click.option("--start", required=True, help="RFC 3339, unix seconds, or now-55d.")
@click.option("--end", default="now", show_default=True, help="As --start.")
@click.option(
    "--events",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Known XIDs / failures (JSON lines or CSV: ts_ms or time, node, group, kind).",
)
@click.option(
    "--job-events",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The scheduler's job lifecycle events (JSON lines, the worker's schema): retry advice.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for report.html and report.json.",
)
@click.option(
    "--chunk-hours",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="History fetched per request (memory holds one chunk).",
)
@click.option(
    "--extra-label",
    "extra_label",
    multiple=True,
    metavar="NAME=VALUE",
    help="Add a label the server does not store to every series read (repeatable), e.g. "
    "Prometheus' external labels: --extra-label cluster=b200-a. A stored one wins.",
)
@click.option(
    "--group-label",
    "group_label",
    multiple=True,
    metavar="NAME",
    help="The peer-group label, first present wins (repeatable; instead of the settings' "
    "group_labels). The history is read one group at a time.",
)
@click.option(
    "--node-label",
    "node_label",
    multiple=True,
    metavar="NAME",
    help="The node label, first present wins (repeatable; instead of node_labels).",
)
@click.pass_context
def backtest(
    ctx: click.Context,
    kind: str,
    url: str,
    selector: str,
    start: str,
    end: str,
    events: Path | None,
    job_events: Path | None,
    out: Path,
    chunk_hours: float,
    extra_label: tuple[str, ...],
    group_label: tuple[str, ...],
    node_label: tuple[str, ...],
) -> None:
    """Replay history from VictoriaMetrics or Prometheus through the live pipeline (frame
    builder + worker pipeline, event time) and write report.html + report.json: alerts,
    lead time per known event, false alerts per day, fail-slow episodes, advice (with
    --job-events, the retry advisor's too). Exits 1 when nothing was scored, with the
    frame builder's drops by reason."""
    import time

    from streams.backtest.history import TimeRange, extra_labels, label_name, parse_time_ms
    from streams.backtest.job_events import load_job_events
    from streams.backtest.run import backtest_to, drop_counts, open_source
    from streams.backtest.summary import load_events

    extra = extra_labels(extra_label)
    settings = _settings(
        ctx,
        group_labels=[label_name(g, "--group-label") for g in group_label] or None,
        node_labels=[label_name(n, "--node-label") for n in node_label] or None,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per chunk otherwise
    now_ms = int(time.time() * 1000)
    try:
        time_range = TimeRange.on_grid(
            parse_time_ms(start, now_ms), parse_time_ms(end, now_ms), settings.bucket_ms
        )
        known = load_events(events) if events is not None else []
        jobs = load_job_events(job_events) if job_events is not None else []
        bucket = settings.bucket_ms
        chunk_ms = max(bucket, round(chunk_hours * 3_600_000) // bucket * bucket)
        source = open_source(kind, url, selector, settings, chunk_ms, extra)
        stats, result = backtest_to(out, source, time_range, settings, known, jobs)
    except OSError as exc:  # the events files, the output directory
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    lead = result.get("lead_time", {})
    click.echo(
        f"{stats.buckets} buckets, {stats.samples} samples of {stats.series} series in "
        f"{stats.seconds:.1f} s; {len(result.get('alerts', []))} alerts; "
        f"known events found {lead.get('found', 0)}/{lead.get('events', 0)}; "
        f"report: {out / 'report.html'}",
        err=True,
    )
    if stats.dropped:
        click.echo(f"samples the frame builder dropped: {drop_counts(stats.dropped)}", err=True)
