"""detectors.advisors.checkpoint_io: saves and loads from the phase sequence, δ from the GPU
dip (across a bucket edge too), bytes, throughput shares, per-request queue vs response."""

from __future__ import annotations

import json

import pytest

from detectors.advisors.checkpoint_io import (
    CheckpointIoParams,
    CheckpointIoState,
    IoEvent,
    IoStep,
    RpcTimes,
    step_checkpoint_io,
)
from detectors.phase import Phase, PhaseName

GB = 1e9
PARAMS = CheckpointIoParams()
TRICKLE = 0.03 * GB  # aggregate NFS write outside saves
# the source's WRITE: 1.89 s queued + 136 ms response per request; READ 54.2 + 24.0 ms
WRITE = {"nfs_write_queue_s": 1.89, "nfs_write_rtt_s": 0.136}
READ = {"nfs_read_queue_s": 0.0542, "nfs_read_rtt_s": 0.0240}
QUIET = {"nfs_write_queue_s": 0.0005, "nfs_write_rtt_s": 0.003}


def bucket(
    name: PhaseName, util: float | None = 99.0, write: float = TRICKLE, read: float = 0.0
) -> Phase:
    return Phase(name, 1, name in ("save", "load"), write, read, util)


def run(
    buckets: list[tuple[Phase, dict[str, float]]],
    state: CheckpointIoState | None = None,
    params: CheckpointIoParams = PARAMS,
) -> tuple[CheckpointIoState, list[IoStep]]:
    state = state or CheckpointIoState()
    steps = []
    for i, (phase, node) in enumerate(buckets):
        frames = {f"n{k}": node for k in range(4)}
        step = step_checkpoint_io(
            state,
            params,
            group="job-7",
            bucket_ts=i * 30_000,
            bucket_s=30.0,
            phase=phase,
            frames=frames,
        )
        state = step.state
        steps.append(step)
    return state, steps


def closed(steps: list[IoStep]) -> list[IoEvent]:
    return [s.closed for s in steps if s.closed is not None]


TRAIN = (bucket("training"), QUIET)


def test_rpc_queue_share_of_the_source_write() -> None:
    rpc = RpcTimes(1.89, 0.136)
    assert rpc.request_s == pytest.approx(2.026)
    assert rpc.queue_share == pytest.approx(0.9329, abs=1e-4)  # 1.89 / 2.026


def test_a_save_inside_one_bucket() -> None:
    # 25 s of a 30-s bucket stalled: util 99 x 5/30 = 16.5, the dip 82.5 of 99 -> 25.0 s
    save = (bucket("save", util=16.5, write=42.4 * GB), WRITE)
    _, steps = run([TRAIN] * 5 + [save] + [TRAIN] * 2)
    (event,) = closed(steps)
    assert steps[6].closed == event  # closes with the first bucket after it
    assert event.kind == "save" and event.start_ts == 5 * 30_000
    assert event.buckets == 1 and event.seconds == 30.0
    assert event.lost_s == pytest.approx(25.0)
    assert event.bytes == pytest.approx(42.4 * GB * 30)  # 1,272 GB
    assert event.bytes_per_s == pytest.approx(42.4 * GB)
    assert event.storage_share == pytest.approx(42.4 / 250)  # 16.96 % of 250 GB/s
    assert event.interval_s is None  # the run's first save
    assert event.rpc == RpcTimes(pytest.approx(1.89), pytest.approx(0.136))


def test_a_save_across_a_bucket_edge_counts_both_halves() -> None:
    # 10 s at the end of a bucket that stays below the burst rule, 15 s in the next:
    # util 99 x 20/30 = 66 (dip 10 s), then 99 x 15/30 = 49.5 (dip 15 s): delta 25 s
    head = (bucket("training", util=66.0, write=17 * GB), WRITE)
    tail = (bucket("save", util=49.5, write=25 * GB), WRITE)
    _, steps = run([TRAIN] * 5 + [head, tail] + [TRAIN] * 2)
    (event,) = closed(steps)
    assert event.start_ts == 5 * 30_000  # where it began, in the head bucket
    assert event.buckets == 1  # the classifier's save buckets
    assert event.lost_s == pytest.approx(25.0)
    assert event.bytes == pytest.approx((17 + 25) * GB * 30)
    assert event.bytes_per_s == pytest.approx(25 * GB)  # over the classifier's bucket only


def test_the_tail_of_a_save_in_the_next_bucket_counts() -> None:
    save = (bucket("save", util=49.5, write=25 * GB), WRITE)
    tail = (bucket("training", util=66.0, write=17 * GB), WRITE)
    _, steps = run([TRAIN] * 5 + [save, tail] + [TRAIN] * 2)
    (event,) = closed(steps)
    assert steps[6].closed == event
    assert event.start_ts == 5 * 30_000
    assert event.lost_s == pytest.approx(25.0)
    assert event.bytes == pytest.approx(42 * GB * 30)


def test_noise_in_the_gpu_util_is_no_dip() -> None:
    # training buckets at 98-100 % around a level of ~99: within util_drop_floor (2 points)
    wobble = [(bucket("training", util=u), QUIET) for u in (98.0, 100.0, 97.5, 99.0)]
    save = (bucket("save", util=16.5, write=42.4 * GB), WRITE)
    _, steps = run([TRAIN] * 5 + wobble + [save] + wobble)
    (event,) = closed(steps)
    assert event.lost_s == pytest.approx(25.0, abs=0.2)


def test_unknown_gpu_util_counts_the_whole_save_bucket() -> None:
    save = (bucket("save", util=None, write=42.4 * GB), WRITE)
    _, steps = run([TRAIN] * 2 + [save, save] + [TRAIN])
    (event,) = closed(steps)
    assert event.lost_s == 60.0  # an upper bound


def test_the_interval_is_between_starts_and_restarts_after_a_stop() -> None:
    save = (bucket("save", util=16.5, write=42.4 * GB), WRITE)
    gap = [TRAIN] * 267  # 2.23 h between starts: 268 buckets x 30 s = 8,040 s
    idle = (bucket("idle", util=0.0), QUIET)
    load = (bucket("load", util=20.0, write=TRICKLE, read=133 * GB), READ)
    seq = [TRAIN, save, *gap, save, *gap, idle, idle, load, load, TRAIN, save, TRAIN]
    _, steps = run(seq)
    saves = [e for e in closed(steps) if e.kind == "save"]
    assert [e.interval_s for e in saves] == [None, 8040.0, None]


def test_a_restart_load() -> None:
    # 50 buckets (25 min) at 133 GB/s aggregate (~200 GB per node on 50 nodes): 19 % of 700
    load = (bucket("load", util=20.0, read=133 * GB), READ)
    idle = (bucket("idle", util=0.0), QUIET)
    state, steps = run([idle] * 3 + [load] * 50 + [TRAIN] * 2)
    (event,) = closed(steps)
    assert event.kind == "load" and event.start_ts == 3 * 30_000
    assert event.seconds == 1500.0 and event.lost_s == 1500.0
    assert event.bytes == pytest.approx(133 * GB * 1500)
    assert event.storage_share == pytest.approx(133 / 700)
    assert event.rpc is not None and event.rpc.queue_share == pytest.approx(0.693, abs=1e-3)
    assert state.last_load == event


def test_queue_dominated_writes_are_advised_with_the_figures() -> None:
    save = (bucket("save", util=16.5, write=40.1 * GB), WRITE)
    _, steps = run([TRAIN] * 3 + [save] + [TRAIN])
    (advice,) = [a for s in steps for a in s.advice]
    assert advice.advisor == "checkpoint_io" and advice.kind == "queue_dominated_write"
    figures = dict(advice.figures)
    assert figures["queue_share"] == pytest.approx(0.9329, abs=1e-4)
    assert figures["request_s"] == pytest.approx(2.026)
    assert figures["storage_share"] == pytest.approx(0.1604)
    assert "WRITE 2.03 s per request, 1.89 s (93.3%) queued, 136.0 ms response" in advice.summary
    assert "at 40.1 GB/s (16.0% of 250 GB/s)" in advice.summary
    assert "A faster network would not help" in advice.summary


def test_response_dominated_io_is_no_advice() -> None:
    fast = {"nfs_write_queue_s": 0.05, "nfs_write_rtt_s": 0.2}
    save = (bucket("save", util=16.5, write=40.1 * GB), fast)
    _, steps = run([TRAIN] * 3 + [save] + [TRAIN])
    assert closed(steps)[0].rpc is not None
    assert [a for s in steps for a in s.advice] == []


def test_the_same_advice_waits_repeat_s() -> None:
    params = CheckpointIoParams(repeat_s=3600.0)
    save = (bucket("save", util=16.5, write=40.1 * GB), WRITE)
    cycle = [save] + [TRAIN] * 59  # a save every 30 min
    _, steps = run([TRAIN] + cycle * 5, params=params)
    said = [i for i, s in enumerate(steps) if s.advice]
    assert said == [2, 122, 242]  # the first save's close, then each hour


def test_rpc_times_are_the_node_mean_weighted_by_bytes() -> None:
    # two save buckets: 1 s/request at 30 GB/s, then 3 s at 90 GB/s -> (30 + 270) / 120 = 2.5 s
    a = (bucket("save", util=16.5, write=30 * GB), {"nfs_write_queue_s": 1.0, "nfs_write_rtt_s": 0})
    b = (bucket("save", util=16.5, write=90 * GB), {"nfs_write_queue_s": 3.0, "nfs_write_rtt_s": 0})
    _, steps = run([TRAIN, a, b, TRAIN])
    (event,) = closed(steps)
    assert event.rpc is not None and event.rpc.queue_s == pytest.approx(2.5)


def test_state_round_trips_through_json_mid_save() -> None:
    save = (bucket("save", util=16.5, write=42.4 * GB), WRITE)
    state, _ = run([TRAIN] * 3 + [save] + [TRAIN] + [save])
    assert state.open is not None and state.last_save is not None
    back = CheckpointIoState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state


@pytest.mark.parametrize(
    "bad",
    [
        {"write_max_bytes_per_s": 0.0},
        {"queue_dominated_share": 1.5},
        {"util_alpha": 0.0},
        {"util_drop_floor": -1.0},
        {"repeat_s": float("inf")},
    ],
)
def test_bad_params_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CheckpointIoParams(**bad)  # type: ignore[arg-type]
