"""Frame wire codecs side by side: today's JSON against compact binary candidates.

    python -m bench.frame_codec [--frames 2000] [--repeat 5]

Two kinds of frame, each through every codec in the same run:

- ``300 features``: one synthetic node frame with 300 values (float names of the
  catalog's shape, ``name@gpuN`` for per-GPU ones) and 40 worst-GPU names -- the
  issue's yardstick for a fully loaded catalog;
- ``catalog``: the real frames the ingest's ``FrameBuilder`` makes from the
  simulated ``gpu-slow`` job (every catalog feature on; what ``bench.worker`` feeds).

Codecs (each decodes into a checked ``Frame``, as the worker needs it):

- ``json (streams.frames)``: ``encode_frame`` / ``decode_frame``, the wire today;
- ``json, msgspec typed``: the same bytes decoded by msgspec into a typed struct
  (the checks are the schema's), a drop-in for the decoder only;
- ``msgpack (ormsgpack)``: the same object as MessagePack, decoded then checked
  as ``decode_frame`` checks (plus a finiteness test: MessagePack carries NaN);
- ``msgpack, msgspec typed``: MessagePack decoded by msgspec into the typed struct.

Printed per codec: bytes per frame and CPU microseconds per frame to encode and
to decode (fastest of ``--repeat`` passes over ``--frames`` frames), and the
decode ratio to today's JSON. No figure is asserted anywhere.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
import ormsgpack

from streams.frames import Frame, FrameError, decode_frame, encode_frame, wire_object


class WireFrame(msgspec.Struct, forbid_unknown_fields=False):
    """The wire object's schema, for msgspec's typed decoders (unknown keys ignored)."""

    group: str
    node: str
    ts: int
    values: dict[str, float]
    gpus: dict[str, str] = {}
    left: bool = False
    role: str | None = None
    on_hold: bool = False


_JSON_TYPED = msgspec.json.Decoder(WireFrame)
_PACK_TYPED = msgspec.msgpack.Decoder(WireFrame)


def _as_frame(w: WireFrame) -> Frame:
    if not math.isfinite(sum(w.values.values())):
        raise FrameError("non-finite value")
    return Frame(
        w.group, w.node, w.ts, w.values, w.gpus, left=w.left, role=w.role, on_hold=w.on_hold
    )


def _pack(frame: Frame) -> bytes:
    return ormsgpack.packb(wire_object(frame))


def _unpack_checked(data: bytes) -> Frame:
    obj = ormsgpack.unpackb(data)
    if not isinstance(obj, dict):
        raise FrameError("not a map")
    group, node, ts, values = obj["group"], obj["node"], obj["ts"], obj["values"]
    if not (isinstance(group, str) and isinstance(node, str) and type(ts) is int):
        raise FrameError("bad header")
    if not (isinstance(values, dict) and set(map(type, values.values())) <= {float}):
        raise FrameError("values must be floats")
    if not math.isfinite(sum(values.values())):
        raise FrameError("non-finite value")
    gpus = obj.get("gpus", {})
    if not isinstance(gpus, dict):
        raise FrameError("bad gpus")
    return Frame(
        group,
        node,
        ts,
        values,
        gpus,
        left=obj.get("left", False),
        role=obj.get("role"),
        on_hold=obj.get("on_hold", False),
    )


@dataclass(frozen=True)
class Codec:
    name: str
    encode: Callable[[Frame], bytes]
    decode: Callable[[bytes], Frame]


CODECS: tuple[Codec, ...] = (
    Codec("json (streams.frames)", encode_frame, decode_frame),
    Codec("json, msgspec typed", encode_frame, lambda b: _as_frame(_JSON_TYPED.decode(b))),
    Codec("msgpack (ormsgpack)", _pack, _unpack_checked),
    Codec("msgpack, msgspec typed", _pack, lambda b: _as_frame(_PACK_TYPED.decode(b))),
)


def wide_frame(features: int = 300, gpus: int = 8) -> Frame:
    """One node's frame with ``features`` values: a fifth of them per GPU (``name@gpuN``)."""
    values: dict[str, float] = {}
    worst: dict[str, str] = {}
    i = 0
    while len(values) < features:
        name = f"feature_{i:03d}_rate"
        if i % 5 == 0:
            for g in range(gpus):
                if len(values) < features:
                    values[f"{name}@{g}"] = 1000.0 * math.sin(i + g) + 0.123456789 * i
        else:
            values[name] = 12345.678 * math.cos(i) + i / 7.0
            if len(worst) < 40:
                worst[name] = f"GPU-{i % gpus}"
        i += 1
    return Frame("job-train-0042", "node-00117.cluster.example", 1_764_590_400_000, values, worst)


def catalog_frames(buckets: int = 3) -> list[Frame]:
    """The simulated ``gpu-slow`` job's real frames (every catalog feature), ``buckets`` buckets."""
    from bench.worker import template  # the simulator: imported only when asked for

    rounds, _ = template("gpu-slow", 2000, buckets)
    return [  # values as the worker decodes them: Python floats, not the builder's numpy ones
        Frame(
            f.group,
            f.node,
            f.ts,
            {k: float(v) for k, v in f.values.items()},
            dict(f.gpus),
            left=f.left,
            role=f.role,
            on_hold=f.on_hold,
        )
        for frames in rounds
        for f in frames
    ]


@dataclass(frozen=True)
class Figures:
    codec: str
    bytes_per_frame: float
    encode_us: float
    decode_us: float


def measure(
    frames: Sequence[Frame],
    codecs: Sequence[Codec] = CODECS,
    repeat: int = 5,
    clock: Callable[[], float] = time.process_time,
) -> list[Figures]:
    """Each codec over ``frames``; every decoded frame is checked equal to its source."""
    out = []
    for codec in codecs:
        wire = [codec.encode(f) for f in frames]
        for f, body in zip(frames, wire, strict=True):
            if codec.decode(body) != f:
                raise AssertionError(f"{codec.name}: round trip changed a frame")
        enc = dec = math.inf
        for _ in range(repeat):
            started = clock()
            for f in frames:
                codec.encode(f)
            enc = min(enc, clock() - started)
            started = clock()
            for body in wire:
                codec.decode(body)
            dec = min(dec, clock() - started)
        n = len(frames)
        size = sum(map(len, wire)) / n
        out.append(Figures(codec.name, size, enc / n * 1e6, dec / n * 1e6))
    return out


def report(title: str, figures: Sequence[Figures]) -> None:
    base = figures[0]
    print(f"\n{title}")
    print(
        f"  {'codec':<26} {'bytes':>8} {'encode us':>10} {'decode us':>10} {'decode vs json':>15}"
    )
    for f in figures:
        print(
            f"  {f.codec:<26} {f.bytes_per_frame:>8,.0f} {f.encode_us:>10.1f} "
            f"{f.decode_us:>10.1f} {base.decode_us / f.decode_us:>14.2f}x"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.frame_codec", description=__doc__)
    parser.add_argument("--frames", type=int, default=2000, help="frames per pass (300-feature)")
    parser.add_argument("--repeat", type=int, default=5, help="passes; the fastest counts")
    args = parser.parse_args(argv)
    wide = wide_frame()
    copies = [
        Frame(wide.group, f"{wide.node}.{i}", wide.ts, dict(wide.values), dict(wide.gpus))
        for i in range(args.frames)
    ]
    real = catalog_frames()
    print(
        f"frame codecs: CPU time of this process, fastest of {args.repeat} passes; "
        f"{len(copies)} frames of {len(wide.values)} values, {len(real)} catalog frames of "
        f"{round(sum(len(f.values) for f in real) / len(real))} values on average"
    )
    report("300-feature frame", measure(copies, repeat=args.repeat))
    report("catalog frames (gpu-slow job)", measure(real, repeat=args.repeat))


if __name__ == "__main__":
    main()
