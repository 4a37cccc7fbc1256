"""The shipped configs: Alertmanager's is valid and routes peerwatch alerts as documented;
Prometheus' remote_write snippet is valid and keeps exactly the metric names the catalog reads."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from streams.cli import main
from streams.deploy_config import catalog_metric_names, remote_write_config
from streams.ingest.builder import frame_builder_for
from streams.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
REMOTE_WRITE = DEPLOY / "prometheus" / "remote_write.yml"


def _run(tool: str, package: str, *args: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} (Debian {package}) is not installed")
    done = subprocess.run([path, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _amtool(*args: str) -> str:
    return _run("amtool", "prometheus-alertmanager", *args)


def test_the_config_passes_amtool() -> None:
    assert "SUCCESS" in _amtool("check-config", str(CONFIG))


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=PeerwatchXid", "severity=critical"], "oncall"),
        (["alertname=PeerwatchNodeCollapse", "severity=critical"], "oncall"),
        (["alertname=PeerwatchGroupDegraded", "severity=warning"], "default"),
        (["alertname=PeerwatchNodeDeviation", "severity=warning"], "default"),
        # the action label: a node to take out of service also goes to the drain hook
        (["alertname=PeerwatchXid", "severity=critical", "action=CONTACT_SUPPORT", "node=gpu1"],
         "node-remediation,oncall"),
        (["alertname=PeerwatchXid", "severity=critical", "action=RESTART_APP"], "oncall"),
        (["alertname=PeerwatchRowRemap", "severity=warning", "action=CONTACT_SUPPORT", "node=gpu1"],
         "node-remediation"),
        (["alertname=PeerwatchFailSlow", "severity=warning", "action=S2_REBALANCE"], "default"),
        (["alertname=PeerwatchFailSlow", "severity=warning", "action=S4_RESTART_WITHOUT_NODE",
          "node=gpu1"], "node-remediation"),
        # a job-level S4 names no node: nothing to drain
        (["alertname=PeerwatchJobSlow", "severity=warning", "action=S4_RESTART_WITHOUT_NODE"],
         "default"),
    ],
)  # fmt: skip
def test_routes(labels: list[str], receiver: str) -> None:
    out = _amtool(
        "config", "routes", "test", f"--config.file={CONFIG}", "source=peerwatch", *labels
    )
    assert out.strip() == receiver


@pytest.mark.parametrize(
    ("alertname", "severity", "receiver"),
    [
        ("PeerwatchWorkerNotReady", "critical", "oncall"),
        ("PeerwatchAlertDeliveryFailing", "critical", "oncall"),
        ("PeerwatchConsumerLag", "warning", "default"),
    ],
)
def test_peerwatch_health_routes(alertname: str, severity: str, receiver: str) -> None:
    """The PrometheusRule's alerts (source=peerwatch-health): page when peerwatch cannot."""
    out = _amtool(
        "config", "routes", "test", f"--config.file={CONFIG}", "source=peerwatch-health",
        f"alertname={alertname}", f"severity={severity}",
    )  # fmt: skip
    assert out.strip() == receiver


def _keep_regex() -> re.Pattern[str]:
    (rule,) = yaml.safe_load(REMOTE_WRITE.read_text())["remote_write"][0]["write_relabel_configs"]
    assert rule["action"] == "keep" and rule["source_labels"] == ["__name__"]
    return re.compile(rule["regex"])  # Prometheus anchors it: fullmatch


def test_the_shipped_remote_write_is_the_generated_one() -> None:
    """The shipped remote_write.yml is `peerwatch prometheus-config` of the default catalog."""
    assert REMOTE_WRITE.read_text() == remote_write_config()


def test_prometheus_config_command_prints_the_shipped_file() -> None:
    done = CliRunner().invoke(main, ["prometheus-config"], env={"PEERWATCH_FEATURES": None})
    assert done.exit_code == 0, done.output
    assert done.output == REMOTE_WRITE.read_text()


def test_prometheus_config_command_honours_the_feature_selection() -> None:
    """An operator running a subset of features forwards only that subset's metrics."""
    done = CliRunner().invoke(
        main,
        ["prometheus-config", "--url", "http://10.0.0.5:9201/api/v1/write"],
        env={"PEERWATCH_FEATURES": '["intr_rate", "nfs_read_rtt_s"]'},
    )
    assert done.exit_code == 0, done.output
    (writer,) = yaml.safe_load(done.output)["remote_write"]
    assert writer["url"] == "http://10.0.0.5:9201/api/v1/write"
    assert writer["write_relabel_configs"][0]["regex"] == (
        "node_intr_total|node_mountstats_nfs_operations_requests_total|"
        "node_mountstats_nfs_operations_response_time_seconds_total"
    )


def test_the_keep_regex_keeps_every_name_the_ingest_reads() -> None:
    """Every metric name the ingest's frame builder reads passes Prometheus' keep (41 today;
    node_cpu_seconds_total, the two InfiniBand counters and DCGM_FI_PROF_SM_ACTIVE were dropped)."""
    read = frame_builder_for(Settings()).metric_names
    assert read == set(catalog_metric_names())
    keep = _keep_regex()
    assert sorted(n for n in read if not keep.fullmatch(n)) == []
    assert len(read) == 41


@pytest.mark.parametrize(
    "name", ["node_load1", "DCGM_FI_DEV_FB_USED", "node_memory_MemFree_bytes", "up", "trainer_"]
)
def test_the_keep_regex_drops_what_no_feature_reads(name: str) -> None:
    assert not _keep_regex().fullmatch(name)


def test_the_remote_write_snippet_passes_promtool() -> None:
    assert "SUCCESS" in _run("promtool", "prometheus", "check", "config", str(REMOTE_WRITE))


def test_prometheus_config_command_emits_the_auth_and_tls_blocks(tmp_path: Path) -> None:
    """What an ingest with TLS and auth needs, as file references promtool accepts."""
    for name in ("token", "ca.pem", "prometheus.pem", "prometheus.key"):
        (tmp_path / name).write_text("x\n")
    done = CliRunner().invoke(
        main,
        [
            "prometheus-config",
            "--url=https://peerwatch-ingest:9201/api/v1/write",
            f"--bearer-token-file={tmp_path / 'token'}",
            f"--ca-file={tmp_path / 'ca.pem'}",
            f"--cert-file={tmp_path / 'prometheus.pem'}",
            f"--key-file={tmp_path / 'prometheus.key'}",
        ],
        env={"PEERWATCH_FEATURES": None},
    )
    assert done.exit_code == 0, done.output
    (writer,) = yaml.safe_load(done.output)["remote_write"]
    assert writer["authorization"] == {
        "type": "Bearer",
        "credentials_file": str(tmp_path / "token"),
    }
    assert writer["tls_config"] == {
        "ca_file": str(tmp_path / "ca.pem"),
        "cert_file": str(tmp_path / "prometheus.pem"),
        "key_file": str(tmp_path / "prometheus.key"),
    }
    config = tmp_path / "remote_write.yml"
    config.write_text(done.output)
    assert "SUCCESS" in _run("promtool", "prometheus", "check", "config", str(config))


def test_prometheus_config_command_emits_basic_auth() -> None:
    done = CliRunner().invoke(
        main,
        ["prometheus-config", "--basic-auth-username=prom", "--basic-auth-password-file=/run/pw"],
    )
    assert done.exit_code == 0, done.output
    (writer,) = yaml.safe_load(done.output)["remote_write"]
    assert writer["basic_auth"] == {"username": "prom", "password_file": "/run/pw"}


@pytest.mark.parametrize(
    "flags",
    [
        ["--basic-auth-username=prom"],
        ["--bearer-token-file=/t", "--basic-auth-username=p", "--basic-auth-password-file=/p"],
        ["--cert-file=/c.pem"],
    ],
)
def test_prometheus_config_command_refuses_auth_prometheus_cannot_send(flags: list[str]) -> None:
    done = CliRunner().invoke(main, ["prometheus-config", *flags])
    assert done.exit_code == 1 and "ValueError" in done.output
