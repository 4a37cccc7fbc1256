"""Regenerate ``states.json``: ``python tests/unit/data/snapshots/make_states.py``.

Per detector state or value class, a few ``to_dict`` outputs of real scenario runs,
written by the code of the commit that added them, each with its key order (the
worker's changelog table stores ``json.dumps`` of the snapshot as it comes, so the
order is part of the bytes). ``test_state_codec`` rebuilds each one with today's
code and requires the same bytes back. Only regenerate for an intentional format change.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from make import snapshot  # type: ignore[import-not-found]

from streams.worker.pipeline import Pipeline

HERE = Path(__file__).parent
# Written by Pipeline.snapshot after every bucket (mutable trackers and state).
STATES = (
    "detectors.group:GroupState",
    "detectors.baseline:NodeBaselines",
    "detectors.multivariate:GroupModel",
    "detectors.group_shift:GroupLevels",
    "detectors.population:Populations",
    "detectors.phase:Phase",
    "detectors.gpu_health:GpuHealthState",
    "detectors.xid.gauge:XidGaugeTracker",
    "detectors.xid.escalation:XidEscalator",
    "detectors.remap:RemapTracker",
    "detectors.failslow.alerts:FailSlowAlertState",
)
# Immutable values a step returns: every instance made during the runs.
VALUES = (
    "detectors.remap:RemapVerdict",
    "detectors.xid.escalation:XidDecision",
    "detectors.group_shift:GroupShift",
    "detectors.failslow.changepoint:ChangeVerdict",
    "detectors.failslow.localise:Culprit",
    "detectors.failslow.localise:Localisation",
    "detectors.failslow.mitigation:Advice",
    "detectors.failslow.monitor:FailSlowVerdict",
)
RUNS = (
    ("gpu-slow-16", 8, 30, 10),
    ("ecc-xid94", 8, 24, 10),
    ("uncorrectable-remap", 8, 30, 5),
    ("checkpoint-saves", 8, 40, 5),
)
KEEP = 4  # samples per class and run: evenly spread over the run, the largest included


def _cls(spec: str) -> type:
    module, name = spec.split(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def _keep(samples: list[str]) -> list[str]:
    unique = list(dict.fromkeys(samples))
    if len(unique) <= KEEP:
        return unique
    step = (len(unique) - 1) / (KEEP - 2)
    picks = {round(i * step) for i in range(KEEP - 1)} | {
        max(range(len(unique)), key=lambda i: len(unique[i]))
    }
    return [unique[i] for i in sorted(picks)]


def capture() -> dict[str, list[Any]]:
    written: dict[str, list[str]] = defaultdict(list)
    made: dict[str, list[Any]] = defaultdict(list)

    def recording(spec: str, to_dict: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any) -> Any:
            data = to_dict(self)
            if type(self) is _cls(spec):
                written[spec].append(json.dumps(data, allow_nan=False))
            return data

        return wrapper

    def making(spec: str, init: Callable[..., None]) -> Callable[..., None]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            made[spec].append(self)

        return wrapper

    for spec in STATES:
        cls = _cls(spec)
        cls.to_dict = recording(spec, cls.to_dict)  # type: ignore[attr-defined]
    for spec in VALUES:
        cls = _cls(spec)
        cls.__init__ = making(spec, cls.__init__)  # type: ignore[misc]
    out: dict[str, list[Any]] = defaultdict(list)
    for name, nodes, minutes, onset_min in RUNS:

        def after(pipeline: Pipeline, group: str) -> None:
            pipeline.snapshot(group)

        snapshot(name, nodes, minutes, onset_min, after_bucket=after)
        for spec in VALUES:
            written[spec] = [json.dumps(v.to_dict(), allow_nan=False) for v in made.pop(spec, [])]
        for spec in (*STATES, *VALUES):
            out[spec] += [json.loads(s) for s in _keep(written.pop(spec, []))]
    return dict(out)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    states = capture()
    path = HERE / "states.json"
    path.write_text(json.dumps(states, allow_nan=False, indent=None) + "\n")
    for spec, samples in states.items():
        print(f"{spec}: {len(samples)}", file=sys.stderr)
    print(path, path.stat().st_size, file=sys.stderr)
