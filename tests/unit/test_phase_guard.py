"""detectors.group with phases: saves and loads are expected moves, real faults in them still page.

The group-wide buckets are test_group_shift's, with the NFS byte rates the phase rules
read (a save ~0.7 GB/s per node, a load ~133 MB/s, training a trickle). The same buckets
without the byte rates are the control: the guard alone, as before phases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from detectors.alerts import GROUP_DEGRADED, NODE_COLLAPSE, NODE_DEVIATION
from detectors.group import GroupState, ScoringParams
from detectors.phase import PhaseParams
from tests.unit.test_group_shift import (
    NODES,
    Frames,
    collapsed,
    idle,
    loading,
    run,
    saving,
    training,
    transitions,
)

CULPRIT = "node-23"
MB = 1e6
BYTES = {  # (write, read) bytes/s per node
    training: (0.5 * MB, 0.3 * MB),
    saving: (700 * MB, 0.3 * MB),
    loading: (0.5 * MB, 133 * MB),
    idle: (0.5 * MB, 0.3 * MB),
}
Gen = Callable[[np.random.Generator], dict[str, float]]


def buckets(*spec: tuple[Gen, int], seed: int = 3, nfs_bytes: bool = True) -> list[Frames]:
    rng = np.random.default_rng(seed)
    out = []
    for gen, count in spec:
        write, read = BYTES[gen]
        for _ in range(count):
            frames = {n: gen(rng) for n in NODES}
            if nfs_bytes:
                for values in frames.values():
                    values["nfs_write_bytes_rate"] = write * (1 + 0.03 * rng.normal())
                    values["nfs_read_bytes_rate"] = read
            out.append(frames)
    return out


def fired(results: Sequence[object]) -> list[tuple[int, str, str | None, str]]:
    return [t for t in transitions(results) if t[3] == "firing"]  # type: ignore[arg-type]


def test_long_save_raises_no_group_alert_the_guard_alone_would() -> None:
    """A 5-bucket save mid-training: no PeerwatchGroupDegraded (the control raises one)."""
    spec = ((training, 20), (saving, 5), (training, 20))
    _, with_phase = run(buckets(*spec))
    _, control = run(buckets(*spec, nfs_bytes=False))
    assert fired(with_phase) == []
    assert (22, GROUP_DEGRADED, None, "firing") in fired(control)
    assert [r.phase.name for r in with_phase[20:25]] == ["save"] * 5  # type: ignore[union-attr]


def test_save_in_the_first_bucket_is_not_learned() -> None:
    """History begins with a save: the levels and the calm baselines learn nothing from it."""
    save_first = buckets((saving, 2), (training, 30))
    state, results = run(save_first)
    assert fired(results) == []
    after_save, _ = run(save_first[:2])
    assert after_save.levels.features == ()  # not a single level from the save
    calm = after_save.baselines.count[0] if after_save.baselines.nodes else np.zeros(1)
    assert not np.asarray(calm).any()
    gpu = state.levels.features.index("gpu_util")
    assert abs(state.levels.level[gpu] - 99.5) < 1.0  # the usual level is training's


def test_collapse_during_a_save_still_pages_at_once() -> None:
    """Interrupts 300 K → 80 K and no runnable process on one node while its peers save."""
    frames = buckets((training, 20), (saving, 3), (training, 5))
    rng = np.random.default_rng(9)
    for b in (20, 21, 22):
        frames[b][CULPRIT] = {**frames[b][CULPRIT], **collapsed(rng)}
        frames[b][CULPRIT].update(intr_rate=80_000.0, procs_running=0.0)
    _, results = run(frames)
    assert results[20].phase is not None and results[20].phase.name == "save"
    assert (20, NODE_COLLAPSE, CULPRIT, "firing") in fired(results)
    assert all(t[2] in (None, CULPRIT) for t in fired(results))
    assert not [t for t in fired(results) if t[1] == GROUP_DEGRADED]


def test_collapse_during_a_load_still_pages() -> None:
    """A node whose processes go to 0 in a restart load, against its loading peers."""
    frames = buckets((training, 20), (loading, 30), (training, 5))
    for b in range(35, 50):
        frames[b][CULPRIT] = {**frames[b][CULPRIT], "intr_rate": 20_000.0, "procs_running": 0.0}
    _, results = run(frames)
    assert (35, NODE_COLLAPSE, CULPRIT, "firing") in fired(results)
    assert all(t[2] == CULPRIT for t in fired(results))


def test_a_node_scraped_before_the_restart_in_the_loads_first_bucket_is_not_paged() -> None:
    """The job restarts inside a bucket; one node's scrape (early in the interval) still saw
    the dead job: interrupts and processes at the idle level while its peers load. Its next
    bucket is like theirs: nothing to page (a critical page at every restart before)."""
    frames = buckets((training, 20), (idle, 8), (loading, 30), (training, 10))
    rng = np.random.default_rng(5)
    frames[28][CULPRIT] = {**frames[28][CULPRIT], **{k: idle(rng)[k] for k in ("intr_rate",
                           "procs_running")}}  # fmt: skip
    _, results = run(frames)
    assert results[28].phase is not None and results[28].phase.name == "load"
    assert results[28].phase.run == 1
    assert not [t for t in fired(results) if t[1] == NODE_COLLAPSE]


def test_a_collapse_seen_in_a_load_resolves_once_the_node_is_back() -> None:
    """Seen against the load's median (160 K interrupts/s, not the job's usual 300 K), a
    collapse is judged again when the node is back: it resolves (it stayed open for ever
    while it was compared with the usual level)."""
    frames = buckets((training, 20), (loading, 30), (training, 30))
    for b in (35, 36, 37):
        frames[b][CULPRIT] = {**frames[b][CULPRIT], "intr_rate": 20_000.0, "procs_running": 0.0}
    _, results = run(frames)
    changes = [t for t in transitions(results) if t[1] == NODE_COLLAPSE]  # type: ignore[arg-type]
    assert changes[0] == (35, NODE_COLLAPSE, CULPRIT, "firing")
    assert changes[-1][3] == "resolved" and changes[-1][0] < 79


def test_error_counters_are_judged_during_a_load() -> None:
    """NVLink CRC errors on one node through a load: a deviation, as outside it."""
    frames = buckets((training, 20), (loading, 30), (training, 5))
    for b, bucket in enumerate(frames):
        for node, values in bucket.items():
            values["nvlink_crc_err_rate"] = 50.0 if node == CULPRIT and 30 <= b < 45 else 0.0
    _, results = run(frames)
    assert [t for t in fired(results) if t[1] == NODE_DEVIATION] == [
        (32, NODE_DEVIATION, CULPRIT, "firing")
    ]


def test_healthy_nodes_are_not_judged_on_what_a_load_moves() -> None:
    """A 30-bucket load straight from the first bucket: nothing fires, before or after."""
    state, results = run(buckets((loading, 30), (training, 40)))
    assert fired(results) == []
    assert all(r.phase.expected for r in results[:30])  # type: ignore[union-attr]
    assert isinstance(state, GroupState)


def test_a_load_that_outlasts_its_maximum_is_judged_again() -> None:
    """With max_load_buckets=5, a 30-bucket load is the group's problem after 5 buckets."""
    params = replace(ScoringParams(), phase=PhaseParams(max_load_buckets=5))
    _, results = run(buckets((training, 20), (loading, 30)), params=params)
    assert [t for t in fired(results) if t[1] == GROUP_DEGRADED] == [
        (27, GROUP_DEGRADED, None, "firing")
    ]
