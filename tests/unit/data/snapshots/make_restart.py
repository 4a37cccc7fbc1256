"""Regenerate ``restart.json``: ``python tests/unit/data/snapshots/make_restart.py``.

A worker restart as the changelog table sees it, written by the code before detector
families (keys ``window``, ``detector``, ``nodes``, ``failslow``, ``identity``): per
scenario, each group's snapshot with alerts firing (peer, per-GPU health, fail-slow),
the frames that came next, and what a pipeline restored from the snapshot said about
them. ``test_pipeline_restart`` replays it with today's code. Only regenerate for an
intentional, versioned format change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from make import SETTINGS, shortened  # type: ignore[import-not-found]

from streams.lab.simulator.run import generate
from streams.worker.offline import build_pair
from streams.worker.pipeline import Pipeline

HERE = Path(__file__).parent
# (scenario, nodes, minutes before the restart, minutes after it, fault onset minute)
RUNS = (("gpu-slow-16", 8, 12, 4, 10), ("ecc-xid94", 8, 12, 4, 10))


def run(name: str, nodes: int, before: int, after: int, onset_min: int) -> dict[str, Any]:
    config = shortened(name, nodes, onset_min)
    builder, pipeline = build_pair(SETTINGS)
    restart_ms = config.start_ms + before * 60_000
    groups: list[str] = []
    restored: Pipeline | None = None
    snaps: dict[str, Any] = {}
    steps: list[dict[str, Any]] = []
    for t_ms, series in generate(config, config.start_ms, restart_ms + after * 60_000):
        if restored is None and t_ms >= restart_ms:
            snaps = {g: json.loads(json.dumps(pipeline.snapshot(g))) for g in groups}
            restored = Pipeline.from_settings(SETTINGS)
            for g, snap in snaps.items():
                restored.restore(g, snap)
        now_s = t_ms / 1000.0
        builder.add(series, now_s=now_s)
        frames = builder.close_due_by_watermark(now_s=now_s, idle_s=SETTINGS.ingest_idle_flush_s)
        for f in frames:
            (restored or pipeline).add(f.group, f.node, f.ts, f.values, f.gpus, now_s)
            if f.group not in groups:
                groups.append(f.group)
        due = {g: (restored or pipeline).due(g, now_s) for g in sorted(groups)}
        if restored is not None:
            steps.append(
                {
                    "now_s": now_s,
                    "frames": [[f.group, f.node, f.ts, f.values, f.gpus] for f in frames],
                    "scored": {
                        g: [
                            {
                                "ts": s.bucket.ts,
                                "changes": [c.to_dict() for c in s.changes],
                                "active": [c.to_dict() for c in s.active],
                            }
                            for s in out
                        ]
                        for g, out in due.items()
                        if out
                    },
                }
            )
    return {"snapshots": snaps, "steps": steps}


if __name__ == "__main__":
    out = {name: run(name, *rest) for name, *rest in RUNS}
    path = HERE / "restart.json"
    path.write_text(json.dumps(out, sort_keys=True) + "\n")
    print(path, path.stat().st_size, file=sys.stderr)
