"""peerwatch on a Kafka that wants a login: SASL (PLAIN, SCRAM) and TLS, on real Apache Kafka.

One broker for the module, with a SASL_PLAINTEXT, a SASL_SSL and an SSL (client
certificate required) listener beside its PLAINTEXT one (which only the test's own
readers use). PLAIN users are in the listener's JAAS config, SCRAM users are created
by the storage format (``kafka-storage format --add-scram``), as on a KRaft cluster.

The ingest, the worker and xid-log get only the secure listener: frames go in over
it, the worker scores them and pages a kernel-log XID on the alerts topic. A wrong
password stops the worker and xid-log with one ``KafkaLoginError`` line and keeps the
ingest unready with the same reason, never a traceback or the password.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.kafka.options import KafkaLoginError, raise_if_login_refused
from streams.lab.launchers import KafkaKRaft, PeerwatchProcess, free_port
from streams.settings import Settings
from tests.integration.conftest import started
from tests.integration.harness import (
    Deployment,
    TlsFiles,
    make_tls_files,
    read_alert_records,
    wait_for,
)
from tests.integration.test_kubernetes_manifests import OVERLAY, build, pod_environment
from tests.integration.test_xid_log import LINE, replay_around_kernel_lines

# Every password holds this marker: no output may ever show it.
MARKER = "pw-MARKER-5b1e"
USERS = {  # mechanism -> (user, password)
    "PLAIN": ("alice", f"alice-{MARKER}"),
    "SCRAM-SHA-256": ("bob", f"bob-{MARKER}"),
    "SCRAM-SHA-512": ("carol", f"carol-{MARKER}"),
}
MANIFEST_PASSWORD = f"peerwatch-{MARKER}"  # user peerwatch, as deploy/kubernetes logs in
_PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required"
_SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass
class SecureKafka:
    broker: KafkaKRaft
    tls: TlsFiles

    def settings_env(self, protocol: str, mechanism: str | None = None) -> dict[str, str]:
        """The ``PEERWATCH_*`` environment of a client on ``protocol``'s listener."""
        env = {
            "PEERWATCH_KAFKA": f"kafka://127.0.0.1:{self.broker.listeners[protocol]}",
            "PEERWATCH_KAFKA_SECURITY_PROTOCOL": protocol,
        }
        if mechanism is not None:
            user, password = USERS[mechanism]
            env |= {
                "PEERWATCH_KAFKA_SASL_MECHANISM": mechanism,
                "PEERWATCH_KAFKA_USERNAME": user,
                "PEERWATCH_KAFKA_PASSWORD": password,
            }
        if protocol.endswith("SSL"):
            env["PEERWATCH_KAFKA_CA_FILE"] = str(self.tls.ca)
        if protocol == "SSL":
            env["PEERWATCH_KAFKA_CERT_FILE"] = str(self.tls.client_cert)
            env["PEERWATCH_KAFKA_KEY_FILE"] = str(self.tls.client_key)
        return env


def _settings(env: dict[str, str], **more: object) -> Settings:
    fields = {k.removeprefix("PEERWATCH_").lower(): v for k, v in env.items()}
    return Settings(**{**fields, **more})


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    tls = make_tls_files(tmp_path_factory.mktemp("tls"), client="peerwatch")
    keystore = tls.key.with_name("kafka-keystore.pem")  # a PEM keystore: key, then its chain
    keystore.write_bytes(tls.key.read_bytes() + tls.cert.read_bytes())
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in [USERS["PLAIN"]])
    properties = [
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca}",
        "listener.name.ssl.ssl.client.auth=required",
    ]
    for listener in ("sasl_plaintext", "sasl_ssl"):
        prefix = f"listener.name.{listener}"
        properties += [
            f"{prefix}.plain.sasl.jaas.config={_PLAIN_JAAS} {plain_users};",
            f"{prefix}.scram-sha-256.sasl.jaas.config={_SCRAM_JAAS}",
            f"{prefix}.scram-sha-512.sasl.jaas.config={_SCRAM_JAAS}",
        ]
    scram = [f"{m}=[name={u},password={p}]" for m, (u, p) in USERS.items() if m != "PLAIN"]
    scram.append(f"SCRAM-SHA-512=[name=peerwatch,password={MANIFEST_PASSWORD}]")
    free: set[int] = set()
    while len(free) < 4:
        free.add(free_port())
    ports = iter(free)
    broker = KafkaKRaft(
        tmp_path_factory.mktemp("secure-kafka"),
        port=next(ports),
        listeners={p: next(ports) for p in ("SASL_PLAINTEXT", "SASL_SSL", "SSL")},
        properties="\n".join(properties) + "\n",
        scram=scram,
    )
    with started(broker):
        yield SecureKafka(broker, tls)


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SSL", None),  # mutual TLS: the client certificate is the login
    ],
)
@pytest.mark.long
async def test_frames_in_and_an_alert_out_over_a_secure_listener(
    secure_kafka: SecureKafka, tmp_path: Path, protocol: str, mechanism: str | None
) -> None:
    kafka = secure_kafka.settings_env(protocol, mechanism)
    if mechanism == "SCRAM-SHA-256":  # this one reads the password from a file (a Secret)
        secret = tmp_path / "kafka-password"
        secret.write_text(kafka.pop("PEERWATCH_KAFKA_PASSWORD") + "\n")
        kafka["PEERWATCH_KAFKA_PASSWORD_FILE"] = str(secret)
    # Alertmanager off: the alerts topic is what this test reads
    deployment = Deployment.new(kafka["PEERWATCH_KAFKA"].removeprefix("kafka://"), "", tmp_path)
    deployment.env |= kafka
    settings = _settings(kafka, topic_xid=deployment.env["PEERWATCH_TOPIC_XID"])
    with deployment.ingest(), deployment.worker():
        assert await replay_around_kernel_lines(deployment, settings, [LINE]) == 1

        async def xid_alert() -> list[dict]:
            records = await read_alert_records(
                secure_kafka.broker.bootstrap, deployment.alerts_topic
            )
            return [r for r in records if r["labels"]["alertname"] == "PeerwatchXid"]

        (alert,) = await wait_for(xid_alert, 60, "the XID alert on the alerts topic")

        async def healthy_buckets_scored() -> bool:
            # the XID is judged with the first bucket scored after it: that may be the
            # tenth, with the rest of the replay still closing
            return await deployment.buckets_scored() >= 10

        await wait_for(healthy_buckets_scored, 60, "the replay's buckets to be scored")
    assert alert["labels"]["node"] == "gpu070"
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert MARKER not in logs


def test_the_kubernetes_pods_log_in_with_their_configmap_and_secret(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """deploy/kubernetes as built: each pod's environment, the ConfigMap's kafka_* settings
    (SASL_SSL, SCRAM-SHA-512, user peerwatch) and the Secret's kafka-password and
    kafka-ca.crt files get the ingest and the worker (on rocksdb://) ready. Set apart from
    a pod: the broker, the Secret's values (this broker's), loopback ports and paths, one
    replica per topic, no Alertmanager."""
    objects = build(OVERLAY)
    bootstrap = f"127.0.0.1:{secure_kafka.broker.listeners['SASL_SSL']}"
    deployment = Deployment.new(bootstrap, "", tmp_path)
    local = deployment.env | {
        "PEERWATCH_TOPIC_REPLICATION": "1",
        "PEERWATCH_INGEST_HOST": "127.0.0.1",
        "PEERWATCH_WORKER_WEB_HOST": "127.0.0.1",
        "PEERWATCH_INGEST_WAL_DIR": str(tmp_path / "wal"),
    }
    processes = []
    for name, url in (
        ("ingest", f"http://127.0.0.1:{deployment.ingest_port}/-/ready"),
        ("worker", f"http://127.0.0.1:{deployment.metrics_port}/-/ready"),
    ):
        secrets = tmp_path / f"{name}-secrets"
        secrets.mkdir()
        env = pod_environment(objects, f"peerwatch-{name}", secrets) | local
        (secrets / "kafka-password").write_text(MANIFEST_PASSWORD + "\n")
        shutil.copy(secure_kafka.tls.ca, secrets / "kafka-ca.crt")
        assert "PEERWATCH_KAFKA_SECURITY_PROTOCOL" not in env  # the ConfigMap's, not ours
        processes.append(PeerwatchProcess([name], env, tmp_path / f"{name}.log", url))
    with processes[0], processes[1]:
        pass  # both answered /-/ready 200: logged in, the worker's partitions assigned
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert MARKER not in logs
    assert list((tmp_path / "worker").rglob("CURRENT")), "no RocksDB database under the datadir"


def _wrong_password(secure_kafka: SecureKafka, mechanism: str) -> dict[str, str]:
    env = secure_kafka.settings_env("SASL_PLAINTEXT", mechanism)
    env["PEERWATCH_KAFKA_PASSWORD"] = f"wrong-{MARKER}"
    return env


def _peerwatch(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run a peerwatch command to its end (stdin: one XID line); its status and output."""
    done = subprocess.run(
        [sys.executable, "-m", "streams", *args],
        env={**os.environ, **env},
        input=LINE + "\n",
        capture_output=True,
        text=True,
        timeout=90,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_wrong_password_stops_the_worker_with_one_clear_line(
    secure_kafka: SecureKafka, tmp_path: Path, mechanism: str
) -> None:
    env = _wrong_password(secure_kafka, mechanism) | {
        "PEERWATCH_DATADIR": str(tmp_path / "worker"),
        "PEERWATCH_WORKER_WEB_PORT": "0",
        "PEERWATCH_ALERTMANAGER_URL": "",
    }
    began = time.monotonic()
    status, output = _peerwatch(["worker"], env)
    user = USERS[mechanism][0]
    assert status == 1, output
    assert time.monotonic() - began < 30  # not 30 retries of a login that cannot work
    port = secure_kafka.broker.listeners["SASL_PLAINTEXT"]
    expected = f"Kafka at 127.0.0.1:{port} over SASL_PLAINTEXT ({mechanism} as '{user}')"
    assert f"Error: KafkaLoginError: {expected} refused the login" in output, output
    assert "Traceback" not in output, output
    assert MARKER not in output, output


def test_a_wrong_password_stops_xid_log_with_one_clear_line(secure_kafka: SecureKafka) -> None:
    status, output = _peerwatch(
        ["xid-log", "--node", "gpu070", "--group", "job-x"],
        _wrong_password(secure_kafka, "SCRAM-SHA-256"),
    )
    assert status == 1, output
    assert "Error: KafkaLoginError:" in output and "refused the login" in output, output
    assert "Traceback" not in output, output
    assert MARKER not in output, output


def test_a_wrong_password_keeps_the_ingest_unready_and_says_why(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    port = free_port()
    env = _wrong_password(secure_kafka, "PLAIN") | {"PEERWATCH_INGEST_PORT": str(port)}
    log_path = tmp_path / "ingest.log"
    with log_path.open("wb") as log:
        ingest = subprocess.Popen(
            [sys.executable, "-m", "streams", "ingest"],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while "KafkaLoginError" not in (answer := _ready(port))[1]:
                assert time.monotonic() < deadline, f"ready said {answer}"
                time.sleep(0.5)
        finally:
            ingest.terminate()
            ingest.wait(30)
    status, reason = answer
    output = log_path.read_text()
    assert status == 503 and "refused the login" in reason, answer
    assert "background_task_failed task=producer" in output and "refused the login" in output
    assert "Traceback" not in output, output
    assert MARKER not in output + reason


async def test_a_certificate_from_an_unknown_ca_is_a_login_error(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other")
    env = secure_kafka.settings_env("SSL") | {"PEERWATCH_KAFKA_CA_FILE": str(other.ca)}
    with pytest.raises(KafkaLoginError, match="certificate verify failed"):
        await raise_if_login_refused(_settings(env))


def _ready(port: int) -> tuple[int, str]:
    """The ingest's readiness: status and reason (0 while it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)
