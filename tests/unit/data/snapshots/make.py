"""Regenerate the golden snapshots: ``python tests/unit/data/snapshots/make.py``.

Each file is ``Pipeline.snapshot(group)`` of a shortened scenario run, written by
the code of the commit that added it; ``test_state_codec`` restores them with
today's code, so a change to the persisted format shows up as a failing test.
Only regenerate for an intentional, versioned format change.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.run import generate
from streams.lab.simulator.scenarios import REPORTING_SEEDS, get_scenario
from streams.settings import Settings
from streams.worker.offline import build_pair
from streams.worker.pipeline import Pipeline

HERE = Path(__file__).parent
SETTINGS = Settings(group_labels=["train_job"])
# (scenario, nodes, minutes run, minutes after start the fault begins)
RUNS = (("gpu-slow-16", 8, 24, 10), ("ecc-xid94", 8, 24, 10))


def snapshot(
    name: str,
    nodes: int,
    minutes: int,
    onset_min: int,
    after_bucket: Callable[[Pipeline, str], None] | None = None,
) -> dict[str, object]:
    """``Pipeline.snapshot`` of each group at the end; ``after_bucket`` sees every due call."""
    config = shortened(name, nodes, onset_min)
    builder, pipeline = build_pair(SETTINGS)
    groups: set[str] = set()
    for t_ms, series in generate(config, config.start_ms, config.start_ms + minutes * 60_000):
        now_s = t_ms / 1000.0
        builder.add(series, now_s=now_s)
        for f in builder.close_due_by_watermark(now_s=now_s, idle_s=SETTINGS.ingest_idle_flush_s):
            pipeline.add(f, now_s)
            groups.add(f.group)
        for group in sorted(groups):
            list(pipeline.due(group, now_s))
            if after_bucket is not None:
                after_bucket(pipeline, group)
    return {g: pipeline.snapshot(g) for g in sorted(groups)}


def shortened(name: str, nodes: int, onset_min: int) -> ClusterConfig:
    """The reporting seed on the first ``nodes`` job hosts, the fault at ``onset_min``."""
    config = get_scenario(name).config_for(REPORTING_SEEDS[0])
    onset = config.start_ms + onset_min * 60_000
    faults = tuple(
        replace(f, onset_ms=onset + f.onset_ms % SETTINGS.bucket_ms)  # type: ignore[arg-type]
        for f in config.faults
    )
    hosts = config.job_hosts[:nodes]
    faults = tuple(
        replace(f, node=hosts[0]) if getattr(f, "node", None) not in (None, *hosts) else f  # type: ignore[arg-type]
        for f in faults
    )
    return replace(config, job_nodes=nodes, faults=faults)


if __name__ == "__main__":
    for name, nodes, minutes, onset_min in RUNS:
        snaps = snapshot(name, nodes, minutes, onset_min)
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(snaps, allow_nan=False, sort_keys=True) + "\n")
        print(path, path.stat().st_size, file=sys.stderr)
