"""The simulator's rounds in columns (``generate_batches``, what the evaluator feeds the
builder) against its ``Series`` (``generate``): the same samples, frames and alerts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.frames_equivalence import comparable
from streams.ingest.remote_write import is_stale_marker
from streams.lab.simulator.run import generate, generate_batches
from streams.lab.simulator.scenarios import get_scenario
from streams.worker.offline import score_rounds

MINUTE_MS = 60_000


def _config(name: str, seed: int, **overrides: object):
    return replace(get_scenario(name).config_for(seed), **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["late-scrape", "host-down", "fleet-ha-pair"])
def test_batch_rounds_are_int_times_and_float_values_with_stale_markers_intact(name) -> None:
    """Late scrapes held back a round or more, a host going down (stale markers for its
    series and its trainer's), an HA pair (the mirror's samples after the replica's)."""
    config = _config(name, 2001, emit_stale_markers=True)
    end = config.start_ms + 45 * MINUTE_MS
    stale = 0
    for _, batch in generate_batches(config, end_ms=end):
        assert batch.timestamps.dtype == np.int64 and batch.values.dtype == np.float64
        assert len(batch.labels) == len(batch.timestamps) == len(batch.values)
        stale += sum(is_stale_marker(v) for v in batch.values.tolist())
    assert stale > 0 or name != "host-down"  # the marker's NaN payload survives the columns


@pytest.mark.long
def test_the_evaluator_gets_the_same_frames_and_alerts_from_batches() -> None:
    config = _config("host-down", 2000, emit_stale_markers=True)
    settings = get_scenario("host-down").settings_for(2000)
    end = config.start_ms + 40 * MINUTE_MS
    runs = []
    for rounds in (generate(config, end_ms=end), generate_batches(config, end_ms=end)):
        frames, changes = [], []
        for closed, scored in score_rounds(rounds, settings):
            frames += closed
            changes += [c for item in scored for c in item.changes]
        runs.append((comparable(frames), changes))
    assert runs[0][0] and runs[0] == runs[1]
