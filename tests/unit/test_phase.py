"""detectors.phase: the source report's phase rules, per node-scaled, from the first bucket."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detectors.phase import PHASES, Phase, PhaseParams, step_phase

GB = 1e9
MB = 1e6
PARAMS = PhaseParams()


def group(
    n: int,
    *,
    write: float = 0.5 * MB,
    read: float = 0.3 * MB,
    gpu: float = 99.0,
    heavy_share: float = 1.0,
) -> dict[str, dict[str, float]]:
    """``n`` nodes; the first ``heavy_share`` of them at ``write``, the rest at a 13th of it
    (the report's 26 GB vs 2 GB checkpoint writers)."""
    heavy = round(n * heavy_share)
    return {
        f"n{i:02d}": {
            "nfs_write_bytes_rate": write if i < heavy else write / 13,
            "nfs_read_bytes_rate": read,
            "gpu_util": gpu,
        }
        for i in range(n)
    }


def phase_of(frames: dict[str, dict[str, float]], nodes: list[str] | None = None) -> Phase:
    return step_phase(Phase(), frames, sorted(frames) if nodes is None else nodes, PARAMS)


@pytest.mark.parametrize(
    ("frames", "name"),
    [
        # the report's 60-node save: ~40 GB/s aggregate, 48 heavy and 12 light writers
        (group(60, write=0.85 * GB, gpu=20.0, heavy_share=0.8), "save"),
        # a save need not stall the GPUs (asynchronous checkpointing)
        (group(60, write=0.7 * GB, gpu=99.0), "save"),
        # 19 GB/s aggregate: below the rule
        (group(60, write=19 * GB / 60, gpu=20.0), "training"),
        # restart load: ~200 GB per node in 25 min = 133 MB/s, GPUs waiting
        (group(60, read=133 * MB, gpu=20.0), "load"),
        # a read burst while the GPUs compute is training (data loaders)
        (group(60, read=133 * MB, gpu=99.0), "training"),
        # GPU util at 50 % is not below 50 %
        (group(60, read=133 * MB, gpu=50.0), "training"),
        # 1.8 GB/s aggregate read: below the rule
        (group(60, read=30 * MB, gpu=20.0), "training"),
        (group(60, gpu=0.0), "idle"),
        (group(60), "training"),
        # scaled per node: a 16-node job writing what each of the 60 would is saving
        (group(16, write=0.5 * GB), "save"),
        (group(16, read=100 * MB, gpu=10.0), "load"),
        # one node writing 25 GB/s alone is no save: its peers judge it
        ({**group(59), "n99": {"nfs_write_bytes_rate": 25 * GB, "gpu_util": 99.0}}, "training"),
        # no NFS byte features (an operator's reduced catalog): training, nothing excused
        ({f"n{i}": {"gpu_util": 20.0} for i in range(60)}, "training"),
        ({}, "training"),
    ],
    ids=[
        "save-48-12",
        "save-async",
        "write-below-rule",
        "load",
        "read-while-training",
        "gpu-at-50",
        "read-below-rule",
        "idle",
        "training",
        "save-16-nodes",
        "load-16-nodes",
        "one-writer",
        "no-nfs-bytes",
        "no-frames",
    ],
)
def test_rules(frames: dict[str, dict[str, float]], name: str) -> None:
    assert phase_of(frames).name == name


def test_missing_frames_do_not_hide_a_save() -> None:
    """A third of the members sent nothing: the rest still show the save; aggregate is scaled."""
    frames = group(60, write=0.7 * GB, gpu=20.0)
    members = sorted(frames)
    present = {n: frames[n] for n in members[:40]}
    phase = phase_of(present, members)
    assert phase.name == "save" and phase.expected
    assert phase.write_bytes_per_s == pytest.approx(60 * 0.7 * GB)


def test_first_bucket_is_classified_without_history() -> None:
    """Known, not learned: bucket 1 of a fresh group is a save, expected, run 1."""
    phase = phase_of(group(60, write=0.7 * GB, gpu=10.0))
    assert (phase.name, phase.run, phase.expected) == ("save", 1, True)
    assert phase.describe() == "save (bucket 1, NFS write 42.0 GB/s)"


def test_a_phase_past_its_maximum_is_no_longer_expected() -> None:
    params = PhaseParams(max_load_buckets=3)
    frames = group(60, read=133 * MB, gpu=20.0)
    phase = Phase()
    seen = []
    for _ in range(5):
        phase = step_phase(phase, frames, sorted(frames), params)
        seen.append((phase.run, phase.expected))
    assert seen == [(1, True), (2, True), (3, True), (4, False), (5, False)]
    phase = step_phase(phase, group(60), sorted(frames), params)
    assert (phase.name, phase.run, phase.expected) == ("training", 1, False)


def test_state_round_trip_keeps_the_run() -> None:
    phase = step_phase(Phase("save", 4), group(60, write=GB), sorted(group(60)), PARAMS)
    assert phase.run == 5
    restored = Phase.from_dict(phase.to_dict())
    assert (restored.name, restored.run) == ("save", 5)


@pytest.mark.parametrize(
    "data", [{"name": "checkpoint"}, {"name": "save", "run": -1}, {"run": True}]
)
def test_from_dict_rejects_bad_state(data: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Phase.from_dict(data)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"save_write_bytes_per_s": 0.0},
        {"load_read_bytes_per_s": math.nan},
        {"load_gpu_util_below": -1.0},
        {"idle_gpu_util_below": -1.0},
        {"reference_nodes": 0},
        {"max_save_buckets": True},
        {"min_share": 0.0},
        {"share_floor": 1.5},
        {"write_feature": ""},
    ],
)
def test_params_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PhaseParams(**kwargs)  # type: ignore[arg-type]


@given(
    st.lists(
        st.tuples(
            st.floats(0, 5e9) | st.just(math.nan),
            st.floats(0, 5e8) | st.just(math.nan),
            st.floats(0, 100) | st.just(math.nan),
        ),
        max_size=40,
    ),
    st.randoms(use_true_random=False),
)
def test_any_finite_or_missing_input_gives_a_phase_independent_of_node_order(
    rows: list[tuple[float, float, float]], rnd: object
) -> None:
    frames = {
        f"n{i:02d}": {"nfs_write_bytes_rate": w, "nfs_read_bytes_rate": r, "gpu_util": g}
        for i, (w, r, g) in enumerate(rows)
    }
    nodes = sorted(frames)
    shuffled = list(nodes)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = phase_of(frames, nodes), phase_of(frames, shuffled)
    assert a.name in PHASES and a.name == b.name
    for x in (a.write_bytes_per_s, a.read_bytes_per_s, a.gpu_util):
        assert x is None or math.isfinite(x)
