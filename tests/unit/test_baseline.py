"""detectors.baseline: learned usual z per node — residuals, robustness, river reference, state."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from river import stats

from detectors.baseline import BaselineParams, NodeBaselines, update_and_residuals

NODES = [f"node-{i:02d}" for i in range(60)]
LIGHT = NODES[48:]  # the 12 nodes that stage and write a small checkpoint
FEATURES = ["gpu_util", "intr_rate", "pgpgout_rate", "nfs_write_queue_s", "nfs_write_rate"]
OFFSET_FEATURES = ["pgpgout_rate", "nfs_write_queue_s", "nfs_write_rate"]
DAY = 2880  # 30-s buckets
WEEK = 7 * DAY
GATE = 4.0  # fusion's single-feature evidence threshold
ALL = np.ones(len(NODES), dtype=bool)


@dataclass
class Week:
    """A simulated week of one 60-node group's peer z, fed through the baseline."""

    state: NodeBaselines
    params: BaselineParams
    residuals: np.ndarray  # buckets x nodes x features
    z: np.ndarray
    saving: np.ndarray  # buckets: a checkpoint save is on
    rng: np.random.Generator


def save_schedule(rng: np.random.Generator, n_buckets: int) -> np.ndarray:
    """Saves every ~2.23 h (log-normal jitter 0.25), lasting one or two buckets."""
    saving = np.zeros(n_buckets, dtype=bool)
    t = int(rng.integers(0, 268))
    while t < n_buckets:
        saving[t : t + int(rng.integers(1, 3))] = True
        t += int(268 * rng.lognormal(0.0, 0.25))
    return saving


def group_z(rng: np.random.Generator, saving: bool) -> np.ndarray:
    """One bucket of peer z: N(0, 1) for everyone, the 12 light nodes offset on save features.

    Outside saves their z is ~-2 (less writeback, fewer NFS writes); during a
    save it is -3…-6 (2 GB written against the majority's 26 GB).
    """
    z = rng.normal(0.0, 1.0, size=(len(NODES), len(FEATURES)))
    cols = [FEATURES.index(f) for f in OFFSET_FEATURES]
    light = slice(48, 60)
    if saving:
        z[light, cols] = rng.uniform(-6.0, -3.0, size=(12, len(cols)))
    else:
        z[light, cols] = -2.0 + rng.normal(0.0, 0.3, size=(12, len(cols)))
    return z


@pytest.fixture(scope="module")
def week() -> Week:
    """Seven days of buckets; regime 1 while a save is on (what the group-shift guard sees)."""
    rng = np.random.default_rng(20240605)
    params = BaselineParams(regimes=2)
    saving = save_schedule(rng, WEEK)
    state = NodeBaselines()
    residuals = np.empty((WEEK, len(NODES), len(FEATURES)))
    zs = np.empty_like(residuals)
    for b in range(WEEK):
        zs[b] = group_z(rng, bool(saving[b]))
        state, residuals[b] = update_and_residuals(
            state, NODES, zs[b], FEATURES, ALL, params, regime=int(saving[b])
        )
    return Week(state, params, residuals, zs, saving, rng)


def test_persistent_offset_is_learned_as_usual(week: Week) -> None:
    """Light-checkpoint nodes: raw z says -2 (-3…-6 in saves); after warm-up residuals say ~0."""
    regime1_warm = np.flatnonzero(np.cumsum(week.saving) >= week.params.warmup_buckets)[0]
    assert regime1_warm < 5 * DAY  # both regimes are warm for the last two days
    late = slice(5 * DAY, WEEK)
    cols = [FEATURES.index(f) for f in OFFSET_FEATURES]
    raw = week.z[late][:, 48:, :][:, :, cols]
    res = week.residuals[late][:, 48:, :][:, :, cols]
    saving = week.saving[late]
    assert raw[~saving].mean() == pytest.approx(-2.0, abs=0.05)
    assert raw[saving].mean() < -4.0
    assert np.abs(res).max() < GATE  # never evidence, in or out of saves
    assert abs(res[~saving].mean()) < 0.1 and abs(res[saving].mean()) < 0.5
    # the spread floor (1.0) bounds the residual by the change of z: |r| <= |z - usual|
    assert res[~saving].std() < 0.5


def test_healthy_majority_residuals_stay_standard(week: Week) -> None:
    """Heavy-checkpoint nodes (z ~ N(0, 1)): residuals keep mean ~0 and spread ~1."""
    res = week.residuals[5 * DAY :, :48]
    assert abs(res.mean()) < 0.02
    assert res.std() == pytest.approx(1.0, abs=0.05)


def test_new_fault_on_offset_node_still_stands_out(week: Week) -> None:
    """A light node whose pgpgout goes to z = +4 (raw) reads residual ~6 and keeps reading it."""
    node = LIGHT[3]
    i, j = NODES.index(node), FEATURES.index("pgpgout_rate")
    state, rng = week.state, np.random.default_rng(7)
    seen = []
    for _ in range(240):  # two hours of fault, node never alerting (learning allowed)
        z = group_z(rng, saving=False)
        z[i, j] = 4.0
        state, r = update_and_residuals(state, NODES, z, FEATURES, ALL, week.params, regime=0)
        seen.append(r[i, j])
    assert min(seen) > 5.0  # frozen: |residual| > freeze_z is not learned as normal
    assert seen[-1] == pytest.approx(seen[0], abs=0.2)


def test_day_one_fault_is_caught_during_warmup() -> None:
    """Before a cell is warm its residual is the raw z: a node broken from the start shows."""
    params = BaselineParams(warmup_buckets=60)
    state = NodeBaselines()
    rng = np.random.default_rng(1)
    for _ in range(59):
        z = rng.normal(size=(len(NODES), 1))
        z[5, 0] = -8.0
        state, r = update_and_residuals(state, NODES, z, ["intr_rate"], ALL, params)
        assert r[5, 0] == -8.0
        np.testing.assert_array_equal(r, z)


def test_missing_z_gives_nan_and_leaves_state_untouched() -> None:
    """NaN (or inf) z: NaN residual; that cell's learned state is exactly as before."""
    params = BaselineParams(warmup_buckets=5)
    rng = np.random.default_rng(2)
    state = NodeBaselines()
    for _ in range(10):
        state, _ = update_and_residuals(
            state, NODES[:5], rng.normal(size=(5, 3)), FEATURES[:3], ALL[:5], params
        )
    z = rng.normal(size=(5, 3))
    z[1, 2], z[3, 0] = np.nan, np.inf
    after, r = update_and_residuals(state, NODES[:5], z, FEATURES[:3], ALL[:5], params)
    assert np.isnan(r[1, 2]) and np.isnan(r[3, 0])
    assert np.isfinite(np.delete(r.ravel(), [1 * 3 + 2, 3 * 3 + 0])).all()
    for name in ("mean", "var", "count", "away", "candidate"):
        before_a, after_a = getattr(state, name), getattr(after, name)
        for i, j in ((1, 2), (3, 0)):
            np.testing.assert_array_equal(after_a[0, i, j], before_a[0, i, j])
    assert (after.count[0] - state.count[0]).sum() == 5 * 3 - 2


def test_single_outlier_moves_the_usual_by_a_bounded_step() -> None:
    """An innovation between huber_c and freeze_z is winsorised; beyond freeze_z, ignored."""
    params = BaselineParams(warmup_buckets=5, half_life_buckets=100, huber_c=3.0, freeze_z=4.0)
    state = NodeBaselines()
    for v in (-1.0, 1.0) * 50:  # usual 0, variance 1
        state, _ = update_and_residuals(state, ["n"], np.array([[v]]), ["f"], [True], params)
    m0, v0 = float(state.mean[0, 0, 0]), float(state.var[0, 0, 0])
    spread = max(math.sqrt(v0), 1.0)
    s1, r1 = update_and_residuals(state, ["n"], np.array([[3.9]]), ["f"], [True], params)
    assert r1[0, 0] == pytest.approx((3.9 - m0) / spread)
    a = max(params.alpha, 1 / 101)  # the 101st value: still in the running-mean start
    assert float(s1.mean[0, 0, 0]) - m0 == pytest.approx(a * 3.0 * spread)
    s2, r2 = update_and_residuals(state, ["n"], np.array([[50.0]]), ["f"], [True], params)
    assert r2[0, 0] > 40
    assert float(s2.mean[0, 0, 0]) == m0 and float(s2.var[0, 0, 0]) == v0


def test_learn_mask_freezes_per_node_and_per_cell() -> None:
    """learn_mask False (a node, or one cell) leaves the usual alone but still gives residuals."""
    params = BaselineParams(warmup_buckets=1)
    z0 = np.array([[0.0, 0.0], [1.0, 1.0]])
    state, _ = update_and_residuals(
        NodeBaselines(), ["a", "b"], z0, ["f", "g"], [True, True], params
    )
    z1 = np.array([[2.0, 2.0], [3.0, 3.0]])
    by_node, r = update_and_residuals(state, ["a", "b"], z1, ["f", "g"], [False, True], params)
    np.testing.assert_array_equal(r, [[2.0, 2.0], [2.0, 2.0]])
    np.testing.assert_array_equal(by_node.mean[0, 0], state.mean[0, 0])
    assert (by_node.mean[0, 1] != state.mean[0, 1]).all()
    cells = np.array([[True, False], [False, True]])
    by_cell, _ = update_and_residuals(state, ["a", "b"], z1, ["f", "g"], cells, params)
    changed = by_cell.mean[0] != state.mean[0]
    np.testing.assert_array_equal(changed, cells)


def test_lasting_change_is_adopted_after_adopt_after() -> None:
    """A cell beyond freeze_z for adopt_after (net) buckets takes the new level as its usual."""
    params = BaselineParams(warmup_buckets=10, adopt_after=50)
    rng = np.random.default_rng(3)
    state = NodeBaselines()
    for _ in range(100):
        state, _ = update_and_residuals(
            state, ["n"], rng.normal(0, 0.5, (1, 1)), ["f"], [True], params
        )
    seen = []
    for _ in range(60):
        state, r = update_and_residuals(
            state, ["n"], 8.0 + rng.normal(0, 0.5, (1, 1)), ["f"], [True], params
        )
        seen.append(float(r[0, 0]))
    assert min(seen[:50]) > 5.0  # still a deviation while it is young
    assert max(abs(v) for v in seen[51:]) < 2.0  # then the new normal


def test_regimes_keep_separate_usuals() -> None:
    """What is learned in regime 1 (saves) does not move regime 0 (training), and vice versa."""
    params = BaselineParams(warmup_buckets=3, regimes=2)
    state = NodeBaselines()
    for _ in range(5):
        state, _ = update_and_residuals(state, ["n"], [[-2.0]], ["f"], [True], params, regime=0)
        state, _ = update_and_residuals(state, ["n"], [[-5.0]], ["f"], [True], params, regime=1)
    _, r0 = update_and_residuals(state, ["n"], [[-2.0]], ["f"], [True], params, regime=0)
    _, r1 = update_and_residuals(state, ["n"], [[-5.0]], ["f"], [True], params, regime=1)
    assert r0[0, 0] == 0.0 and r1[0, 0] == 0.0
    assert state.mean[:, 0, 0].tolist() == [-2.0, -5.0]


@settings(max_examples=60, deadline=None)
@given(st.floats(-50, 50, allow_nan=False), st.integers(2, 200), st.integers(0, 10**6))
def test_update_matches_river_ewmean_and_ewvar_on_every_prefix(
    loc: float, n: int, seed: int
) -> None:
    """Huber and freeze off, half-life 1 bucket (fading 0.5): river's EWMean/EWVar exactly."""
    params = BaselineParams(
        half_life_buckets=1.0, warmup_buckets=1, huber_c=1e12, freeze_z=1e12, adopt_after=1
    )
    assert params.alpha == pytest.approx(0.5)
    ew_mean, ew_var = stats.EWMean(fading_factor=0.5), stats.EWVar(fading_factor=0.5)
    state = NodeBaselines()
    for v in (loc + np.random.default_rng(seed).normal(0, 3, n)).tolist():
        state, _ = update_and_residuals(state, ["n"], [[v]], ["f"], [True], params)
        ew_mean.update(v)
        ew_var.update(v)
        assert float(state.mean[0, 0, 0]) == pytest.approx(ew_mean.get(), rel=1e-9, abs=1e-9)
        assert float(state.var[0, 0, 0]) == pytest.approx(ew_var.get(), rel=1e-7, abs=1e-7)


def test_start_is_the_running_mean_and_variance() -> None:
    """While n < 1/alpha the usual is river's Mean and Var(ddof=0) of the values so far."""
    params = BaselineParams(half_life_buckets=10_000, warmup_buckets=1, huber_c=1e12, freeze_z=1e12)
    mean, var = stats.Mean(), stats.Var(ddof=0)
    state = NodeBaselines()
    for v in np.random.default_rng(4).normal(3.0, 2.0, 300).tolist():
        state, _ = update_and_residuals(state, ["n"], [[v]], ["f"], [True], params)
        mean.update(v)
        var.update(v)
        assert float(state.mean[0, 0, 0]) == pytest.approx(mean.get(), rel=1e-9)
        assert float(state.var[0, 0, 0]) == pytest.approx(var.get(), rel=1e-7)


def bucket_batches() -> st.SearchStrategy[tuple[list[str], list[np.ndarray], list[np.ndarray]]]:
    """(nodes, z per bucket with NaN holes, learn mask per bucket) for a small group."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
        n_nodes = draw(st.integers(1, 8))
        n_feat = draw(st.integers(1, 3))
        n_buckets = draw(st.integers(1, 8))
        cell = st.one_of(st.floats(-20, 20, allow_subnormal=False), st.just(np.nan))
        zs = [
            draw(hnp.arrays(np.float64, (n_nodes, n_feat), elements=cell)) for _ in range(n_buckets)
        ]
        masks = [draw(hnp.arrays(np.bool_, (n_nodes,))) for _ in range(n_buckets)]
        return [f"n{i}" for i in range(n_nodes)], zs, masks

    return build()


SMALL = BaselineParams(half_life_buckets=3.0, warmup_buckets=2, freeze_z=3.0, adopt_after=2)


@settings(max_examples=150, deadline=None)
@given(bucket_batches(), st.randoms(use_true_random=False))
def test_node_order_does_not_matter(batch, rnd) -> None:
    """Feeding the same buckets with nodes permuted gives the same residuals and state."""
    nodes, zs, masks = batch
    names = [f"f{j}" for j in range(zs[0].shape[1])]
    a = b = NodeBaselines()
    for z, mask in zip(zs, masks, strict=True):
        perm = rnd.sample(range(len(nodes)), len(nodes))
        a, ra = update_and_residuals(a, nodes, z, names, mask, SMALL)
        b, rb = update_and_residuals(b, [nodes[p] for p in perm], z[perm], names, mask[perm], SMALL)
        np.testing.assert_array_equal(rb, ra[perm])
    assert a.to_dict() == b.to_dict()


@settings(max_examples=150, deadline=None)
@given(bucket_batches())
def test_residuals_are_finite_exactly_where_z_is(batch) -> None:
    """Finite z → finite residual; NaN z → NaN residual, whatever came before."""
    nodes, zs, masks = batch
    names = [f"f{j}" for j in range(zs[0].shape[1])]
    state = NodeBaselines()
    for z, mask in zip(zs, masks, strict=True):
        state, r = update_and_residuals(state, nodes, z, names, mask, SMALL)
        np.testing.assert_array_equal(np.isfinite(r), np.isfinite(z))
        assert np.isfinite(state.mean).all() and (state.var >= 0).all()


def test_state_round_trip_gives_identical_residuals() -> None:
    """to_dict → JSON → from_dict, then the same buckets: identical residuals and state."""
    params = BaselineParams(warmup_buckets=5, adopt_after=3, regimes=2)
    rng = np.random.default_rng(5)
    state = NodeBaselines()
    for b in range(30):
        z = rng.normal(size=(len(NODES), 4)) * (1 + 5 * (b % 7 == 0))
        z[rng.random(z.shape) < 0.05] = np.nan
        state, _ = update_and_residuals(state, NODES, z, FEATURES[:4], ALL, params, regime=b % 2)
    assert state.away.any()  # the round trip covers cells that are away from their usual
    copy = NodeBaselines.from_dict(json.loads(json.dumps(state.to_dict())))
    for b in range(20):
        z = rng.normal(size=(len(NODES), 4)) * 3
        z[rng.random(z.shape) < 0.05] = np.nan
        mask = rng.random(len(NODES)) < 0.9
        state, r1 = update_and_residuals(state, NODES, z, FEATURES[:4], mask, params, regime=b % 2)
        copy, r2 = update_and_residuals(copy, NODES, z, FEATURES[:4], mask, params, regime=b % 2)
        np.testing.assert_array_equal(r1, r2)
    assert state.to_dict() == copy.to_dict()


def test_state_is_small_per_node() -> None:
    """305 features: ~8.5 KB of arrays and ~11.4 KB of JSON per node and regime (budget 100 KB)."""
    features = [f"f{j:03d}" for j in range(305)]
    rng = np.random.default_rng(6)
    for regimes, json_limit in ((1, 12_000), (2, 24_000)):
        params = BaselineParams(regimes=regimes)
        state = NodeBaselines()
        for b in range(4):
            z = rng.normal(size=(len(NODES), 305))
            state, _ = update_and_residuals(state, NODES, z, features, ALL, params, b % regimes)
        per_node_json = len(json.dumps(state.to_dict())) / len(NODES)
        assert state.nbytes / len(NODES) == 305 * 28 * regimes
        assert per_node_json < json_limit


def test_nodes_join_leave_and_features_change() -> None:
    """A new node starts empty (raw z); retain() drops leavers; a new feature starts empty."""
    params = BaselineParams(warmup_buckets=2)
    state = NodeBaselines()
    for _ in range(3):
        state, _ = update_and_residuals(
            state, ["a", "b"], [[-2.0], [1.0]], ["f"], [True] * 2, params
        )
    state, r = update_and_residuals(
        state, ["c", "a"], [[-2.0, 5.0], [-2.0, 5.0]], ["f", "g"], [True] * 2, params
    )
    assert state.nodes == ("a", "b", "c") and state.features == ("f", "g")
    np.testing.assert_array_equal(r, [[-2.0, 5.0], [0.0, 5.0]])  # c: raw; a: usual f, raw g
    assert state.retain(["a", "c"]).nodes == ("a", "c")
    kept = state.retain(["a", "c"])
    np.testing.assert_array_equal(kept.mean[:, 0], state.mean[:, 0])


def test_input_state_is_never_modified() -> None:
    """A new state is returned; the old one's arrays are read-only and unchanged."""
    params = BaselineParams(warmup_buckets=1)
    s1, _ = update_and_residuals(NodeBaselines(), ["a"], [[1.0]], ["f"], [True], params)
    before = s1.to_dict()
    s2, _ = update_and_residuals(s1, ["a"], [[3.0]], ["f"], [True], params)
    assert s1.to_dict() == before and s2.to_dict() != before
    with pytest.raises(ValueError):
        s1.mean[0, 0, 0] = 9.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"half_life_buckets": 0.0},
        {"half_life_buckets": math.inf},
        {"half_life_buckets": 50_000.0},
        {"warmup_buckets": 0},
        {"warmup_buckets": 1.5},
        {"warmup_buckets": 70_000},
        {"spread_floor": 0.0},
        {"spread_floor": math.nan},
        {"huber_c": -1.0},
        {"huber_c": 5.0, "freeze_z": 4.0},
        {"adopt_after": 0},
        {"regimes": 0},
        {"regimes": True},
    ],
)
def test_params_reject_invalid_values(kwargs) -> None:
    """Each bad parameter raises ValueError on construction."""
    with pytest.raises(ValueError):
        BaselineParams(**kwargs)


@pytest.mark.parametrize(
    ("nodes", "z", "names", "mask", "regime"),
    [
        (["a", "b"], np.zeros((2, 2)), ["f"], [True, True], 0),  # z shape
        (["a", "a"], np.zeros((2, 1)), ["f"], [True, True], 0),  # duplicate node
        (["a"], np.zeros((1, 2)), ["f", "f"], [True], 0),  # duplicate feature
        (["a", "b"], np.zeros((2, 1)), ["f"], [True], 0),  # mask length
        (["a"], np.zeros((1, 1)), ["f"], [True], 1),  # regime beyond params.regimes
    ],
)
def test_update_rejects_malformed_input(nodes, z, names, mask, regime) -> None:
    """Shape, duplicate or regime mistakes raise ValueError instead of misaligning."""
    with pytest.raises(ValueError):
        update_and_residuals(NodeBaselines(), nodes, z, names, mask, BaselineParams(), regime)


def _valid_dict() -> dict:
    state, _ = update_and_residuals(
        NodeBaselines(), ["a", "b"], [[1.0], [2.0]], ["f"], [True, True], BaselineParams()
    )
    return state.to_dict()


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.update(schema=99),
        lambda d: d.pop("mean"),
        lambda d: d.update(mean="not base64!"),
        lambda d: d.update(var=d["var"][:-4]),
        lambda d: d.update(nodes=["b", "a"]),
        lambda d: d.update(regimes=0),
        lambda d: d.update(
            mean=__import__("base64").b64encode(np.array([np.inf, 0.0]).tobytes()).decode()
        ),
    ],
)
def test_from_dict_rejects_malformed_state(corrupt) -> None:
    """A corrupt or foreign state dict raises ValueError, never a half-built state."""
    data = _valid_dict()
    corrupt(data)
    with pytest.raises(ValueError):
        NodeBaselines.from_dict(data)
