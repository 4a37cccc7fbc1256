"""The state codec, and the persisted format: snapshots written before it still restore."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from detectors.advisors.checkpoint_interval import CheckpointIntervalState
from detectors.baseline import NodeBaselines
from detectors.checks import real
from detectors.failslow.changepoint import ChangePointState
from detectors.failslow.cycles import CycleState
from detectors.failslow.mitigation import MitigationState
from detectors.failslow.slo import SloState
from detectors.gpu_health import GpuHealthParams
from detectors.group_shift import GroupLevels
from detectors.multivariate import MultivariateParams
from detectors.phase import Phase
from detectors.quantile import P2Quantile, QuantileSketch
from detectors.remap import RemapParams
from detectors.state_codec import (
    NAN_AS_NULL,
    SORTED_KEYS,
    JsonRecord,
    JsonState,
    as_object,
    encode_array,
    from_data,
    is_nan,
    key,
    ndarray,
    omit,
    pairs,
    row_encoder,
    rows,
    to_data,
)
from detectors.xid.escalation import EscalationParams, _GpuHistory
from detectors.xid.events import XidEvent
from detectors.xid.gauge import XidGaugeParams, _GaugeState
from streams.catalog import load_xid_catalog
from streams.settings import Settings
from streams.worker.pipeline import Pipeline
from tests.unit.test_quantile import json_sketches

SNAPSHOTS = Path(__file__).parent / "data" / "snapshots"
SETTINGS = Settings(group_labels=["train_job"])


@pytest.mark.parametrize("name", ["gpu-slow-16", "ecc-xid94"])
def test_golden_snapshot_restores_and_is_written_back_unchanged(name: str) -> None:
    """Snapshots written by the hand-written to_dicts (tests/unit/data/snapshots/make.py
    at the codec's first commit) restore, and today's snapshot of them is the same JSON."""
    golden = json.loads((SNAPSHOTS / f"{name}.json").read_text())
    assert golden
    for group, snap in golden.items():
        assert snap["detector"] is not None and snap["failslow"] is not None
        pipeline = Pipeline.from_settings(SETTINGS)
        pipeline.restore(group, snap)
        again = json.loads(json.dumps(pipeline.snapshot(group), allow_nan=False))
        expected = json_sketches(snap)  # legacy pickled river sketches are written as JSON
        assert _without_lifecycle_bookkeeping(again) == _without_lifecycle_bookkeeping(expected)


# The alert lifecycle's own counters, reshaped on purpose while the lifecycle became one
# engine (05a8800 fail-slow: 'stage' read from the action, 'last' added; 00eb49c GPU
# health: 'clear' added); snapshots without them still load. Everything else must match.
_LIFECYCLE_KEYS = {"stage", "last", "clear"}


def _without_lifecycle_bookkeeping(data: object) -> object:
    if isinstance(data, dict):
        is_firing_entry = "change" in data
        return {
            k: _without_lifecycle_bookkeeping(v)
            for k, v in data.items()
            if not (is_firing_entry and k in _LIFECYCLE_KEYS)
        }
    if isinstance(data, list):
        return [_without_lifecycle_bookkeeping(v) for v in data]
    return data


@dataclass(frozen=True)
class Inner:
    at: int
    level: float = real(0.0)  # the rule checks declares, run by the codec on restore


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner | None = None
    pairs: tuple[tuple[str, int | None], ...] = ()
    stage: Literal["S1", "S2"] = "S1"
    counts: dict[int, int] = field(default_factory=dict)


def test_round_trip_of_nested_optional_tuple_literal_and_int_keyed_fields() -> None:
    value = Outer("a", Inner(3, 1.5), (("x", 1), ("y", None)), "S2", {4: 5})
    data = json.loads(json.dumps(to_data(value)))
    assert data == {
        "name": "a",
        "inner": {"at": 3, "level": 1.5},
        "pairs": [["x", 1], ["y", None]],
        "stage": "S2",
        "counts": {"4": 5},
    }
    assert from_data(Outer, data) == value


def test_missing_fields_take_their_defaults() -> None:
    assert from_data(Outer, {"name": "a"}) == Outer("a")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "Outer must be a JSON object"),
        ({}, "Outer is missing 'name'"),
        ({"name": 3}, "Outer.name must be a string"),
        ({"name": "a", "inner": {"at": "x"}}, "Outer.inner.at must be an int"),
        (
            {"name": "a", "inner": {"at": 1, "level": float("inf")}},
            "Outer.inner.level must be finite",
        ),
        ({"name": "a", "pairs": [["x", 1, 2]]}, r"Outer.pairs\[0\] must have 2 items"),
        ({"name": "a", "stage": "S9"}, "Outer.stage must be one of"),
        ({"name": "a", "inner": {"at": True}}, "Outer.inner.at must be an int"),
    ],
)
def test_malformed_data_is_a_value_error_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_data(Outer, data)


def _baselines(**arrays: np.ndarray) -> dict[str, Any]:
    """A one-cell NodeBaselines' data, with ``arrays`` encoded in place of its own."""
    ok = NodeBaselines(("f",), ("n",), np.zeros((1, 1, 1)), np.zeros((1, 1, 1)),
                       np.zeros((1, 1, 1), np.uint16), np.zeros((1, 1, 1), np.uint16),
                       np.full((1, 1, 1), np.nan))  # fmt: skip
    return {**ok.to_dict(), **{k: encode_array(a, "<f8") for k, a in arrays.items()}}


_CHANGES = {"history_buckets": [1, 2], "history_dips": [0, 0]}
_LEVELS = {"features": ["a"], "level": [1.0], "seen": [0], "run": [0], "candidate": [None],
           "home": [None]}  # fmt: skip
_P2 = P2Quantile().to_dict()
_GPU = {"node": "n", "gpu": "0", "incident_start_ms": 0, "incident_last_ms": 0}


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (SloState, {"judged_s": -1.0}, r"SloState.judged_s must be finite and >= 0, got -1.0$"),
        (
            ChangePointState,
            {**_CHANGES, "history": [0.0, math.inf]},
            r"ChangePointState.history\[1\] must be finite, got inf$",
        ),
        (
            ChangePointState,
            {**_CHANGES, "history": [0.0, 0.1], "run_probs": [-0.5]},
            r"ChangePointState.run_probs\[0\] must be finite and >= 0, got -0.5$",
        ),
        (ChangePointState, {"origin": math.nan}, r"ChangePointState.origin must be finite"),
        (ChangePointState, {"baseline": [0.0, math.nan]}, r"ChangePointState.baseline\[1\] must"),
        (
            CycleState,
            {"level_window": [1.0, 0.0]},
            r"CycleState.level_window\[1\] must be finite and > 0, got 0.0$",
        ),
        (GroupLevels, {**_LEVELS, "seen": [-1]}, r"GroupLevels.seen\[0\] must be an int >= 0"),
        (
            GroupLevels,
            {**_LEVELS, "home": [1e301]},
            r"GroupLevels.home\[0\] must be in \[-1e\+300, 1e\+300\], got 1e\+301$",
        ),
        (
            GroupLevels,
            {**_LEVELS, "features": ["a", "a"], "level": [1.0, 1.0]},
            r"GroupLevels.features must name each feature once, got a twice$",
        ),
        (
            MitigationState,
            {"loss_gpu_s": -1},
            r"MitigationState.loss_gpu_s must be finite and >= 0",
        ),
        (
            CheckpointIntervalState,
            {"intervals": [5.0, -1.0]},
            r"CheckpointIntervalState.intervals\[1\] must be finite and >= 0, got -1.0$",
        ),
        (Phase, {"run": -1}, r"Phase.run must be an int >= 0, got -1$"),
        (P2Quantile, {**_P2, "q": 1.5}, r"P2Quantile.q must be in \(0, 1\), got 1.5$"),
        (P2Quantile, {**_P2, "desired": [1, 2, 3, 4]}, r"P2Quantile.desired must hold five fin"),
        (P2Quantile, {**_P2, "heights": [1] * 6}, r"P2Quantile.heights must hold at most five"),
        (
            QuantileSketch,
            {"bins": [[2, 1], [1, 1]], "count": 2},
            r"QuantileSketch.bins must be strictly increasing with counts >= 1$",
        ),
        (QuantileSketch, {"max_bins": 1}, r"QuantileSketch.max_bins must be an int >= 2, got 1$"),
        (XidEvent, {"xid": 0, "source": "log"}, r"XidEvent.xid must be an int >= 1, got 0$"),
        (_GpuHistory, {**_GPU, "action": "REBOOT"}, r"_GpuHistory.action must be an action \("),
        (
            _GaugeState,
            {"version": 1, "series": [{"node": "n", "gpu": "0", "value": -1, "ts_ms": 0}]},
            r"_GaugeState.series\[0\].value must be an int >= 0, got -1$",
        ),
        (
            NodeBaselines,
            _baselines(var=np.array([-1.0])),
            r"NodeBaselines.var must be finite and >= 0 in every entry, got -1.0$",
        ),
        (
            NodeBaselines,
            _baselines(candidate=np.array([math.inf])),
            r"NodeBaselines.candidate must be finite or NaN in every entry, got inf$",
        ),
        (
            NodeBaselines,
            {**_baselines(), "regimes": 17},
            r"NodeBaselines.regimes must be an int in \[1, 16\], got 17$",
        ),
    ],
)
def test_a_restored_state_breaking_a_declared_rule_is_refused_naming_the_field(
    cls: type, data: dict[str, Any], message: str
) -> None:
    """The codec runs the rule the field declares (detectors.checks), after decoding it."""
    with pytest.raises(ValueError, match=message):
        from_data(cls, data)


def test_the_codec_runs_the_rule_a_field_declares_whatever_its_class() -> None:
    """One declaration: a parameter class checks it when built, the codec when restoring."""
    assert from_data(Inner, {"at": 1, "level": 2.0}) == Inner(1, 2.0)
    with pytest.raises(ValueError, match=r"^Inner.level must be finite, got nan$"):
        from_data(Inner, {"at": 1, "level": math.nan})
    with pytest.raises(ValueError, match=r"^GpuHealthParams.xid_hold_buckets must be an int >= 1"):
        from_data(GpuHealthParams, {"xid_hold_buckets": 0})


STATES = json.loads((SNAPSHOTS / "states.json").read_text())
# Output-only values with a hand-written to_dict (a derived key; no from_dict).
_WRITE_ONLY = {"detectors.group_shift:GroupShift"}


def _rebuild(spec: str) -> Callable[[Mapping[str, Any]], Any]:
    """How a sample of ``spec`` is restored (the trackers take their parameters)."""
    catalog = load_xid_catalog()
    module, name = spec.split(":")
    cls = getattr(importlib.import_module(module), name)
    context: dict[str, tuple[object, ...]] = {
        "GroupModel": (MultivariateParams(),),
        "GpuHealthState": (catalog, GpuHealthParams()),
        "XidEscalator": (catalog, EscalationParams()),
        "XidGaugeTracker": (XidGaugeParams(),),
        "RemapTracker": (RemapParams(),),
    }
    args = context.get(name, ())
    return lambda data: cls.from_dict(data, *args)


@pytest.mark.parametrize("spec", sorted(set(STATES) - _WRITE_ONLY))
def test_every_captured_state_restores_and_writes_the_same_bytes(spec: str) -> None:
    """``states.json`` (make_states.py: real runs, written by the hand-written to_dicts
    before the codec took them over): each sample restores and is written back
    byte for byte, key order included (the changelog stores json.dumps as it comes); a
    legacy pickled quantile sketch is written back as its JSON numbers."""
    samples = STATES[spec]
    rebuild = _rebuild(spec)
    assert samples
    for data in samples:
        again = rebuild(data).to_dict()
        expected = json_sketches(data)
        assert json.dumps(again, allow_nan=False) == json.dumps(expected, allow_nan=False)


def _shape(data: Mapping[str, Any], where: str) -> tuple[int, ...]:
    return (len(data["names"]),)


@dataclass(frozen=True)
class Versioned(JsonState):
    names: tuple[str, ...] = ()
    values: Any = field(default=None, metadata=ndarray("<f8", _shape))
    members: frozenset[str] = frozenset()
    seen: dict[int, int] = field(default_factory=dict, metadata=pairs(int, int))
    counts: dict[str, int] = field(default_factory=dict, metadata=SORTED_KEYS)

    VERSION = ("version", 2)
    LEGACY_VERSIONS = (1,)
    KEY_ORDER = ("version", "size", "names", "values", "members", "seen", "counts")

    @property
    def size(self) -> int:
        return len(self.names)

    @classmethod
    def upgrade(cls, data: Mapping[str, Any], version: int) -> Mapping[str, Any]:
        return {"names": data["old_names"], "values": data["values"]}

    def restored(self) -> Versioned:
        return replace(self, counts={k: v for k, v in self.counts.items() if v > 0})


def test_version_key_order_arrays_sets_and_pairs_round_trip() -> None:
    value = Versioned(("a", "b"), np.array([1.5, -2.0]), frozenset({"y", "x"}), {3: 4, 1: 2},
                      {"z": 1, "a": 2})  # fmt: skip
    data = json.loads(json.dumps(to_data(value)))
    assert list(data) == ["version", "size", "names", "values", "members", "seen", "counts"]
    assert data["version"] == 2 and data["size"] == 2
    assert data["members"] == ["x", "y"] and data["seen"] == [[1, 2], [3, 4]]
    assert list(data["counts"]) == ["a", "z"]
    back = Versioned.from_dict(data)
    assert back.values.tolist() == [1.5, -2.0] and back.seen == {1: 2, 3: 4}
    assert to_data(back) == data


def test_an_older_version_is_upgraded_and_a_restored_state_tidied() -> None:
    old = {"version": 1, "old_names": ["a"], "values": to_data(Versioned(("a",), [7.0]))["values"]}
    assert Versioned.from_dict(old).names == ("a",)
    assert Versioned.from_dict({"version": 2, "counts": {"a": 0, "b": 1}}).counts == {"b": 1}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": 3}, r"unsupported Versioned version 3 \(expected 2\)"),
        ({"version": True}, "unsupported Versioned version True"),
        ({"version": 2, "names": ["a"], "values": "!!"}, "Versioned.values is not valid base64"),
        ({"version": 2, "names": ["a"], "values": 5}, "Versioned.values must be a base64 string"),
        ({"version": 2, "names": ["a", "b"], "values": "AAAAAAAA8D8="}, "has 8 bytes, expected 16"),
        ({"version": 2, "seen": [[1, 2, 3]]}, r"Versioned.seen\[0\] must have 2 items"),
    ],
)
def test_malformed_versioned_state_is_a_value_error(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Versioned.from_dict(data)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Record(JsonState):
    when: int = field(metadata=key("ts"))
    score: float = field(default=math.nan, metadata=NAN_AS_NULL)
    usual: float = field(default=math.nan, metadata=NAN_AS_NULL | omit(is_nan))
    labels: tuple[tuple[str, str], ...] = field(default=(), metadata=as_object(str))
    figure: float | int | None = None
    since: int = 0

    @classmethod
    def filled(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return data if "since" in data or "ts" not in data else {**data, "since": data["ts"]}


def test_renamed_omitted_nan_null_object_pairs_and_an_unversioned_filled_default() -> None:
    value = Record(5, math.inf, labels=(("b", "2"), ("a", "1")), figure=3)
    data = json.loads(json.dumps(to_data(value), allow_nan=False))
    assert data == {"ts": 5, "score": None, "labels": {"b": "2", "a": "1"}, "figure": 3,
                    "since": 0}  # fmt: skip
    back = Record.from_dict(data)
    assert math.isnan(back.score) and math.isnan(back.usual)
    assert back.labels == (("a", "1"), ("b", "2"))  # read back sorted
    assert back.figure == 3 and isinstance(back.figure, int)  # not 3.0 by the float arm
    assert Record.from_dict({"ts": 7}).since == 7  # older data: ``filled`` supplies it
    assert to_data(Record(1, 2.0, 0.5))["usual"] == 0.5
    with pytest.raises(ValueError, match="Record is missing 'ts'"):
        Record.from_dict({"when": 5})
    with pytest.raises(ValueError, match=r"Record.labels\['a'\] must be a string"):
        Record.from_dict({"ts": 1, "labels": {"a": 1}})


@dataclass(frozen=True)
class Row(JsonRecord):
    a: int
    hidden: int
    b: str = "x"

    KEY_ORDER = ("b", "twice", "a")

    @property
    def twice(self) -> int:
        return 2 * self.a


def test_a_record_writes_only_its_key_order_with_a_property_and_has_no_reader() -> None:
    assert list(Row(3, 9).to_dict().items()) == [("b", "x"), ("twice", 6), ("a", 3)]
    assert not hasattr(Row, "from_dict")


@dataclass(frozen=True)
class Rows(JsonState):
    records: tuple[tuple[int, float, float, tuple[tuple[str, str], ...], float | int | None, int],
                   ...] = field(default=(), metadata=rows(Record))  # fmt: skip


def test_rows_are_written_as_the_records_they_stand_for_without_building_one() -> None:
    row = (5, math.inf, math.nan, (("b", "2"),), 3, 1)
    write = row_encoder(Record)
    assert write(row) == to_data(Record(*row))
    assert list(write((1, 2.0, 0.5, (), None, 0))) == list(to_data(Record(1, 2.0, 0.5)))
    data = json.loads(json.dumps(to_data(Rows((row,))), allow_nan=False))
    assert data == {"records": [to_data(Record(*row))]}
    back = Rows.from_dict(data).records
    ((when, score, usual, labels, figure, since),) = back  # read back as rows
    assert (when, labels, figure, since) == (5, (("b", "2"),), 3, 1)
    assert math.isnan(score) and math.isnan(usual)  # inf written as null, NaN left out
    with pytest.raises(ValueError, match=r"Rows.records\[0\] is missing 'ts'"):
        Rows.from_dict({"records": [{"score": 1.0}]})
    with pytest.raises(TypeError, match=r"Row\.twice is no field"):
        row_encoder(Row)


FIXED_RUNS = json.loads((SNAPSHOTS / "fixed_runs.json").read_text())


@pytest.mark.parametrize("run", sorted(FIXED_RUNS))
def test_snapshots_of_a_fixed_run_are_what_was_written_before(run: str) -> None:
    """Every snapshot of two fixed runs as the worker's table encodes it: the encoding may
    get cheaper, never different. Keys, order and every non-float exactly, over all
    snapshots; floats of the last one, those of its base64 arrays too, within 1e-9 (CPUs
    differ in numpy's and OpenBLAS' last bits: tests/unit/data/snapshots/make_fixed_runs.py)."""
    from tests.unit.data.snapshots.make import snapshot
    from tests.unit.data.snapshots.make_fixed_runs import encoded_snapshots, fingerprint

    name, nodes, minutes, onset = run.split("/")
    bodies = encoded_snapshots((name, int(nodes), int(minutes), int(onset)), snapshot)
    assert any(b'"firing":{"' in body for body in bodies)
    found, golden = fingerprint(bodies), FIXED_RUNS[run]
    assert (found["snapshots"], found["skeleton"]) == (golden["snapshots"], golden["skeleton"])
    # nan_ok: a baseline's candidate cells are NaN until one is seen
    want = pytest.approx(golden["last_floats"], rel=1e-9, abs=1e-12, nan_ok=True)
    assert found["last_floats"] == want
