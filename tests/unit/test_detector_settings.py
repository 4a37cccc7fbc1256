"""Detector parameters are settings: one section per family, the detectors' own defaults and
checks, set from the environment or the config file, and one bucket size for everything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from detectors.advisors.checkpoint_interval import CheckpointIntervalParams
from detectors.advisors.checkpoint_io import CheckpointIoParams
from detectors.alerts import NODE_DEVIATION
from detectors.failslow.monitor import FailSlowParams
from detectors.gpu_health import GpuHealthParams
from detectors.group import ScoringParams
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.cli import main
from streams.frames import Frame
from streams.ingest.builder import frame_builder_for
from streams.settings import Settings, load_settings
from streams.worker.pipeline import Pipeline

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(10)]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("PEERWATCH_"):
            monkeypatch.delenv(name)


def test_the_sections_default_to_the_detectors_own_defaults() -> None:
    s = load_settings()
    assert s.scoring == ScoringParams()
    assert s.gpu_health == GpuHealthParams()
    assert s.failslow == FailSlowParams()
    assert s.scoring.fusion.z_evidence == s.scoring.z_evidence


def _first_firing_bucket(settings: Settings) -> int | None:
    """Bucket index at which n07, whose GPUs idle from bucket 5 while its peers train, fires."""
    p = Pipeline.from_settings(settings)
    for i in range(20):
        ts = T0 + i * B
        for k, node in enumerate(NODES):
            util = 5.0 if node == "n07" and i >= 5 else 95.0 + (k + i) % 3
            p.add(Frame("job", node, ts, {"gpu_util": util, "gpu_power_w": 300.0 + k}), ts / 1000)
        for scored in p.due("job", ts / 1000 + 60):
            if any(c.alertname == NODE_DEVIATION and c.status == "firing" for c in scored.changes):
                return i
    return None


def test_a_scoring_setting_from_the_environment_reaches_the_detector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """persistence (buckets of evidence before firing) set by PEERWATCH_SCORING__PERSISTENCE."""
    default = _first_firing_bucket(load_settings())
    monkeypatch.setenv("PEERWATCH_SCORING__PERSISTENCE", "6")
    assert default is not None
    assert _first_firing_bucket(load_settings()) == default + 3


def test_a_section_field_from_the_environment_beats_the_file_and_keeps_its_other_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "peerwatch.yaml"
    config.write_text(
        "scoring:\n  z_evidence: 5\n  min_peers: 6\ngpu_health:\n  remap:\n    limit_rows: 400\n"
    )
    monkeypatch.setenv("PEERWATCH_SCORING__Z_EVIDENCE", "6")
    monkeypatch.setenv("PEERWATCH_FAILSLOW__LOCALISE__Z_THRESHOLD", "5.5")
    p = Pipeline.from_settings(load_settings(config))
    assert (p.params.z_evidence, p.params.min_peers, p.params.fusion.z_evidence) == (6.0, 6, 6.0)
    assert p.node_health.params.remap.limit_rows == 400
    assert p.failslow_params.localise.z_threshold == 5.5


def test_the_bucket_size_flows_from_bucket_s_to_ingest_worker_and_every_detector() -> None:
    s = load_settings(bucket_s=60, ingest_grace_s=9)
    builder, p = frame_builder_for(s), Pipeline.from_settings(s)
    assert (builder.bucket_ms, builder.grace_ms, p.bucket_ms) == (60_000, 9_000, 60_000)
    assert p.window("job").bucket_ms == 60_000
    assert (p.gpu_params.bucket_ms, p.failslow_alert_params.bucket_ms) == (60_000, 60_000)
    assert p.failslow_params.mitigation.bucket_s == p.failslow_params.slo.bucket_s == 60.0


def test_a_section_cannot_set_the_bucket_a_second_way(tmp_path: Path) -> None:
    config = tmp_path / "peerwatch.toml"
    config.write_text("[failslow.slo]\nbucket_s = 60\n")
    with pytest.raises(ValidationError, match=r"failslow\.slo\.bucket_s follows bucket_s"):
        load_settings(config)


def test_a_pipeline_refuses_parameters_of_another_bucket() -> None:
    with pytest.raises(ValueError, match="bucket_ms=60000"):
        Pipeline(
            DEFAULT_FEATURES,
            ScoringParams(),
            load_xid_catalog(),
            bucket_ms=60_000,
            gpu_health=GpuHealthParams(),
        )


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("PEERWATCH_SCORING__Z_CLIP", "2", r"scoring: Value error, z_clip must be finite and >= "),
        ("PEERWATCH_SCORING__MIN_PEERS", "many", r"scoring\.min_peers: Input should be a valid"),
        ("PEERWATCH_SCORING__Z_EVIDENC", "5", r"scoring\.z_evidenc: Unexpected keyword argument"),
        (
            "PEERWATCH_GPU_HEALTH__XID_HOLD_BUCKETS",
            "0",
            r"gpu_health: Value error, xid_hold_buckets must be an int >= 1, got 0",
        ),
    ],
)
def test_an_invalid_detector_setting_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, message: str
) -> None:
    monkeypatch.setenv(env, value)
    result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code != 0
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: ValidationError: ")
    assert re.search(message, line), line


def test_the_settings_dump_shows_every_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_GPU_HEALTH__XID_HOLD_BUCKETS", "12")
    result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code == 0, result.output
    assert "scoring:\n  min_peers: 8\n" in result.output
    assert "gpu_health:\n  bucket_ms: 30000\n  xid_hold_buckets: 12\n" in result.output
    assert "failslow:\n  changepoint:\n" in result.output


def test_the_advisors_sections_come_from_their_own_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().checkpoint_io == CheckpointIoParams()
    monkeypatch.setenv("PEERWATCH_CHECKPOINT_INTERVAL__OFF_FACTOR", "3")
    monkeypatch.setenv("PEERWATCH_CHECKPOINT_IO__WRITE_MAX_BYTES_PER_S", "1e11")
    s = load_settings()
    assert s.checkpoint_interval == CheckpointIntervalParams(off_factor=3.0)
    assert s.checkpoint_io.write_max_bytes_per_s == 1e11
    monkeypatch.setenv("PEERWATCH_CHECKPOINT_INTERVAL__OFF_FACTOR", "1")
    with pytest.raises(ValidationError, match="off_factor must be finite and > 1"):
        load_settings()


def test_the_settings_dump_does_not_depend_on_string_hashing() -> None:
    """A section's sets (fail-slow's action classes) come out sorted, whatever the hash seed."""
    dumps = {
        subprocess.run(
            [sys.executable, "-m", "streams", "settings"],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(dumps) == 1
    assert "      classes:\n      - compute\n      - cpu\n" in dumps.pop()
