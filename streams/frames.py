"""Frames: what the ingest sends the worker (topic ``peerwatch.frames``, key = group).

The contract between the two sides lives here, owned by neither: the ``Frame``
value, the merge of partial frames of one (node, bucket), and the JSON codec.
Plain standard library, so the ingest runs without Faust.

Wire format: one JSON object per message with the fields of ``Frame``; a key it does
not know is ignored, and the optional fields take their defaults.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from detectors.errors import InputError
from detectors.features import FeatureSpec

__all__ = ["Frame", "FrameError", "decode_frame", "encode_frame", "merge_frames"]


@dataclass(slots=True)
class Frame:
    """One node's features for one bucket (``ts`` = bucket start, epoch ms); only finite values.

    ``values`` holds only the features that were observed: a missing feature is
    absent, never 0. ``gpus`` names the worst GPU for features reduced over GPUs.
    Several frames for the same (node, ts) may arrive (a late scrape, a resent
    request): they merge with ``merge_frames``, which is idempotent.
    """

    group: str
    node: str
    ts: int
    values: dict[str, float]
    gpus: dict[str, str] = field(default_factory=dict)
    # True for a departure notice: the node's series stopped carrying this
    # group (the scheduler moved it out of the job). No values.
    left: bool = False
    # the node's role inside its group (a ``role_labels`` value on any of its series)
    role: str | None = None
    # True when none of the node's series carried the group's label in this bucket nor
    # since (as far as the builder knows when the bucket closes): it is kept in the group
    # on hold (``membership_hold_buckets``), not known to have stayed -- the worker takes
    # its frame but pages nothing on its peer scores
    on_hold: bool = False


# --- codec --------------------------------------------------------------------------------------


class FrameError(InputError):
    """Bytes that are not a frame, or a frame that cannot be put on the wire."""


def encode_frame(frame: Frame) -> bytes:
    """The frame as compact JSON. Non-finite values are refused (JSON has none)."""
    values = frame.values
    if not math.isfinite(sum(values.values())):  # cheap; a sum past 1e308 is checked one by one
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        if bad:
            raise FrameError(f"frame of node {frame.node!r:.80} has non-finite {bad[0]!r:.80}")
    return orjson.dumps(wire_object(frame))


def wire_object(frame: Frame) -> dict[str, Any]:
    """The frame as the object its message holds (every field, by its wire name)."""
    return {
        "group": frame.group,
        "node": frame.node,
        "ts": frame.ts,
        "values": frame.values,
        "gpus": frame.gpus,
        "left": frame.left,
        "role": frame.role,
        "on_hold": frame.on_hold,
    }


_NON_FINITE = re.compile(rb"[:,\[]\s*-?(NaN|Infinity)\b")
# msgspec parses and checks a frame in one pass straight into ``Frame`` (unknown keys
# ignored, ints made floats, NaN / Infinity / numbers past a double refused): ~1.4x
# faster than orjson + the checks below (bench.frame_codec). Anything it refuses goes
# through ``_decode_checked``, which says what is wrong in the words it always used.
_TYPED = msgspec.json.Decoder(Frame)
_ORJSON_INTS = (-(2**63), 2**64)  # orjson reads an integer outside this range as a float


def decode_frame(data: bytes) -> Frame:
    """Parse and check one message; ``FrameError`` says what is wrong with it.

    The parser refuses NaN, Infinity and numbers past a double's range, so every
    value of a decoded frame is finite.
    """
    try:
        frame = _TYPED.decode(data)
    except (msgspec.DecodeError, TypeError):  # a ValidationError is a DecodeError
        return _decode_checked(data)
    if not _ORJSON_INTS[0] <= frame.ts < _ORJSON_INTS[1]:  # refused there: same here
        return _decode_checked(data)
    return frame


def _decode_checked(data: bytes) -> Frame:
    """``decode_frame`` by orjson and explicit checks: the reference, and every refusal."""
    try:
        obj = orjson.loads(data)
    except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
        hint = " (NaN and Infinity are not JSON numbers)" if _NON_FINITE.search(data or b"") else ""
        raise FrameError(f"not JSON{hint}: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"a frame is a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("group", "node", "ts", "values") if k not in obj]
    if missing:
        raise FrameError(f"missing field(s): {', '.join(missing)}")
    group, node, ts = obj["group"], obj["node"], obj["ts"]
    if not (isinstance(group, str) and isinstance(node, str)):
        raise FrameError("group and node must be strings")
    if type(ts) is not int:
        raise FrameError(f"ts must be an integer, got {ts!r:.40}")
    values = _values(obj["values"])
    gpus = obj.get("gpus", {})
    if not isinstance(gpus, dict) or not all(isinstance(v, str) for v in gpus.values()):
        raise FrameError("gpus must map feature names to GPU names")
    role = obj.get("role")
    if not (role is None or isinstance(role, str)):
        raise FrameError("role must be a string or null")
    left, on_hold = obj.get("left", False), obj.get("on_hold", False)
    if type(left) is not bool or type(on_hold) is not bool:
        raise FrameError("left and on_hold must be booleans")
    return Frame(group, node, ts, values, gpus, left=left, role=role, on_hold=on_hold)


def _values(raw: Any) -> dict[str, float]:
    """``raw`` checked (JSON keys are strings): numbers, integers made floats."""
    if not isinstance(raw, dict):
        raise FrameError("values must map feature names to numbers")
    if set(map(type, raw.values())) <= {float}:  # the ingest's frames: no copy, no loop
        return raw
    values: dict[str, float] = {}
    for name, v in raw.items():
        if type(v) not in (float, int):  # bool is not a number here, nor null
            raise FrameError(f"values must map feature names to numbers, got {v!r:.40}")
        values[name] = float(v)
    return values


# --- merge --------------------------------------------------------------------------------------


def _better(reduce: str, va: float, ga: str | None, vb: float, gb: str | None) -> bool:
    """True if (vb, gb) beats (va, ga) under ``reduce`` (sum counts as max, see ``merge_frames``).

    Ties go to the smaller GPU id, and a named GPU beats none: a total order, so
    reducing and merging are commutative, associative and idempotent.
    """
    if vb != va:
        return vb < va if reduce == "min" else vb > va
    if gb is None:
        return False
    return ga is None or gb < ga


def merge_frames(
    a_values: Mapping[str, float],
    a_gpus: Mapping[str, str],
    b_values: Mapping[str, float],
    b_gpus: Mapping[str, str],
    features: Sequence[FeatureSpec],
) -> tuple[dict[str, float], dict[str, str]]:
    """Merge two partial frames of one (node, bucket) with each feature's reduction.

    Commutative, associative and idempotent (merging a frame with itself, or
    merging a resent frame again, changes nothing). Sum features merge as max:
    the frame builder emits complete sums (``streams.ingest.builder``'s module
    docstring says why). Features not in ``features`` merge as max. Non-finite
    values are ignored.
    """
    reduce_of = {spec.name: spec.reduce for spec in features}
    values: dict[str, float] = {}
    gpus: dict[str, str] = {}
    for name in a_values.keys() | b_values.keys():
        reduce = reduce_of.get(name, "max")
        best: tuple[float, str | None] | None = None
        for vals, gpu_map in ((a_values, a_gpus), (b_values, b_gpus)):
            v = vals.get(name)
            if v is None or not math.isfinite(v):
                continue
            g = gpu_map.get(name) if reduce != "sum" else None
            if best is None or _better(reduce, best[0], best[1], v, g):
                best = (v, g)
        if best is not None:
            values[name] = best[0]
            if best[1] is not None:
                gpus[name] = best[1]
    return values, gpus
