"""bench.frames_equivalence: the baseline builder (the pre-rework algorithm) and
``FrameBuilder`` agree on random streams and simulated clusters, call by call."""

from __future__ import annotations

import pytest

from bench.frames_equivalence import random_case, scenario_case


@pytest.mark.parametrize("chunk", range(4))
def test_random_streams_give_the_same_stats_frames_and_counters(chunk: int) -> None:
    seeds = range(chunk * 100, chunk * 100 + 100)
    assert [seed for seed in seeds if not random_case(seed)] == []


@pytest.mark.parametrize(
    ("name", "seed", "stale"), [("host-down", 1, True), ("late-scrape", 0, False)]
)
def test_simulated_clusters_give_the_same_frames(name: str, seed: int, stale: bool) -> None:
    assert scenario_case(name, seed, rounds=30, stale=stale)
