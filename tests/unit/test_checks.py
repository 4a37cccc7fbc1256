"""Parameter bounds are declared next to each field and validated once, by ``Checked``, with
one wording; the settings (pydantic) run the same checks."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from dataclasses import dataclass, replace

import pytest
from pydantic import ValidationError

import detectors
from detectors.checks import (
    Checked,
    check_at_least,
    check_ints,
    check_reals,
    flag,
    integer,
    maybe_real,
    part,
    real,
)
from detectors.fusion import FusionParams
from detectors.group import ScoringParams
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


def test_check_ints_and_check_reals_keep_the_same_wording() -> None:
    p = _Params()
    object.__setattr__(p, "count", 0)
    object.__setattr__(p, "rate", math.nan)
    with pytest.raises(ValueError, match=r"^count must be an int >= 1, got 0$"):
        check_ints(p, "low", "count")
    with pytest.raises(ValueError, match=r"^rate must be in \(0, 2\], got nan$"):
        check_reals(p, "share", "rate", above=0, at_most=2)


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
