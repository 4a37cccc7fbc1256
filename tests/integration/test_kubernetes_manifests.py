"""deploy/kubernetes: the overlay builds with the real kustomize, every object passes the
Kubernetes schema (kubernetes-validate, strict) or the Prometheus Operator's models
(ServiceMonitor, PodMonitor, PrometheusRule), the rules pass the real promtool and use
metric names peerwatch exports, and the objects fit together (selectors, ports, probes)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from faust.auth import SASLCredentials

from streams.kafka.options import client_options, faust_credentials
from streams.settings import Settings, load_settings
from streams.telemetry.metrics import IngestMetrics, WorkerMetrics
from tests.integration.harness import make_tls_files
from tests.integration.test_deploy_config import _run as run_tool

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAY = KUBE / "overlays" / "production"
RUNBOOKS = ROOT / "docs" / "runbooks"
K8S_VERSION = "1.32"  # the oldest Kubernetes the manifests are checked against
CRDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")  # Prometheus Operator models


# The schema packages take seconds to import: only the tests that use them pay for it.
def kubernetes_validate() -> Any:
    import kubernetes_validate

    return kubernetes_validate


def operator_model(kind: str) -> Any:
    from cloudcoil.models.prometheus_operator import v1 as operator

    return getattr(operator, kind)


def kustomize() -> str:
    """The kustomize .ci/run builds (`go install sigs.k8s.io/kustomize/kustomize/v5`)."""
    local = ROOT / ".cache" / "go" / "bin" / "kustomize"
    found = str(local) if os.access(local, os.X_OK) else shutil.which("kustomize")
    if found is None:
        pytest.fail("kustomize not found: .ci/run installs it into .cache/go/bin")
    return found


def build(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kustomize(), "build", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return build(OVERLAY)


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_the_overlay_builds_into_the_expected_objects(objects: list[dict[str, Any]]) -> None:
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    assert kinds == [
        "ConfigMap/peerwatch-config",
        "Deployment/peerwatch-ingest",
        "Namespace/peerwatch",
        "NetworkPolicy/peerwatch-ingest",
        "NetworkPolicy/peerwatch-worker",
        "PodDisruptionBudget/peerwatch-ingest",
        "PodDisruptionBudget/peerwatch-worker",
        "PodMonitor/peerwatch-worker",
        "PrometheusRule/peerwatch",
        "Secret/peerwatch-credentials",
        "Service/peerwatch-ingest",
        "Service/peerwatch-worker",
        "ServiceAccount/peerwatch",
        "ServiceMonitor/peerwatch-ingest",
        "StatefulSet/peerwatch-worker",
    ]
    namespaced = [o for o in objects if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"peerwatch"}


def test_the_base_builds_on_its_own() -> None:
    assert len(build(KUBE / "base")) == 14


def test_the_overlay_sets_image_replicas_and_volume(objects: list[dict[str, Any]]) -> None:
    worker = one(objects, "StatefulSet", "peerwatch-worker")
    assert worker["spec"]["replicas"] == 3
    (claim,) = worker["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    for kind, name in (("Deployment", "peerwatch-ingest"), ("StatefulSet", "peerwatch-worker")):
        (container,) = one(objects, kind, name)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/peerwatch:0.1.0"


@pytest.mark.parametrize("index", range(15))
def test_every_object_passes_its_schema(objects: list[dict[str, Any]], index: int) -> None:
    """Core kinds: the Kubernetes OpenAPI schema, strict (unknown fields fail). CRDs: the
    operator's models, and what they read back equals the input (nothing was ignored)."""
    obj = objects[index]
    model = operator_model(obj["kind"]) if obj["kind"] in CRDS else None
    if model is None:
        kubernetes_validate().validate(obj, K8S_VERSION, strict=True)
    else:
        parsed = model.model_validate(obj)
        assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == obj


def test_the_validators_reject_a_misspelled_field(objects: list[dict[str, Any]]) -> None:
    """The schema checks can fail: a typo in a Deployment and in a PodMonitor is caught."""
    deployment = copy.deepcopy(one(objects, "Deployment", "peerwatch-ingest"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate().ValidationError):
        kubernetes_validate().validate(deployment, K8S_VERSION, strict=True)
    monitor = copy.deepcopy(one(objects, "PodMonitor", "peerwatch-worker"))
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "30s"
    parsed = operator_model("PodMonitor").model_validate(monitor)
    assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") != monitor


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]
        for o in objects
        if o["kind"] in ("Deployment", "StatefulSet")
    }


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_selectors_pick_the_right_pods(objects: list[dict[str, Any]]) -> None:
    """Services, PDBs, monitors and network policies each select exactly one workload."""
    pods = _pods(objects)
    for obj in objects:
        spec = obj.get("spec", {})
        kind = obj["kind"]
        if kind == "Service":
            selector = spec["selector"]
        elif kind in ("PodDisruptionBudget", "PodMonitor"):
            selector = spec["selector"]["matchLabels"]
        elif kind == "NetworkPolicy":
            selector = spec["podSelector"]["matchLabels"]
        elif kind == "ServiceMonitor":  # it selects the Service, which selects the pods
            service = [
                o for o in objects
                if o["kind"] == "Service"
                and _selects(spec["selector"]["matchLabels"], o["metadata"]["labels"])
            ]  # fmt: skip
            assert [s["metadata"]["name"] for s in service] == ["peerwatch-ingest"]
            continue
        else:
            continue
        chosen = [n for n, t in pods.items() if _selects(selector, t["metadata"]["labels"])]
        assert chosen == [obj["metadata"]["name"]], (kind, obj["metadata"]["name"], chosen)


@pytest.mark.parametrize("name", ["peerwatch-ingest", "peerwatch-worker"])
def test_probes_resources_and_hardening(objects: list[dict[str, Any]], name: str) -> None:
    spec = _pods(objects)[name]["spec"]
    (container,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 9201 if name == "peerwatch-ingest" else 6066}
    probes = {k: container[k]["httpGet"] for k in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"] == {"path": "/-/healthy", "port": "http"}
    assert probes["readinessProbe"] == {"path": "/-/ready", "port": "http"}
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    mounts = {m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"] for v in spec["volumes"]}
    if name == "peerwatch-worker":
        volumes |= {"state"}  # the StatefulSet's claim
    assert mounts <= volumes


def pod_environment(objects: list[dict[str, Any]], name: str, directory: Path) -> dict[str, str]:
    """The ``PEERWATCH_*`` environment of container ``name`` as its pod has it, with the
    ConfigMap's file and the Secret's keys written to ``directory`` (for
    /etc/peerwatch/secrets; the placeholder CA is no PEM, so a real CA stands in for it)."""
    config = directory / "config.yaml"
    config.write_text(one(objects, "ConfigMap", "peerwatch-config")["data"]["config.yaml"])
    for key, value in one(objects, "Secret", "peerwatch-credentials")["stringData"].items():
        (directory / key).write_text(value)
    shutil.copy(make_tls_files(directory / "tls").ca, directory / "kafka-ca.crt")
    (container,) = _pods(objects)[name]["spec"]["containers"]
    return {
        env["name"]: env["value"].replace("/etc/peerwatch/secrets", str(directory))
        for env in container["env"]
    } | {"PEERWATCH_CONFIG": str(config)}


def _mounted_settings(
    objects: list[dict[str, Any]], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The settings container ``name`` loads (nothing else in the environment)."""
    for var in [v for v in os.environ if v.startswith("PEERWATCH_")]:
        monkeypatch.delenv(var)
    for var, value in pod_environment(objects, name, tmp_path).items():
        monkeypatch.setenv(var, value)
    return load_settings()


def test_the_worker_keeps_its_state_on_its_claim(
    objects: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB (docs/configuration.md: the production store) under the datadir, the claim."""
    worker = one(objects, "StatefulSet", "peerwatch-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    settings = _mounted_settings(objects, "peerwatch-worker", tmp_path, monkeypatch)
    assert settings.store == "rocksdb://"
    assert mounts["state"] == str(settings.datadir)
    assert worker["spec"]["serviceName"] == "peerwatch-worker"


def _quantity_bytes(text: str) -> int:
    """A Kubernetes binary quantity (``2Gi``, ``64Mi``) in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    return int(text[:-2]) * units[text[-2:]] if text[-2:] in units else int(text)


def test_the_ingest_keeps_its_write_ahead_log_on_a_volume_with_room_for_it(
    objects: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log is on by default and the root filesystem is read-only: where the settings put
    it is a mounted emptyDir, larger than the log's bound (the kubelet evicts a pod whose
    emptyDir passes its sizeLimit)."""
    pod = _pods(objects)["peerwatch-ingest"]["spec"]
    (container,) = pod["containers"]
    settings = _mounted_settings(objects, "peerwatch-ingest", tmp_path, monkeypatch)
    wal = settings.ingest_wal_path
    assert wal is not None
    (mount,) = [m for m in container["volumeMounts"] if wal.is_relative_to(m["mountPath"])]
    assert not mount.get("readOnly", False)
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert _quantity_bytes(volume["emptyDir"]["sizeLimit"]) > settings.ingest_wal_max_bytes


@pytest.mark.parametrize("name", ["peerwatch-ingest", "peerwatch-worker"])
def test_each_process_loads_its_settings_as_mounted(
    objects: list[dict[str, Any]], name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap and the Secret's files, with the container's environment, load as
    settings (extra="forbid": a misspelled setting fails; pairs like username + password
    must both be there), the secrets read from their files; the Kafka login they make is
    what aiokafka and Faust are given (SASL_SSL, SCRAM, the mounted CA)."""
    settings = _mounted_settings(objects, name, tmp_path, monkeypatch)
    assert settings.ingest_host == settings.worker_web_host == "0.0.0.0"
    assert settings.runbook_base_url.endswith("/docs/runbooks")
    secret = (
        settings.ingest_bearer_token
        if name == "peerwatch-ingest"
        else settings.alertmanager_password
    )
    assert secret is not None and secret.get_secret_value().startswith("REPLACE")
    options = client_options(settings)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "peerwatch"
    assert options["sasl_plain_password"] == "REPLACE-ME"  # the Secret's kafka-password
    assert options["ssl_context"] is not None
    assert settings.kafka_ca_file == tmp_path / "kafka-ca.crt"
    assert isinstance(faust_credentials(settings), SASLCredentials)


def test_every_environment_variable_is_a_setting(objects: list[dict[str, Any]]) -> None:
    """PEERWATCH_* variables of unknown names would be ignored silently; secrets come as
    *_file settings pointing into the mounted Secret, whose keys exist."""
    secret = one(objects, "Secret", "peerwatch-credentials")
    for template in _pods(objects).values():
        (container,) = template["spec"]["containers"]
        for env in container["env"]:
            name = env["name"].removeprefix("PEERWATCH_").lower()
            assert name in Settings.model_fields or name == "config", env["name"]
            if name.endswith("_file"):
                key = env["value"].removeprefix("/etc/peerwatch/secrets/")
                assert key in secret["stringData"], env


def _rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    spec = one(objects, "PrometheusRule", "peerwatch")["spec"]
    return [r for g in spec["groups"] for r in g["rules"]]


def test_the_rules_pass_promtool(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(one(objects, "PrometheusRule", "peerwatch")["spec"]))
    assert "SUCCESS: 4 rules found" in run_tool(
        "promtool", "prometheus", "check", "rules", str(path)
    )


def _exported_names() -> set[str]:
    """Every sample name peerwatch's two registries can expose (counters end in _total)."""
    names = set()
    for registry in (IngestMetrics().registry, WorkerMetrics().registry):
        for metric in registry.collect():
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_sum", "_count"),
            }.get(metric.type, ("",))
            names.update(metric.name + s for s in suffixes)
    return names


def test_the_rules_use_metric_names_peerwatch_exports(objects: list[dict[str, Any]]) -> None:
    exported = _exported_names()
    for rule in _rules(objects):
        used = set(re.findall(r"\b(peerwatch_[a-z_]+)\b", rule["expr"]))
        assert used, rule["alert"]
        assert sorted(used - exported) == [], rule["alert"]


def test_the_rules_cover_peerwatchs_own_health(objects: list[dict[str, Any]]) -> None:
    by_name = {r["alert"]: r["expr"] for r in _rules(objects)}
    assert "peerwatch_ingest_requests_total" in by_name["PeerwatchIngestErrors"]
    assert "peerwatch_worker_consumer_lag" in by_name["PeerwatchConsumerLag"]
    assert "peerwatch_worker_ready" in by_name["PeerwatchWorkerNotReady"]
    assert "peerwatch_worker_alert_deliveries_total" in by_name["PeerwatchAlertDeliveryFailing"]


def test_every_rule_links_its_runbook(objects: list[dict[str, Any]]) -> None:
    for rule in _rules(objects):
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"/docs/runbooks/{rule['alert']}.md"), url
        text = (RUNBOOKS / f"{rule['alert']}.md").read_text()
        assert all(s in text for s in ("## What it means", "## What to check", "## What to do"))
        assert rule["labels"]["severity"] in ("critical", "warning")


def test_the_manifests_pass_yamllint() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "yamllint", "--strict", "-c", str(ROOT / ".yamllint.yaml"),
         str(KUBE), str(ROOT / "deploy" / "compose"), str(ROOT / "deploy" / "alertmanager")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


RUNBOOK_BASE = "https://git.example.com/peerwatch/blob/main/docs/runbooks"


def _expect(alertname: str, summary: str, severity: str, **labels: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": severity, "source": "peerwatch-health", **labels},
        "exp_annotations": {"summary": summary, "runbook_url": f"{RUNBOOK_BASE}/{alertname}.md"},
    }


def _rule_cases() -> list[dict[str, Any]]:
    """Synthetic series (1-min steps) where each alert must fire, beside ones where it must not."""
    ns = 'namespace="pw"'
    return [
        {  # 10 % 5xx on ingest-0 fires; 1 % on ingest-1 does not
            "interval": "1m",
            "input_series": [
                {"series": f'peerwatch_ingest_requests_total{{code="503",{ns},pod="ingest-0"}}',
                 "values": "0+60x30"},
                {"series": f'peerwatch_ingest_requests_total{{code="204",{ns},pod="ingest-0"}}',
                 "values": "0+540x30"},
                {"series": f'peerwatch_ingest_requests_total{{code="503",{ns},pod="ingest-1"}}',
                 "values": "0+6x30"},
                {"series": f'peerwatch_ingest_requests_total{{code="204",{ns},pod="ingest-1"}}',
                 "values": "0+594x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "PeerwatchIngestErrors", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "PeerwatchIngestErrors", "exp_alerts": [
                    _expect("PeerwatchIngestErrors",
                            "ingest-0: 10% of remote_write requests fail with 5xx",
                            "warning", namespace="pw", pod="ingest-0"),
                ]},
            ],
        },
        {  # 36,000 frames unread at 60 frames/s: 10 min behind
            "interval": "1m",
            "input_series": [
                {"series": f'peerwatch_worker_consumer_lag{{{ns},pod="worker-0",partition="0"}}',
                 "values": "36000x30"},
                {"series": f'peerwatch_ingest_frames_sent_total{{{ns},pod="ingest-0"}}',
                 "values": "0+3600x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "PeerwatchConsumerLag", "exp_alerts": [
                    _expect("PeerwatchConsumerLag",
                            # 36,000 / rate() (60.06/s: rate extrapolates to its window)
                            "workers are 9m 59s of frames behind the frames topic",
                            "warning", namespace="pw"),
                ]},
            ],
        },
        {  # worker-0 not ready from minute 5; worker-1 not scraped; worker-2 fine
            "interval": "1m",
            "input_series": [
                {"series": f'peerwatch_worker_ready{{{ns},pod="worker-0"}}',
                 "values": "1x4 0x20"},
                {"series": f'up{{job="peerwatch-worker",{ns},pod="worker-1"}}', "values": "0x20"},
                {"series": f'peerwatch_worker_ready{{{ns},pod="worker-2"}}', "values": "1x20"},
                {"series": f'up{{job="peerwatch-worker",{ns},pod="worker-2"}}', "values": "1x20"},
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "PeerwatchWorkerNotReady", "exp_alerts": [
                    _expect("PeerwatchWorkerNotReady",
                            f"worker-{i}: peerwatch worker not ready: its groups are not scored",
                            "critical", namespace="pw", pod=f"worker-{i}")
                    for i in (0, 1)
                ]},
            ],
        },
        {  # worker-0: every delivery fails; worker-1: some fail, most are sent
            "interval": "1m",
            "input_series": [
                {"series": "peerwatch_worker_alert_deliveries_total"
                 f'{{sink="alertmanager",outcome="unavailable",{ns},pod="worker-0"}}',
                 "values": "0+5x30"},
                {"series": "peerwatch_worker_alert_deliveries_total"
                 f'{{sink="alertmanager",outcome="sent",{ns},pod="worker-0"}}',
                 "values": "100x30"},
                {"series": "peerwatch_worker_alert_deliveries_total"
                 f'{{sink="alertmanager",outcome="unavailable",{ns},pod="worker-1"}}',
                 "values": "0+1x30"},
                {"series": "peerwatch_worker_alert_deliveries_total"
                 f'{{sink="alertmanager",outcome="sent",{ns},pod="worker-1"}}',
                 "values": "0+9x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "PeerwatchAlertDeliveryFailing", "exp_alerts": [
                    _expect("PeerwatchAlertDeliveryFailing",
                            "worker-0: peerwatch alerts do not reach Alertmanager",
                            "critical", namespace="pw", pod="worker-0"),
                ]},
            ],
        },
    ]  # fmt: skip


def test_each_rule_fires_where_it_should_and_not_elsewhere(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    """promtool test rules on synthetic series: the expressions, their `for`, labels and
    annotation templates, evaluated by the real Prometheus rule engine."""
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(one(objects, "PrometheusRule", "peerwatch")["spec"]))
    tests = tmp_path / "rules_test.yml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": _rule_cases()}
        )
    )
    assert "SUCCESS" in run_tool("promtool", "prometheus", "test", "rules", str(tests))


def test_the_pods_run_as_the_images_user_on_its_ports(objects: list[dict[str, Any]]) -> None:
    """runAsNonRoot needs the numeric uid the Dockerfile creates; the ports are the ones it
    exposes (a mismatch only shows when the pod starts)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", dockerfile, re.M).group(1).split()}  # type: ignore[union-attr]
    for template in _pods(objects).values():
        spec = template["spec"]
        assert spec["securityContext"]["runAsUser"] == uid
        (container,) = spec["containers"]
        assert {p["containerPort"] for p in container["ports"]} <= exposed
