"""No secret in any output: every secret setting holds a marker, each command runs through its
error paths, and the marker is in nothing it printed, logged, answered or served on /metrics.

The secrets are every ``SecretStr`` setting (``secret_setting_names``: a secret added later is
covered without touching this test) plus a password in the Alertmanager URL. The commands:
``settings`` (the dump, and its validation errors), ``prometheus-config``, ``backtest`` against
a server that is not there, ``ingest`` over TLS
without Kafka (refused and accepted writes), ``worker`` without Kafka, and with Kafka
delivering to an Alertmanager that refuses the credentials and to a Grafana that is not
there, and ``xid-log`` without Kafka.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from streams.lab.launchers import PeerwatchProcess, free_port, repo_root
from streams.settings import Settings, secret_setting_names
from streams.sinks.outbox import Outbox, alert_key
from tests.integration.conftest import SecuredAlertmanager
from tests.integration.harness import (
    Deployment,
    at_least,
    basic_header,
    client_context,
    make_tls_files,
    wait_for,
)
from tests.integration.test_alertmanager_sink import alert
from tests.integration.test_grafana_sink import T0, _change

MARKER = f"s3cret-marker-{uuid.uuid4().hex[:12]}"
# Where one kind of auth per sink is allowed: Alertmanager gets basic, Grafana a bearer token.
NOT_TOGETHER = {"alertmanager_token", "grafana_password"}
LOG_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus\n"


def marked(leave_out: set[str] = NOT_TOGETHER) -> dict[str, str]:
    """PEERWATCH_* for every secret setting = the marker (and a user name for each pair)."""
    env = {
        f"PEERWATCH_{name.upper()}": MARKER
        for name in secret_setting_names()
        if name not in leave_out
    }
    for name in Settings.model_fields:
        if name.endswith("_username") and f"{name[: -len('username')]}password" not in leave_out:
            env[f"PEERWATCH_{name.upper()}"] = "peerwatch"
    if "kafka_password" not in leave_out:  # a Kafka login is SASL's
        env["PEERWATCH_KAFKA_SECURITY_PROTOCOL"] = "SASL_PLAINTEXT"
    return env


def assert_clean(*outputs: str) -> None:
    traces = [MARKER, basic_header("peerwatch", MARKER).split()[1]]
    for output in outputs:
        for trace in traces:
            assert trace not in output, f"a secret in the output:\n{output[-3000:]}"


def peerwatch(args: list[str], env: dict[str, str], stdin: str = "") -> tuple[int, str]:
    """Run one peerwatch command to its end: (exit status, stdout + stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "streams", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo_root()), **env},
        cwd=repo_root(),
    )
    return done.returncode, done.stdout + done.stderr


def test_the_settings_dump_masks_every_secret() -> None:
    status, output = peerwatch(["settings"], marked())
    assert status == 0, output
    assert_clean(output)
    assert output.count("'**********'") == len(secret_setting_names()) - len(NOT_TOGETHER)


def test_settings_errors_name_the_setting_not_its_value(tmp_path: Path) -> None:
    config = tmp_path / "peerwatch.yaml"
    config.write_text(f"ingest_bearer_tokn: {MARKER}\ngrafana_token: [{MARKER}]\n")
    runs = [
        peerwatch(["settings"], marked(leave_out=set())),  # two kinds of auth for one sink
        peerwatch(["--config", str(config), "settings"], {}),
        peerwatch(["ingest"], {**marked(), "PEERWATCH_INGEST_BASIC_AUTH_USERNAME": ""}),
    ]
    for status, output in runs:
        assert status == 1 and "ValidationError" in output, output
    assert "one kind of auth" in runs[0][1] and "ingest_bearer_tokn" in runs[1][1]
    assert_clean(*(output for _, output in runs))


def test_prometheus_config_holds_no_secret() -> None:
    status, output = peerwatch(["prometheus-config", "--bearer-token-file=/run/token"], marked())
    assert status == 0, output
    assert_clean(output)


def test_xid_log_without_kafka_fails_without_a_secret() -> None:
    env = {**marked(), "PEERWATCH_KAFKA": f"kafka://127.0.0.1:{free_port()}"}
    status, output = peerwatch(["xid-log", "--node=gpu1", "--group=g"], env, stdin=LOG_LINE)
    assert status != 0 and "KafkaConnectionError" in output
    assert_clean(output)


def test_backtest_against_an_unreachable_server_fails_without_a_secret(tmp_path: Path) -> None:
    url = f"http://peerwatch:{MARKER}@127.0.0.1:{free_port()}"  # a password in the URL too
    args = ["--log-level=debug", "backtest", "--source=victoriametrics", f"--url={url}"]
    status, output = peerwatch([*args, "--start=now-1h", f"--out={tmp_path}"], marked())
    assert status != 0 and "SourceUnreachable" in output
    assert_clean(output)


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_ingest_refusing_and_taking_writes_without_kafka_shows_no_secret(
    tmp_path: Path, log_format: str
) -> None:
    deployment = Deployment.new(f"127.0.0.1:{free_port()}", "", tmp_path)
    deployment.env.update(marked())
    deployment.env["PEERWATCH_LOG_FORMAT"] = log_format
    deployment.serve_tls(make_tls_files(tmp_path / "tls"))
    ingest = PeerwatchProcess(
        ["ingest"],
        deployment.env,
        tmp_path / "ingest.log",
        f"{deployment.ingest_url}/metrics",
        ready_context=client_context(tmp_path / "tls" / "ca.pem"),
    )
    presented = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": basic_header("peerwatch", MARKER + "x")},
        {"Authorization": f"Bearer {MARKER}"},
        {"Authorization": basic_header("peerwatch", MARKER)},
    ]
    answers: list[str] = []
    with ingest:
        async with httpx.AsyncClient(
            base_url=deployment.ingest_url, verify=client_context(tmp_path / "tls" / "ca.pem")
        ) as client:
            statuses = []
            for headers in presented:
                reply = await client.post(
                    "/api/v1/write",
                    content=b"\x00",
                    headers={"Content-Type": "application/x-protobuf", **headers},
                )
                statuses.append(reply.status_code)
                answers.append(f"{reply.headers!r} {reply.text}")
            for path in ("/metrics", "/-/ready"):
                answers.append((await client.get(path)).text)
    log = (tmp_path / "ingest.log").read_text()
    # the right credentials are taken while Kafka is away: the write-ahead log (on by
    # default) keeps the body until Kafka has its frames
    assert statuses == [401, 401, 401, 204, 204]
    assert "ingest_auth_failed reason=missing" in log and "kafka_unavailable" in log
    assert 'peerwatch_ingest_auth_failures_total{reason="wrong"} 2.0' in answers[-2]
    assert_clean(log, *answers)


async def test_worker_without_kafka_shows_no_secret(tmp_path: Path) -> None:
    deployment = Deployment.new(f"127.0.0.1:{free_port()}", "", tmp_path)
    deployment.env.update(marked())
    worker = PeerwatchProcess(
        ["worker"],
        deployment.env,
        tmp_path / "worker.log",
        f"http://127.0.0.1:{deployment.metrics_port}/metrics",
    )
    with worker:

        async def retries_logged() -> int:
            return (tmp_path / "worker.log").read_text().count("kafka_unavailable")

        await wait_for(retries_logged, 30, "the worker's Kafka retries", until=at_least(2))
        async with httpx.AsyncClient() as client:
            page = (await client.get(f"http://127.0.0.1:{deployment.metrics_port}/metrics")).text
    log = (tmp_path / "worker.log").read_text()
    assert "kafka_unavailable" in log
    assert_clean(log, page)


async def test_worker_delivering_to_sinks_that_refuse_or_are_away_shows_no_secret(
    kafka_bootstrap: str, secured_alertmanager: SecuredAlertmanager, tmp_path: Path
) -> None:
    """Alerts journaled before the start go out at once: to an Alertmanager that refuses the
    marker (401), and to a Grafana that is not there."""
    am = secured_alertmanager
    url = am.url.replace("https://", f"https://peerwatch:{MARKER}@")
    deployment = Deployment.new(kafka_bootstrap, url, tmp_path)
    # the session's broker has no SASL listener (test_kafka_security checks a Kafka login)
    deployment.env.update(marked(leave_out=NOT_TOGETHER | {"kafka_password"}))
    deployment.env["PEERWATCH_ALERTMANAGER_CA_FILE"] = str(am.tls.ca)
    deployment.env["PEERWATCH_GRAFANA_URL"] = f"http://127.0.0.1:{free_port()}"
    outboxes = tmp_path / "worker" / "outbox"
    payload = alert(f"PeerwatchSecrets{uuid.uuid4().hex[:8]}")
    change = _change("firing", T0)
    for name, key, item in [
        ("alertmanager", alert_key(payload["labels"]), payload),
        ("grafana", "annotation", change.to_dict()),
    ]:
        outbox = Outbox(outboxes / f"{name}.jsonl")
        outbox.put(key, item)
        outbox.close()
    log_path = tmp_path / "worker.log"
    with deployment.worker():

        async def both_failed() -> bool:
            log = log_path.read_text()
            return "alertmanager_rejected status=401" in log and "grafana_unavailable" in log

        await wait_for(both_failed, 60.0, "the worker's 401 from Alertmanager and Grafana away")
        async with httpx.AsyncClient() as client:
            page = (await client.get(f"http://127.0.0.1:{deployment.metrics_port}/metrics")).text
    assert 'peerwatch_worker_alert_deliveries_total{outcome="rejected",sink="alertmanager"}' in page
    assert_clean(log_path.read_text(), page)
