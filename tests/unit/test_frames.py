"""streams.frames: the JSON codec of the frames topic, and merging partial frames."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.features import FeatureSpec
from streams.frames import (
    Frame,
    FrameError,
    _decode_checked,
    decode_frame,
    encode_frame,
    merge_frames,
)

TEMP = FeatureSpec("temp", ("gpu_temp",), "gauge", reduce="max")
UTIL = FeatureSpec("util", ("gpu_util",), "gauge", reduce="min")
PROCS = FeatureSpec("procs", ("procs_running",), "gauge", reduce="sum")
INTR = FeatureSpec("intr", ("intr_total",), "counter", reduce="sum")
FEATURES = (TEMP, UTIL, PROCS, INTR)


# --- codec ---------------------------------------------------------------------------------------

names = st.text(max_size=12)
frames = st.builds(
    Frame,
    group=names,
    node=names,
    ts=st.integers(-(2**62), 2**62),
    values=st.dictionaries(names, st.floats(allow_nan=False, allow_infinity=False), max_size=5),
    gpus=st.dictionaries(names, names, max_size=3),
    left=st.booleans(),
    role=st.none() | names,
    on_hold=st.booleans(),
)


@settings(max_examples=200)
@given(frames)
def test_a_frame_survives_the_wire(frame: Frame) -> None:
    assert decode_frame(encode_frame(frame)) == frame


def test_unknown_keys_are_ignored_and_optional_fields_default() -> None:
    """A hand-written producer's frame: only the required fields, and one of its own."""
    bare = json.dumps({"group": "g", "node": "n", "ts": 0, "values": {"x": 1}, "by": "me"})
    assert decode_frame(bare.encode()) == Frame("g", "n", 0, {"x": 1.0})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\x00 not json", "not JSON"),
        (b'{"group": "g", "node": "n", "ts": 0', "not JSON"),
        (b"[1, 2]", "a frame is a JSON object, got list"),
        (b'{"group": "g", "node": "n"}', "missing field\\(s\\): ts, values"),
        (b'{"group": 1, "node": "n", "ts": 0, "values": {}}', "group and node must be strings"),
        (b'{"group": "g", "node": "n", "ts": "soon", "values": {}}', "ts must be an integer"),
        (b'{"group": "g", "node": "n", "ts": 1.5, "values": {}}', "ts must be an integer"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": "hi"}}', "values must map"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": true}}', "values must map"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": null}}', "values must map"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": NaN}}', "NaN and Infinity are"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": -Infinity}}', "NaN and Infinity"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {"x": 1e999}}', "not JSON.*infinity"),
        (
            b'{"group": "g", "node": "n", "ts": 0, "values": {"x": 1' + b"0" * 400 + b"}}",
            "not JSON",
        ),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {}, "gpus": {"x": 0}}', "gpus must map"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {}, "gpus": null}', "gpus must map"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {}, "role": 3}', "role must be"),
        (b'{"group": "g", "node": "n", "ts": 0, "values": {}, "left": 1}', "left and on_hold"),
    ],
)
def test_a_malformed_message_is_refused_with_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_frame(body)


# any JSON value, and the field values a frame may or may not accept, mixed
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
maybe_frames = st.fixed_dictionaries(
    {},
    optional={
        "group": names | json_values,
        "node": names | json_values,
        "ts": st.integers() | json_values,
        "values": st.dictionaries(names, st.floats() | st.integers() | json_values, max_size=4),
        "gpus": st.dictionaries(names, names | json_values, max_size=3) | json_values,
        "left": st.booleans() | json_values,
        "role": st.none() | names | json_values,
        "on_hold": st.booleans() | json_values,
        "extra": json_values,  # a key Frame does not have
    },
)


def _outcome(decode: object, data: bytes) -> object:
    try:
        return decode(data)  # type: ignore[operator]
    except FrameError as exc:
        return f"FrameError: {exc}"


@settings(max_examples=500)
@given(maybe_frames | json_values)
def test_the_fast_decoder_decides_as_the_checked_one(obj: object) -> None:
    """msgspec's typed decode gives the frame, or the refusal and its words, of orjson + checks."""
    data = json.dumps(obj).encode()  # NaN / Infinity as Python writes them: refused by both
    assert _outcome(decode_frame, data) == _outcome(_decode_checked, data)


def test_a_non_finite_value_is_not_encoded() -> None:
    with pytest.raises(FrameError, match="node 'n1' has non-finite 'x'"):
        encode_frame(Frame("g", "n1", 0, {"x": float("nan")}))


def test_the_ingest_does_not_import_faust() -> None:
    """The ingest's process loads neither Faust nor its runtime (``mode``)."""
    code = (
        "import sys, streams.cli, streams.ingest.server; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'faust', 'mode'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- merge ---------------------------------------------------------------------------------------

values = st.floats(-1e12, 1e12, allow_nan=False)
frame_strategy = st.fixed_dictionaries(
    {},
    optional={
        "temp": st.tuples(values, st.sampled_from(["0", "1", "7", None])),
        "util": st.tuples(values, st.sampled_from(["0", "3", None])),
        "procs": st.tuples(values, st.none()),
        "other": st.tuples(values, st.none()),
    },
).map(
    lambda d: (
        {k: v for k, (v, _) in d.items()},
        {k: g for k, (_, g) in d.items() if g is not None},
    )
)


@settings(max_examples=300)
@given(frame_strategy)
def test_merging_a_frame_with_itself_changes_nothing(frame: tuple[dict, dict]) -> None:
    v, g = frame
    assert merge_frames(v, g, v, g, FEATURES) == (v, g)


@settings(max_examples=300)
@given(frame_strategy, frame_strategy, frame_strategy)
def test_merge_order_does_not_matter(
    a: tuple[dict, dict], b: tuple[dict, dict], c: tuple[dict, dict]
) -> None:
    ab = merge_frames(*a, *b, FEATURES)
    assert ab == merge_frames(*b, *a, FEATURES)
    assert merge_frames(*ab, *c, FEATURES) == merge_frames(
        *a, *merge_frames(*b, *c, FEATURES), FEATURES
    )


def test_merge_uses_each_features_reduction() -> None:
    a = ({"temp": 70.0, "util": 90.0, "procs": 5.0}, {"temp": "1", "util": "2"})
    b = ({"temp": 80.0, "util": 95.0, "procs": 3.0, "intr": 1e5}, {"temp": "6", "util": "4"})
    assert merge_frames(*a, *b, FEATURES) == (
        {"temp": 80.0, "util": 90.0, "procs": 5.0, "intr": 1e5},
        {"temp": "6", "util": "2"},
    )
