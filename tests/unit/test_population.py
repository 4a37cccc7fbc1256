"""Spares and idle nodes are not peers; a collapse is a change, not a state seen at first sight."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from detectors.group import GroupState, ScoringParams, score_bucket
from detectors.peer import peer_zscores
from detectors.population import (
    PopulationParams,
    Populations,
    role_peer_stats,
    step_populations,
)
from streams.catalog import DEFAULT_FEATURES
from streams.lab.simulator.config import DEFAULT_START_MS, ClusterConfig
from streams.lab.simulator.faults import NvlinkBusFault
from streams.lab.simulator.run import generate
from streams.settings import Settings
from streams.worker.offline import run_offline, score_rounds

BUSY = {"gpu_util": 99.0}
IDLE = {"gpu_util": 0.0}
PARAMS = PopulationParams(release_buckets=3)


def _step(prior: Populations, frames: dict, known: tuple[str, ...] = ()) -> Populations:
    populations, _ = step_populations(prior, frames, frames, PARAMS, known)
    return populations


def _fleet(busy: int, idle: int) -> dict[str, dict[str, float]]:
    frames = {f"n{i:02d}": dict(BUSY) for i in range(busy)}
    frames.update({f"s{i}": dict(IDLE) for i in range(idle)})
    return frames


def test_nodes_idle_at_first_sight_are_the_idle_population() -> None:
    populations, composition = step_populations(Populations(), _fleet(6, 2), _fleet(6, 2), PARAMS)
    assert populations.idle == {"s0", "s1"}
    assert len(populations.job) == 6
    assert (composition.job, composition.busy, composition.idle) == (6, 6, 2)


def test_a_job_node_that_goes_idle_stays_in_the_job_population() -> None:
    populations = _step(Populations(), _fleet(6, 0))
    frames = _fleet(6, 0) | {"n03": dict(IDLE)}
    populations = _step(populations, frames)
    assert "n03" in populations.job
    assert populations.idle_streak == {"n03": 1}


def test_an_idle_node_turning_busy_joins_the_job_at_once() -> None:
    populations = _step(Populations(), _fleet(6, 1))
    populations = _step(populations, _fleet(7, 0) | {"s0": dict(BUSY)})
    assert "s0" in populations.job and not populations.idle


def test_a_job_node_idle_while_the_job_runs_on_is_released_after_release_buckets() -> None:
    populations = _step(Populations(), _fleet(6, 0))
    frames = _fleet(6, 0) | {"n03": dict(IDLE)}
    for _ in range(PARAMS.release_buckets - 1):
        populations = _step(populations, frames)
    assert "n03" in populations.job
    populations = _step(populations, frames)
    assert "n03" in populations.idle and "n03" not in populations.idle_streak


def test_nobody_is_released_while_the_whole_job_is_idle() -> None:
    populations = _step(Populations(), _fleet(6, 0))
    dead = {n: dict(IDLE) for n in _fleet(6, 0)}
    for _ in range(10 * PARAMS.release_buckets):
        populations = _step(populations, dead)
    assert len(populations.job) == 6 and not populations.idle_streak


def test_a_paused_job_keeps_the_culprits_idle_streak() -> None:
    populations = _step(Populations(), _fleet(6, 0))
    culprit_idle = _fleet(6, 0) | {"n03": dict(IDLE)}
    populations = _step(populations, culprit_idle)
    populations = _step(populations, {n: dict(IDLE) for n in culprit_idle})  # a save: all dip
    assert populations.idle_streak == {"n03": 1}
    populations = _step(populations, culprit_idle)
    assert populations.idle_streak == {"n03": 2}


def test_a_node_without_the_activity_feature_is_a_job_node_and_keeps_its_place() -> None:
    populations = _step(Populations(), {"n0": {"procs_running": 12.0}, "s0": dict(IDLE)})
    assert populations.job == {"n0"} and populations.idle == {"s0"}
    populations = _step(populations, {"n0": {}, "s0": {"procs_running": 1.0}})
    assert populations.job == {"n0"} and populations.idle == {"s0"}


def test_a_known_node_idle_at_first_sight_is_a_job_node() -> None:
    """After a restore without populations, a collapsed culprit is not taken for a spare."""
    populations = _step(Populations(), _fleet(6, 0) | {"n09": dict(IDLE)}, known=("n09",))
    assert "n09" in populations.job


def test_round_trip() -> None:
    populations = _step(Populations(), _fleet(6, 2))
    populations = _step(populations, _fleet(6, 2) | {"n01": dict(IDLE)})
    assert Populations.from_dict(populations.to_dict()) == populations


@pytest.mark.parametrize(
    "bad",
    [
        {"activity_feature": ""},
        {"busy_level": 0.0},
        {"release_buckets": 0},
        {"release_buckets": True},
        {"running_share": 0.0},
    ],
)
def test_params_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        PopulationParams(**bad)


# --- through the ingest's frame builder and the worker's pipeline, default settings ----------


def _alerts(config: ClusterConfig, hours: float) -> Counter:
    end = config.start_ms + int(hours * 3_600_000)
    run = run_offline(generate(config, end_ms=end), Settings())
    return Counter((c.alertname, c.node) for c in run.changes if c.status == "firing")


def test_idle_spares_in_the_cluster_group_are_never_paged() -> None:
    """The source's shape: 63 nodes, 60 in the job, 3 idle spares, grouped by ``cluster``."""
    config = ClusterConfig(
        seed=11, job_label=None, spares=3, first_save_s=60.0, checkpoint_interval_s=1200.0
    )
    assert _alerts(config, 0.75) == Counter()


def test_a_job_node_that_collapses_beside_idle_spares_still_pages_at_once() -> None:
    onset = DEFAULT_START_MS + 20 * 60_000
    fault = NvlinkBusFault(node="gpu070", gpu=2, onset_ms=onset)
    config = ClusterConfig(seed=12, job_label=None, spares=3, faults=(fault,))
    fired = _alerts(config, 0.5)
    assert fired[("PeerwatchNodeCollapse", "gpu070")] == 1
    assert not [k for k in fired if k[1] in config.spare_hosts]


# --- roles inside a job ------------------------------------------------------------------------


def _role_buckets(
    n_buckets: int, culprit_from: int | None = None
) -> tuple[list[dict[str, dict[str, float]]], dict[str, str]]:
    """48 trainers and 12 data loaders whose interrupts and processes are a third of theirs."""
    rng = np.random.default_rng(5)
    nodes = [f"n{i:02d}" for i in range(60)]
    roles = {n: ("loader" if i >= 48 else "trainer") for i, n in enumerate(nodes)}
    buckets = []
    for b in range(n_buckets):
        frames = {}
        for n in nodes:
            scale = 1 / 3 if roles[n] == "loader" else 1.0
            frames[n] = {
                "gpu_util": min(100.0, 99.5 + rng.normal(0, 0.3)),
                "intr_rate": scale * 300_000.0 + rng.normal(0, 3_000),
                "procs_running": float(round(scale * 40 + rng.normal(0, 1))),
            }
        if culprit_from is not None and b >= culprit_from:
            frames["n55"].update(intr_rate=30_000.0, procs_running=0.0)
        buckets.append(frames)
    return buckets, roles


def _fired(buckets: list, roles: dict[str, str] | None) -> set[tuple[str, str | None]]:
    state, fired = GroupState(), set()
    for b, frames in enumerate(buckets):
        state, result = score_bucket(
            state, "job", b * 30_000, frames, {}, frames, DEFAULT_FEATURES, ScoringParams(),
            roles,
        )  # fmt: skip
        fired |= {(c.alertname, c.node) for c in result.changes if c.status == "firing"}
    return fired


def test_a_role_that_always_differs_is_its_own_peer_population() -> None:
    buckets, roles = _role_buckets(8)
    assert {node for _, node in _fired(buckets, None)} >= {"n48", "n59"}  # why roles exist
    assert _fired(buckets, roles) == set()


def test_a_collapse_inside_a_role_is_convicted_by_the_roles_peers() -> None:
    buckets, roles = _role_buckets(8, culprit_from=4)
    assert ("PeerwatchNodeCollapse", "n55") in _fired(buckets, roles)


def test_role_peer_stats_fall_back_to_the_job_for_small_roles() -> None:
    values = np.array([[10.0], [11.0], [12.0], [13.0], [50.0]])
    floor = np.array([0.1])
    job = peer_zscores(values, floor, np.array([0.0]), 3)
    z, median = role_peer_stats(
        values, ["a", "b", "c", "d", "e"], {"e": "tiny"}, job, floor, np.array([0.0]), 3
    )
    np.testing.assert_array_equal(z, job.z)
    np.testing.assert_array_equal(median[:, 0], job.median[0])


def test_role_labels_reach_the_scoring_through_the_frame_builder() -> None:
    """A pipeline_stage label on the job's series becomes each node's role in the worker."""
    config = ClusterConfig(seed=13, job_label="train_job", role_label="pipeline_stage", spares=0)
    settings = Settings(group_labels=["train_job", "cluster"], role_labels=["pipeline_stage"])
    roles: dict[str, str] = {}
    end = config.start_ms + 10 * 60_000
    for _, scored in score_rounds(generate(config, end_ms=end), settings):
        for item in scored:
            roles.update(item.bucket.roles)
    assert len(roles) == config.job_nodes
    assert len(set(roles.values())) == config.pipeline_stages
