"""`peerwatch` command line: demo | ingest | worker | simulate.

Each command builds one ``Settings`` (file < env < flags) and hands it to the
part that runs. Only peerwatch's own errors and bad settings are caught here and
printed as ``Type: message``; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from streams.settings import Settings, load_settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _settings(ctx: click.Context, **flags: Any) -> Settings:
    try:
        return load_settings(ctx.obj["config"], **flags)
    except (ValidationError, ValueError, OSError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.pass_context
def main(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """peerwatch: peer-group anomaly detection for GPU training clusters."""
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    ctx.obj = {"config": config, "log_level": log_level}


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
@click.option("--store", help="Table store: memory:// or rocksdb://.")
@click.option("--metrics-port", "worker_web_port", type=int, help="/metrics port; 0 disables.")
@click.pass_context
def worker(ctx: click.Context, **flags: Any) -> None:
    """Score frames per peer group and send alerts (a Faust worker)."""
    from streams.app import run_worker

    if flags.get("alertmanager_url") == "":
        flags["alertmanager_url"] = None
        settings = _settings(ctx, **flags).model_copy(update={"alertmanager_url": None})
    else:
        settings = _settings(ctx, **flags)
    run_worker(settings, loglevel=ctx.obj["log_level"])


def _register_optional_commands() -> None:
    # Commands whose modules pull in heavier parts register themselves here, so
    # `peerwatch --help` stays fast and lists everything.
    from streams.demo import demo
    from streams.sources.simulate_cli import simulate

    main.add_command(demo)
    main.add_command(simulate)


_register_optional_commands()
