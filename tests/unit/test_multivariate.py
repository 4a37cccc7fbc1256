"""detectors.multivariate: the group's online Gaussian model of residual vectors."""

from __future__ import annotations

import base64
import json
import math
import pickle

import numpy as np
import pytest
from river import covariance

from detectors.multivariate import GroupModel, MultivariateParams

N_NODES = 60
N_FEAT = 10
FEATURES = [f"f{j}" for j in range(N_FEAT)]
GATE = 4.0  # fusion's single-feature evidence threshold
ALL = np.ones(N_NODES, dtype=bool)
PARAMS = MultivariateParams()
# warm-up plus enough healthy node-buckets for the tail calibration
READY_AFTER = PARAMS.warmup_buckets + math.ceil(PARAMS.calibration_min / N_NODES) + 1


def correlation(rho: float = 0.5, n: int = N_FEAT) -> np.ndarray:
    """Features in correlated pairs (0-1, 2-3, ...), like util/power or rate/latency."""
    c = np.eye(n)
    for i in range(0, n - 1, 2):
        c[i, i + 1] = c[i + 1, i] = rho
    return c


class Healthy:
    """Seeded healthy residual noise: Gaussian, or Student-t(5) scaled to unit variance."""

    def __init__(self, seed: int, rho: float = 0.5, heavy: bool = False, n: int = N_FEAT) -> None:
        self.rng = np.random.default_rng(seed)
        self.chol = np.linalg.cholesky(correlation(rho, n))
        self.heavy, self.n = heavy, n

    def __call__(self, nodes: int = N_NODES) -> np.ndarray:
        if self.heavy:
            e = self.rng.standard_t(5, size=(nodes, self.n)) / math.sqrt(5 / 3)
        else:
            e = self.rng.normal(size=(nodes, self.n))
        return e @ self.chol.T


def ready_model(noise: Healthy, params: MultivariateParams = PARAMS) -> GroupModel:
    model = GroupModel([f"f{j}" for j in range(noise.n)], params)
    for _ in range(READY_AFTER):
        model.score_and_learn(noise(), ALL)
    assert model.ready
    return model


def test_flags_several_moderate_deviations_a_per_feature_rule_misses() -> None:
    """5 features at |z| 2.5-3.0 on one node: flagged within 3 buckets; no |z| >= 4 anywhere."""
    noise = Healthy(seed=11)
    model = ready_model(noise)
    rng = np.random.default_rng(12)
    fault_cols = rng.choice(N_FEAT, 5, replace=False)
    flagged_at = []
    for b in range(10):
        x = noise()
        x[17, fault_cols] = rng.uniform(2.5, 3.0, 5) * rng.choice([-1.0, 1.0], 5)
        assert (np.abs(x[17]) < GATE).all()  # the per-feature rule sees nothing
        scores = model.score_and_learn(x, ALL)
        if model.is_anomalous(scores)[17]:
            flagged_at.append(b)
    assert flagged_at and flagged_at[0] <= 2
    assert len(flagged_at) >= 6  # and keeps flagging it: the fault is not learned


def test_flags_correlated_pair_moving_apart() -> None:
    """Two features that always move together (ρ 0.9) at +2 and -2: d² ~ 80, flagged."""
    noise = Healthy(seed=21, rho=0.9)
    model = ready_model(noise)
    x = noise()
    x[3, :] = 0.0
    x[3, 0], x[3, 1] = 2.0, -2.0  # sum of squares 8: unremarkable feature by feature
    scores = model.score_and_learn(x, ALL)
    assert model.is_anomalous(scores)[3]


@pytest.mark.parametrize("heavy", [False, True], ids=["gaussian", "student-t5"])
def test_false_positive_rate_on_healthy_nodes_is_below_bound(heavy: bool) -> None:
    """Healthy node-buckets flagged: < 0.1 % over 2,000 buckets x 60 nodes (expected ~1e-4)."""
    noise = Healthy(seed=31, heavy=heavy)
    model = ready_model(noise)
    flagged = total = 0
    for _ in range(2000):
        scores = model.score_and_learn(noise(), ALL)
        assert np.isfinite(scores).all() and ((scores >= 0) & (scores <= 1)).all()
        flagged += int(model.is_anomalous(scores).sum())
        total += N_NODES
    assert flagged / total < 1e-3
    if heavy:
        assert model.tail_scale is not None and model.tail_scale > 1.5  # the calibration acted


def test_learning_matches_river_ewa_covariance_on_every_prefix() -> None:
    """One row per bucket, fading 0.5 (half-life 1): river's EwaCovariance, entry for entry."""
    params = MultivariateParams(half_life_buckets=1.0, warmup_buckets=1, clip=1e6)
    assert params.beta == pytest.approx(0.5)
    model = GroupModel(["a", "b", "c"], params)
    ref = covariance.EwaCovariance(fading_factor=0.5)
    rng = np.random.default_rng(41)
    for _ in range(50):
        row = rng.normal(size=(1, 3)) * [1.0, 3.0, 0.5] + [2.0, -1.0, 0.0]
        model.score_and_learn(row, [True])
        ref.update(dict(zip("abc", row[0].tolist(), strict=True)))
        got = model.covariance
        want = np.array([[ref[i, j] for j in "abc"] for i in "abc"])
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_no_scores_until_warm_and_calibrated() -> None:
    """NaN (not 0) while learning and calibrating; never anomalous then."""
    noise = Healthy(seed=51)
    model = GroupModel(FEATURES, PARAMS)
    for b in range(READY_AFTER):
        x = noise()
        x[0] = 50.0  # would be wildly anomalous
        scores = model.score_and_learn(x, ALL)
        if not model.ready:
            assert np.isnan(scores).all() and not model.is_anomalous(scores).any()
        assert model.warm == (b + 1 >= PARAMS.warmup_buckets)
    assert model.ready


def test_missing_features_are_imputed_and_too_few_give_nan() -> None:
    """A node missing 2 of 10 features is scored; one missing 6 (< min_present) is NaN."""
    noise = Healthy(seed=61)
    model = ready_model(noise)
    x = noise()
    x[4, :2] = np.nan
    x[5, :6] = np.nan
    scores = model.score_and_learn(x, ALL)
    assert np.isfinite(scores[4]) and np.isnan(scores[5])
    assert np.isfinite(np.delete(scores, 5)).all()


def test_masked_and_anomalous_rows_are_not_learned() -> None:
    """learn_mask False rows, and rows flagged this bucket, leave μ and Σ untouched."""
    noise = Healthy(seed=71)
    model = ready_model(noise)
    mean, cov = model.mean, model.covariance
    x = noise()
    model.score_and_learn(x, np.zeros(N_NODES, dtype=bool))
    np.testing.assert_array_equal(model.mean, mean)
    np.testing.assert_array_equal(model.covariance, cov)
    x = np.full((1, N_FEAT), 7.0)  # one node, anomalous, learn allowed
    scores = model.score_and_learn(x, [True])
    assert model.is_anomalous(scores)[0]
    np.testing.assert_array_equal(model.mean, mean)


def test_explain_splits_d2_over_features_and_names_the_fault() -> None:
    """Shares sum to d² per node; the faulty features carry the largest shares."""
    noise = Healthy(seed=81)
    model = ready_model(noise)
    x = noise()
    x[9, :] = 0.0
    x[9, [1, 4, 6]] = [3.0, -3.0, 3.0]
    shares = model.explain(x)
    centred = np.clip(x, -PARAMS.clip, PARAMS.clip) - model.mean
    precision = np.linalg.inv(
        np.where(np.eye(N_FEAT, dtype=bool), np.maximum(np.diag(model.covariance), 0.25), 0)
        + np.where(np.eye(N_FEAT, dtype=bool), 0, model.covariance)
    )
    d2 = np.einsum("ij,jk,ik->i", centred, precision, centred)
    np.testing.assert_allclose(shares.sum(axis=1), d2, rtol=1e-3)  # shrinkage ~1e-3 here
    assert set(np.argsort(-shares[9])[:3].tolist()) == {1, 4, 6}


def test_state_round_trip_scores_identically() -> None:
    """to_dict → JSON → from_dict, then the same buckets: identical scores and state."""
    noise = Healthy(seed=91)
    params = MultivariateParams(warmup_buckets=20, calibration_min=600, calibration_window=900)
    model = GroupModel(FEATURES, params)
    for _ in range(40):  # past one calibration window: two sketches in the state
        model.score_and_learn(noise(), ALL)
    assert len(model.to_dict()["calibration"]) == 2
    copy = GroupModel.from_dict(json.loads(json.dumps(model.to_dict())), params)
    rng = np.random.default_rng(92)
    for _ in range(20):
        x = noise()
        x[rng.random(x.shape) < 0.02] = np.nan
        x[3] += 3.0
        mask = rng.random(N_NODES) < 0.9
        np.testing.assert_array_equal(model.score_and_learn(x, mask), copy.score_and_learn(x, mask))
    assert model.to_dict() == copy.to_dict()


def test_copy_is_independent() -> None:
    """Learning in a copy leaves the original as it was."""
    noise = Healthy(seed=95)
    model = GroupModel(FEATURES, MultivariateParams(warmup_buckets=5))
    for _ in range(5):
        model.score_and_learn(noise(), ALL)
    before = model.to_dict()
    other = model.copy()
    for _ in range(5):
        other.score_and_learn(noise(), ALL)
    assert model.to_dict() == before and other.to_dict() != before


def test_learn_every_and_phase_choose_the_learning_buckets() -> None:
    """learn_every=3: learning in buckets 0, 3, 6 (phase 0) or 2, 5 (phase 1)."""
    noise = Healthy(seed=97)
    for phase, expected in ((0, [0, 3, 6]), (1, [2, 5])):
        model = GroupModel(FEATURES, MultivariateParams(learn_every=3), phase=phase)
        learned = []
        for b in range(8):
            before = model.to_dict()["learned"]
            model.score_and_learn(noise(), ALL)
            if model.to_dict()["learned"] > before:
                learned.append(b)
        assert learned == expected


def test_state_size_per_node_at_305_features() -> None:
    """One model per 60-node group at 305 features: ~8.3 KB of JSON per node."""
    features = [f"f{j:03d}" for j in range(305)]
    model = GroupModel(features, MultivariateParams())
    model.score_and_learn(np.random.default_rng(99).normal(size=(N_NODES, 305)), ALL)
    per_node = len(json.dumps(model.to_dict())) / N_NODES
    assert per_node < 9_000


def test_from_dict_rejects_foreign_pickles() -> None:
    """The calibration sketch is unpickled through an allowlist: anything else is refused."""
    model = GroupModel(FEATURES, PARAMS)
    data = model.to_dict()
    data["calibration"][0]["sketch"] = base64.b64encode(pickle.dumps(print)).decode()
    with pytest.raises(ValueError, match="unreadable"):
        GroupModel.from_dict(data, PARAMS)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.update(schema=2),
        lambda d: d.pop("m2_upper"),
        lambda d: d.update(mean=d["mean"][:-4]),
        lambda d: d.update(learned=-1),
        lambda d: d.update(calibration=[]),
        lambda d: d.update(features=["f0", "f0"]),
    ],
)
def test_from_dict_rejects_malformed_state(corrupt) -> None:
    """A corrupt state dict raises ValueError."""
    data = GroupModel(FEATURES, PARAMS).to_dict()
    corrupt(data)
    with pytest.raises(ValueError):
        GroupModel.from_dict(data, PARAMS)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"half_life_buckets": 0.0},
        {"warmup_buckets": 0},
        {"clip": -1.0},
        {"var_floor": 0.0},
        {"alpha": 0.0},
        {"alpha": 0.5},
        {"min_present": 0.0},
        {"learn_every": 0},
        {"calibration_min": 10, "calibration_window": 5},
    ],
)
def test_params_reject_invalid_values(kwargs) -> None:
    """Each bad parameter raises ValueError on construction."""
    with pytest.raises(ValueError):
        MultivariateParams(**kwargs)


@pytest.mark.parametrize(
    ("residuals", "mask"),
    [
        (np.zeros((5, N_FEAT + 1)), np.ones(5, dtype=bool)),  # wrong feature count
        (np.zeros(N_FEAT), np.ones(1, dtype=bool)),  # 1-D
        (np.zeros((5, N_FEAT)), np.ones(4, dtype=bool)),  # mask length
    ],
)
def test_score_rejects_malformed_input(residuals, mask) -> None:
    """Shape mistakes raise ValueError instead of scoring misaligned features."""
    with pytest.raises(ValueError):
        GroupModel(FEATURES, PARAMS).score_and_learn(residuals, mask)
