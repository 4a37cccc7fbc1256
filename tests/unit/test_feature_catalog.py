"""The feature catalog is data: features.toml, validated by detectors.features, extended by
operators' files named in settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from detectors.alerts import NODE_DEVIATION
from detectors.features import FeatureSpec, features_from_data, merge_features
from streams.catalog import DEFAULT_FEATURES, features_for, load_feature_catalog
from streams.ingest.series import Series
from streams.settings import load_settings
from streams.worker.offline import run_offline

FAN = """
[[feature]]
name = "fan_rpm"
metrics = ["acme_chassis_fan_rpm"]
kind = "gauge"
match = { sensor = "fan" }
reduce = "min"
direction = "down"
abs_floor = 50.0
klass = "cooling"
"""


def _table(spec: FeatureSpec) -> dict[str, Any]:
    """Every field of ``spec`` as a catalog table (lists and tables as TOML gives them)."""
    table = dataclasses.asdict(spec)
    table["metrics"] = list(spec.metrics)
    return {k: v for k, v in table.items() if v is not None}


def test_every_field_of_every_shipped_feature_reads_back_from_a_table() -> None:
    """All 15 FeatureSpec fields are catalog keys, each with its type."""
    assert (
        features_from_data({"feature": [_table(f) for f in DEFAULT_FEATURES]}) == DEFAULT_FEATURES
    )


def test_the_shipped_catalog_holds_the_features_the_detectors_read() -> None:
    names = [f.name for f in DEFAULT_FEATURES]
    assert len(names) == 41
    assert names[:3] == ["gpu_util", "gpu_power_w", "gpu_temp_c"]
    assert {"xid_last", "tokens_per_s", "nfs_write_bytes_rate"} <= set(names)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "floor": 1}, r"feature x: unknown key"),
        ({"name": "x", "metrics": ["m"]}, r"feature x: missing kind"),
        ({"metrics": ["m"], "kind": "gauge"}, r"feature #1: missing name"),
        ({"name": "x", "metrics": "m", "kind": "gauge"}, r"x: metrics must be a non-empty list"),
        ({"name": "x", "metrics": ["m"], "kind": "histogram"}, r"kind must be one of counter"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "reduce": "avg"}, r"reduce must be"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "abs_floor": "1"}, r"finite number"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "abs_floor": True}, r"finite number"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "scored": 1}, r"true or false"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "match": {"a": 1}}, r"match must be"),
        ({"name": "x", "metrics": ["m"], "kind": "gauge", "abs_floor": 0.0}, r"abs_floor must be"),
        (
            {"name": "x", "metrics": ["m"], "kind": "gauge", "collapse_ratio": 1.0},
            r"^feature x: collapse_ratio must be in \(0, 1\), got 1.0$",
        ),
        (
            {"name": "x", "metrics": ["m"], "kind": "gauge", "rel_floor": -0.5},
            r"^feature x: rel_floor must be finite and >= 0, got -0.5$",
        ),
    ],
)
def test_a_bad_feature_table_names_the_feature_and_the_key(
    table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        features_from_data({"feature": [table]})


def test_a_catalog_is_an_array_of_feature_tables() -> None:
    with pytest.raises(ValueError, match=r"unknown top-level key\(s\) \['features'\]"):
        features_from_data({"features": []})
    with pytest.raises(ValueError, match=r"array of tables"):
        features_from_data({"feature": {"name": "x"}})
    twice = {"name": "x", "metrics": ["m"], "kind": "gauge"}
    with pytest.raises(ValueError, match=r"feature\(s\) x given twice"):
        features_from_data({"feature": [twice, twice]})


def test_an_operator_feature_of_a_shipped_name_replaces_it_in_place() -> None:
    alias = FeatureSpec("gpu_power_w", ("acme_gpu_watts",), "gauge", abs_floor=10.0)
    new = FeatureSpec("fan_rpm", ("acme_chassis_fan_rpm",), "gauge")
    merged = merge_features(DEFAULT_FEATURES, [alias, new])
    assert merged[1] == alias
    assert merged[-1] == new
    assert len(merged) == len(DEFAULT_FEATURES) + 1


def test_a_bad_operator_file_is_named_in_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "fans.toml"
    bad.write_text(FAN.replace('kind = "gauge"', 'kind = "meter"'))
    with pytest.raises(ValueError, match=r"fans\.toml: feature fan_rpm: kind must be one of"):
        load_feature_catalog([bad])
    bad.write_text("[[feature]\n")
    with pytest.raises(ValueError, match=r"fans\.toml: not valid TOML"):
        load_feature_catalog([bad])
    with pytest.raises(FileNotFoundError):
        load_feature_catalog([tmp_path / "nope.toml"])


NODES = [f"n{i:02d}" for i in range(10)]
T0 = 1_760_000_000_000


def _fan_rounds(slow: str, from_round: int, rounds: int) -> list[tuple[int, list[Series]]]:
    """An invented exporter's fan gauge every 15 s; ``slow``'s fan drops to a crawl."""
    out = []
    for r in range(rounds):
        ts = T0 + r * 15_000
        series = [
            Series(
                {"__name__": "acme_chassis_fan_rpm", "instance": f"{node}:9999",
                 "cluster": "c1", "sensor": sensor, "fan": "0"},
                [(ts, rpm)],
            )
            for node in NODES
            for sensor, rpm in (
                ("fan", 2_000.0 if node == slow and r >= from_round else 9_000.0 + r % 3),
                ("pump", 500.0),  # same metric, other sensor: not the feature (match)
            )
        ]  # fmt: skip
        out.append((ts, series))
    return out


def _deviations(config: Path) -> list[tuple[str | None, str, str | None, str | None]]:
    settings = load_settings(config, alertmanager_url="")
    run = run_offline(_fan_rounds("n07", from_round=20, rounds=60), settings)
    return [
        (c.node, c.status, dict(c.labels).get("class"), c.signals[0].feature if c.signals else None)
        for c in run.changes
        if c.alertname == NODE_DEVIATION
    ]


def test_a_feature_added_in_config_is_scored_end_to_end(tmp_path: Path) -> None:
    """An invented exporter's metric, added by a file the config names, reaches the frame
    builder and the pipeline, and its collapse on one node fires a deviation led by it."""
    (tmp_path / "fans.toml").write_text(FAN)
    config = tmp_path / "peerwatch.yaml"
    config.write_text(f"feature_files: [{tmp_path / 'fans.toml'}]\n")
    settings = load_settings(config)
    assert features_for(settings)[-1].name == "fan_rpm"
    assert _deviations(config)[0] == ("n07", "firing", "cooling", "fan_rpm")


def test_without_the_operator_file_the_exporter_is_ignored(tmp_path: Path) -> None:
    config = tmp_path / "peerwatch.yaml"
    config.write_text("features: null\n")
    assert _deviations(config) == []
