"""bench.frame_codec, small: every codec round-trips both kinds of frame and is measured."""

from __future__ import annotations

import math

import pytest

from bench import frame_codec
from streams.frames import FrameError


def test_every_codec_round_trips_wide_and_catalog_frames() -> None:
    wide = frame_codec.wide_frame()
    assert len(wide.values) == 300
    real = frame_codec.catalog_frames(buckets=2)[:20]
    for frames in ([wide], real):
        figures = frame_codec.measure(frames, repeat=1)  # raises if a round trip changes a frame
        assert [f.codec for f in figures] == [c.name for c in frame_codec.CODECS]
        assert all(f.bytes_per_frame > 0 and f.decode_us > 0 for f in figures)


@pytest.mark.parametrize("codec", frame_codec.CODECS[2:], ids=lambda c: c.name)
def test_binary_decoders_refuse_non_finite_values(codec: frame_codec.Codec) -> None:
    frame = frame_codec.wide_frame(features=10)
    frame.values["feature_001_rate"] = math.nan
    with pytest.raises(FrameError):
        codec.decode(frame_codec._pack(frame))
