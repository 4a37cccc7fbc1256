"""Rules are declared next to each field, once: ``Checked`` runs them at construction, with one
wording, the settings (pydantic) run the same ones, and the state codec runs them on restore."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from dataclasses import dataclass, replace

import numpy as np
import pytest
from pydantic import ValidationError

import detectors
from detectors.advisors.checkpoint_interval import CheckpointIntervalParams
from detectors.advisors.ledger import LedgerParams
from detectors.advisors.retry import RetryParams
from detectors.baseline import BaselineParams
from detectors.checks import (
    Checked,
    check_at_least,
    check_fields,
    each,
    flag,
    int_rule,
    integer,
    is_finite,
    maybe,
    maybe_real,
    one_of,
    part,
    real,
    real_rule,
    text,
    text_rule,
)
from detectors.episodes import AlertEvent
from detectors.failslow.inputs import InputParams
from detectors.failslow.mitigation import MitigationParams, StageCost
from detectors.features import FeatureSpec
from detectors.fusion import FusionParams
from detectors.gpu_health import GpuHealthParams
from detectors.group import ScoringParams
from detectors.group_shift import ShiftParams
from detectors.phase import PhaseParams
from detectors.population import PopulationParams
from detectors.quantile import P2Quantile, QuantileSketch
from detectors.remap import RemapParams
from detectors.xid.escalation import EscalationParams
from detectors.xid.events import XidEvent
from streams.backtest.events import KnownEvent
from streams.settings import Settings


@dataclass(frozen=True)
class _Inner(Checked):
    level: float = real(0.5, above=0, at_most=1)


@dataclass(frozen=True)
class _Params(Checked):
    count: int = integer(3)
    window: int = integer(0, minimum=0, maximum=10)
    rate: float = real(1.0, above=0)
    share: float = real(0.5, at_least=0, below=1)
    floor: float = real(0.0, at_least=0)
    expected: float | None = maybe_real(None, above=0)
    enabled: bool = flag(True)
    inner: _Inner = part(_Inner)
    peers: int = integer(4, minimum=3, why="a median of two blames no one")
    low: int = integer(1)
    high: int = integer(2)
    name: str = text("gpu_util")
    free: str = "anything"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_at_least(self, "high", "low", "the range would be empty")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "count must be an int >= 1, got 0"),
        ({"count": True}, "count must be an int >= 1, got True"),
        ({"count": 2.0}, "count must be an int >= 1, got 2.0"),
        ({"window": 11}, r"window must be an int in \[0, 10\], got 11"),
        ({"rate": 0.0}, "rate must be finite and > 0, got 0.0"),
        ({"rate": math.nan}, "rate must be finite and > 0, got nan"),
        ({"share": 1.0}, r"share must be in \[0, 1\), got 1.0"),
        ({"floor": math.inf}, "floor must be finite and >= 0, got inf"),
        ({"expected": -1.0}, "expected must be finite and > 0, got -1.0"),
        ({"enabled": 1}, "enabled must be a bool, got 1"),
        ({"inner": {"level": 1}}, r"inner must be a _Inner, got \{'level': 1\}"),
        ({"peers": 2}, r"peers must be an int >= 3 \(a median of two blames no one\), got 2"),
        ({"low": 3}, r"high \(2\) must be >= low \(3\): the range would be empty"),
        ({"name": ""}, "name must be a non-empty string, got ''"),
        ({"name": None}, "name must be a non-empty string, got None"),
    ],
)
def test_declared_bounds_are_checked_with_the_shared_wording(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=f"^{message}$"):
        _Params(**kwargs)


def test_defaults_and_none_pass_and_replace_checks_again() -> None:
    p = _Params()
    assert (p.count, p.expected, p.inner) == (3, None, _Inner())
    assert replace(p, expected=2.0, low=2).expected == 2.0
    with pytest.raises(ValueError, match=r"^rate must be finite and > 0, got -1$"):
        replace(p, rate=-1)


def test_fields_are_checked_in_declaration_order_before_the_cross_field_rules() -> None:
    with pytest.raises(ValueError, match=r"^count must be"):
        _Params(rate=0.0, count=0, low=5)
    with pytest.raises(ValueError, match=r"^rate must be"):
        _Params(rate=0.0, low=5)


def test_check_fields_runs_the_declared_rules_of_the_fields_named_or_of_all() -> None:
    """A state class's construction parameters are checked by their declared rule, the same."""
    p = _Params()
    object.__setattr__(p, "count", 0)
    object.__setattr__(p, "rate", math.nan)
    check_fields(p, "low", "share")
    with pytest.raises(ValueError, match=r"^count must be an int >= 1, got 0$"):
        check_fields(p, "low", "count")
    with pytest.raises(ValueError, match=r"^rate must be finite and > 0, got nan$"):
        check_fields(p, "share", "rate")
    with pytest.raises(ValueError, match=r"^count must be"):
        check_fields(p)  # all, in declaration order


@pytest.mark.parametrize(
    ("rule", "value", "message"),
    [
        (int_rule(), True, "must be an int >= 1, got True"),
        (int_rule(minimum=0, maximum=3), 4, r"must be an int in \[0, 3\], got 4"),
        (int_rule(numpy=False), np.int64(2), r"must be an int >= 1, got np.int64\(2\)|got 2"),
        (real_rule(), math.inf, "must be finite, got inf"),
        (real_rule(below=1), 1.0, "must be finite and < 1, got 1.0"),
        (real_rule(at_least=1, inf=True, why="inf: off"), math.nan, r"must be >= 1 \(inf: off\)"),
        (real_rule(at_least=1, inf=True), -math.inf, "must be >= 1, got -inf"),
        (real_rule(nan=True), math.inf, "must be finite or NaN, got inf"),
        (real_rule(), "1", "must be finite, got '1'"),
        (
            real_rule(at_least=0),
            np.array([[0.0, -2.0]]),
            "finite and >= 0 in every entry, got -2.0",
        ),
        (real_rule(), np.array([1.0, math.nan]), "must be finite in every entry, got nan"),
        (real_rule(nan=True), np.array([math.nan, math.inf]), "finite or NaN in every entry"),
        (text_rule("a feature"), "", r"must be a non-empty string \(a feature\), got ''"),
        (one_of("log", "metric"), "file", "must be one of 'log', 'metric', got 'file'"),
        (each(int_rule()), [1], r"must be a tuple, got \[1\]"),
        (each(int_rule(), non_empty=True), (), r"must be a non-empty tuple, got \(\)"),
        (each(real_rule(at_least=0)), (1.0, -1.0), r"^x\[1\] must be finite and >= 0, got -1.0"),
        (maybe(each(real_rule())), (0.0, math.nan), r"^x\[1\] must be finite, got nan"),
    ],
)
def test_a_rule_refuses_with_the_shared_wording_naming_the_field(rule, value, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        rule("x", value)


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        (int_rule(), np.int64(3)),
        (int_rule(minimum=0), 10**400),
        (real_rule(above=0), np.float32(0.5)),
        (real_rule(at_least=1, inf=True), math.inf),
        (real_rule(nan=True, at_least=0), np.array([math.nan, 0.0])),
        (real_rule(), np.zeros((2, 0, 3))),
        (each(int_rule()), ()),
        (maybe(real_rule()), None),
    ],
)
def test_a_rule_passes_what_it_allows(rule, value) -> None:  # type: ignore[no-untyped-def]
    rule("x", value)


def test_is_finite_is_the_one_finiteness_test() -> None:
    assert all(map(is_finite, [0, 10**400, 1.5, np.int8(3), np.float32(2.0), np.ones(3)]))
    bad = [math.nan, math.inf, True, None, "1", np.array([1.0, math.inf]), np.array(["a"])]
    assert not any(map(is_finite, bad))


# Every rule a detector's field declares in place of the hand check it had: the bad value
# raises, naming the field. (GpuHealthParams compared ints by hand: True passed as 1.)
_DECLARED = [
    (GpuHealthParams, {"xid_hold_buckets": True}, "xid_hold_buckets must be an int >= 1, got True"),
    (GpuHealthParams, {"resolve_after": 0}, "resolve_after must be an int >= 1, got 0"),
    (GpuHealthParams, {"bucket_ms": 1.5}, "bucket_ms must be an int >= 1, got 1.5"),
    (RemapParams, {"step_ms": 0}, "step_ms must be an int >= 1, got 0"),
    (RemapParams, {"window_ms": 1.5}, "window_ms must be an int >= 1, got 1.5"),
    (RemapParams, {"horizon_ms": -1}, "horizon_ms must be an int >= 0, got -1"),
    (RemapParams, {"hold_ms": None}, "hold_ms must be an int >= 0, got None"),
    (RemapParams, {"limit_rows": True}, "limit_rows must be an int >= 1, got True"),
    (RemapParams, {"concerning_rows": 0}, "concerning_rows must be an int >= 1, got 0"),
    (RemapParams, {"min_rising_steps": 0}, "min_rising_steps must be an int >= 1, got 0"),
    (RemapParams, {"concerning_rows": 600}, r"concerning_rows must be < limit_rows \(512\)"),
    (RemapParams, {"min_rising_steps": 73}, r"min_rising_steps must be <= recent steps \(72\)"),
    (EscalationParams, {"retry_backoff_ms": ()}, "retry_backoff_ms must be a non-empty tuple"),
    (EscalationParams, {"retry_backoff_ms": [60_000]}, "retry_backoff_ms must be a non-empty tup"),
    (EscalationParams, {"retry_backoff_ms": (1, 0)}, r"retry_backoff_ms\[1\] must be an int >= 1"),
    (EscalationParams, {"repeated_reset_action": "REBOOT"}, "repeated_reset_action must be an act"),
    (LedgerParams, {"app_xids": (13, 0)}, r"app_xids\[1\] must be an int >= 1 \(an XID\), got 0"),
    (LedgerParams, {"return_min_action": "REBOOT"}, "return_min_action must be an action"),
    (RetryParams, {"stop_actions": ("REBOOT",)}, r"stop_actions\[0\] must be an action"),
    (RetryParams, {"stop_actions": ("RESET_GPU",)}, "stop_actions: RESET_GPU is mapped to two"),
    (PhaseParams, {"read_feature": ""}, "read_feature must be a non-empty string, got ''"),
    (PopulationParams, {"activity_feature": ""}, "activity_feature must be a non-empty string"),
    (InputParams, {"iteration_feature": ""}, "iteration_feature must be a non-empty string"),
    (CheckpointIntervalParams, {"hysteresis": 0.5}, "hysteresis must be finite and >= 1, got 0.5"),
    (CheckpointIntervalParams, {"hysteresis": 2.0}, r"hysteresis must be < off_factor \(2.0\)"),
    (BaselineParams, {"freeze_z": math.nan}, "freeze_z must be finite and > 0, got nan"),
    (BaselineParams, {"freeze_z": 2.0}, r"freeze_z \(2.0\) must be >= huber_c \(3.0\)"),
    (ShiftParams, {"shift_release": 0.0}, "shift_release must be finite and > 0, got 0.0"),
    (ShiftParams, {"shift_release": 0.5}, r"shift_release must be <= shift_threshold \(0.35\)"),
    (FusionParams, {"z_clip": math.inf}, "z_clip must be finite and > 0, got inf"),
    (MitigationParams, {"topology": 1}, "topology must be a StageCost, got 1"),
    (P2Quantile, {"q": 1.0}, r"q must be in \(0, 1\), got 1.0"),
    (QuantileSketch, {"relative_accuracy": 0.5}, r"relative_accuracy must be in \(0, 0.5\)"),
    (QuantileSketch, {"max_bins": 1}, "max_bins must be an int >= 2, got 1"),
]


@pytest.mark.parametrize(("cls", "kwargs", "message"), _DECLARED)
def test_a_declared_rule_refuses_a_bad_value_naming_the_field(cls, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=f"^{message}"):
        cls(**kwargs)


def test_gpu_health_params_refuse_a_bool_for_a_count() -> None:
    """``xid_hold_buckets=True`` passed the hand check (True >= 1); the declared rule refuses it."""
    with pytest.raises(ValueError, match=r"^xid_hold_buckets must be an int >= 1, got True$"):
        GpuHealthParams(xid_hold_buckets=True)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StageCost(-1.0, 1.5), r"^downtime_s must be finite and >= 0, got -1.0$"),
        (lambda: StageCost(1.0, math.nan), r"^speedup must be >= 1 \(inf: back to baseline\)"),
        (lambda: XidEvent(0, "log"), r"^xid must be an int >= 1, got 0$"),
        (lambda: XidEvent(np.int64(79), "log"), r"^xid must be an int >= 1"),  # a JSON int
        (lambda: XidEvent(79, "dmesg"), r"^source must be one of 'log', 'metric'"),  # type: ignore[arg-type]
        (lambda: FeatureSpec("x", (), "gauge"), r"^metrics must be a non-empty tuple, got \(\)$"),
        (lambda: FeatureSpec("", ("m",), "gauge"), r"^name must be a non-empty string, got ''$"),
        (lambda: FeatureSpec("x", ("m",), "meter"), r"^kind must be one of 'counter', 'gauge'"),  # type: ignore[arg-type]
        (
            lambda: FeatureSpec("x", ("m",), "gauge", abs_floor=0.0),
            r"^abs_floor must be finite and > 0 \(keeps z finite\), got 0.0$",
        ),
        (
            lambda: FeatureSpec("x", ("m",), "gauge", collapse_ratio=1.5),
            r"^collapse_ratio must be in \(0, 1\), got 1.5$",
        ),
        (
            lambda: AlertEvent("A", None, "pending", 0),
            r"^status must be one of 'firing', 'resolved'",
        ),  # type: ignore[arg-type]
        (
            lambda: KnownEvent(-1, "n", None, "x"),
            r"^ts_ms must be an int >= 0 \(epoch ms\), got -1$",
        ),
        (
            lambda: KnownEvent(1, "n", None, ""),
            r"^kind must be a non-empty string \(e.g. xid79, job",
        ),
        (lambda: KnownEvent(1, "n", None, "x", -1), r"^end_ms must be an int >= 0 \(epoch ms\)"),
        (
            lambda: KnownEvent(5, "n", None, "x", 3),
            r"^end_ms must be an int >= ts_ms \(5\), got 3$",
        ),
    ],
)
def test_a_record_with_required_fields_runs_its_declared_rules(build, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        build()
    assert StageCost(0.0, math.inf).speedup == math.inf


def _parameter_classes() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(detectors.__path__, "detectors."):
        for obj in vars(importlib.import_module(info.name)).values():
            if isinstance(obj, type) and obj.__module__ == info.name and issubclass(obj, Checked):
                found.append(obj)
    found.remove(Checked)
    return found


def test_every_parameter_class_builds_its_defaults_and_declares_its_bounds() -> None:
    """The detectors' parameter classes derive from Checked, and their defaults pass."""
    classes = _parameter_classes()
    names = {c.__name__ for c in classes}
    assert {"ChangePointParams", "FusionParams", "SloParams", "ShiftParams"} <= names
    assert len(classes) >= 20
    for cls in classes:
        assert dataclasses.is_dataclass(cls)
        cls()


@pytest.mark.parametrize("top_k", [1.5, True, math.inf, math.nan])
def test_fusion_top_k_is_a_whole_count(top_k: float) -> None:
    """``top_k < 1`` alone let 1.5, True, inf and nan through; it slices the top signals."""
    with pytest.raises(ValueError, match=r"^top_k must be an int >= 1"):
        FusionParams(top_k=top_k)  # type: ignore[arg-type]


def test_settings_run_the_declared_checks_of_a_section() -> None:
    """pydantic calls the inherited ``__post_init__``: a declared bound fails the settings."""
    with pytest.raises(ValidationError, match="gap_min_features must be an int >= 1, got 0"):
        Settings(scoring={"gap_min_features": 0})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"hazard_buckets must be finite and > 1, got 1.0"):
        Settings(failslow={"changepoint": {"hazard_buckets": 1}})  # type: ignore[arg-type]
    assert Settings(scoring={"min_peers": 9}).scoring == ScoringParams(min_peers=9)  # type: ignore[arg-type]
