"""deploy/compose: the laptop stack is structurally sound (no Docker engine here): every
service has an image or a build with a Dockerfile, depends only on services that exist,
mounts files that exist, sets only real peerwatch settings, and its Prometheus config
passes the real promtool and writes to the ingest service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.settings import Settings
from tests.integration.test_deploy_config import _run as run_tool

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["services"]


def test_the_stack_has_kafka_alertmanager_prometheus_and_peerwatch(
    services: dict[str, dict[str, Any]],
) -> None:
    assert set(services) == {
        "kafka", "alertmanager", "prometheus", "peerwatch-ingest", "peerwatch-worker",
        "simulator",
    }  # fmt: skip


def test_every_service_can_be_built_or_pulled(services: dict[str, dict[str, Any]]) -> None:
    built = {s["image"] for s in services.values() if "build" in s}
    for name, service in services.items():
        assert "image" in service, name
        if "build" in service:
            build = service["build"]
            context = build if isinstance(build, str) else build["context"]
            dockerfile = COMPOSE / context / "Dockerfile"
            assert dockerfile.is_file()
            if isinstance(build, dict) and "target" in build:
                assert f" AS {build['target']}\n" in dockerfile.read_text(), name
        elif service["image"] not in built:
            assert ":" in service["image"], f"{name}: pin the image tag"


def test_dependencies_and_mounts_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        assert set(service.get("depends_on", ())) <= set(services) - {name}, name
        for volume in service.get("volumes", ()):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE / source).is_file(), f"{name}: {source}"


def test_peerwatch_services_set_only_real_settings(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        env = {
            k: v for k, v in service.get("environment", {}).items() if k.startswith("PEERWATCH_")
        }
        if not env:
            continue
        names = {k.removeprefix("PEERWATCH_").lower() for k in env}
        assert names <= set(Settings.model_fields), name
        assert env["PEERWATCH_KAFKA"] == "kafka://kafka:9092"


def test_the_worker_keeps_its_tables_in_rocksdb_on_its_volume(
    services: dict[str, dict[str, Any]],
) -> None:
    worker = services["peerwatch-worker"]
    assert worker["environment"]["PEERWATCH_STORE"] == "rocksdb://"
    (volume,) = worker["volumes"]
    assert volume == f"peerwatch-data:{worker['environment']['PEERWATCH_DATADIR']}"


def test_the_alertmanager_config_is_the_shipped_one(services: dict[str, dict[str, Any]]) -> None:
    (mount,) = services["alertmanager"]["volumes"]
    assert mount.startswith("../alertmanager/alertmanager.yml:")


def test_prometheus_config_passes_promtool_and_writes_to_the_ingest(
    services: dict[str, dict[str, Any]],
) -> None:
    path = COMPOSE / "prometheus.yml"
    assert "SUCCESS" in run_tool("promtool", "prometheus", "check", "config", str(path))
    config = yaml.safe_load(path.read_text())
    (writer,) = config["remote_write"]
    assert writer["url"] == "http://peerwatch-ingest:9201/api/v1/write"
    targets = {c["job_name"]: c["static_configs"][0]["targets"] for c in config["scrape_configs"]}
    assert targets == {
        "peerwatch-ingest": ["peerwatch-ingest:9201"],
        "peerwatch-worker": ["peerwatch-worker:6066"],
    }
    simulate = services["simulator"]["command"]
    assert "--url=http://peerwatch-ingest:9201/api/v1/write" in simulate
