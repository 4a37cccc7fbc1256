"""A worker restart from a changelog table written before detector families: the snapshot
restores, is written back unchanged, and the restored pipeline says what it said then.

``data/snapshots/restart.json`` (``make_restart.py``) holds, per scenario, each group's
snapshot with alerts pending and firing (peer scoring, per-GPU health, fail-slow), the
frames that came next and the alert changes the restored pipeline gave for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streams.frames import Frame
from streams.settings import Settings
from streams.worker.pipeline import Pipeline
from tests.unit.test_quantile import json_sketches

GOLDEN = json.loads((Path(__file__).parent / "data" / "snapshots" / "restart.json").read_text())
SETTINGS = Settings(group_labels=["train_job"])


def _restored(snapshots: dict[str, Any]) -> Pipeline:
    pipeline = Pipeline.from_settings(SETTINGS)
    for group, snap in snapshots.items():
        pipeline.restore(group, snap)
    return pipeline


@pytest.mark.parametrize("scenario", sorted(GOLDEN))
def test_snapshot_is_written_back_unchanged(scenario: str) -> None:
    snapshots = GOLDEN[scenario]["snapshots"]
    pipeline = _restored(snapshots)
    for group, snap in snapshots.items():
        # a legacy pickled quantile sketch is written back as its JSON numbers
        assert json.loads(json.dumps(pipeline.snapshot(group))) == json_sketches(snap)


@pytest.mark.parametrize("scenario", sorted(GOLDEN))
def test_restored_pipeline_gives_the_recorded_changes(scenario: str) -> None:
    run = GOLDEN[scenario]
    pipeline = _restored(run["snapshots"])
    transitions = 0
    for step in run["steps"]:
        for group, node, ts, values, gpus in step["frames"]:
            pipeline.add(Frame(group, node, ts, values, gpus), step["now_s"])
        for group in sorted(run["snapshots"]):
            got = [
                {
                    "ts": s.bucket.ts,
                    "changes": [c.to_dict() for c in s.changes],
                    "active": [c.to_dict() for c in s.active],
                }
                for s in pipeline.due(group, step["now_s"])
            ]
            assert json.loads(json.dumps(got)) == step["scored"].get(group, [])
            transitions += sum(len(s["changes"]) for s in got)
    assert transitions > 0  # the run after the restart fires or resolves something
