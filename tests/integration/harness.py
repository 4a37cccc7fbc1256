"""Shared parts of the tests that run peerwatch's own processes end to end."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import json
import ssl
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaConsumer

from bench.worker_kafka import committed
from streams.kafka.reading import records_to_end
from streams.lab.launchers import PeerwatchProcess, Prometheus, free_port, peerwatch_env
from streams.sinks.advice import ADVICE_RECORD
from tests.integration.conftest import started

T = TypeVar("T")


@dataclass
class Deployment:
    """The environment of one ingest + worker pair with topics of its own."""

    env: dict[str, str]
    ingest_port: int
    metrics_port: int
    alerts_topic: str
    workdir: Path
    job: str  # the simulated job's name: its peer group, unique to this deployment
    ingest_tls: TlsFiles | None = None  # set by ``serve_tls``
    ingest_mutual_tls: bool = False

    @classmethod
    def new(cls, kafka_bootstrap: str, alertmanager_url: str, workdir: Path) -> Deployment:
        run = uuid.uuid4().hex[:8]
        ingest_port, metrics_port = free_port(), free_port()
        env = peerwatch_env(
            kafka_bootstrap,
            topics=f"test-{run}",
            app_id=f"peerwatch-test-{run}",
            group_labels=["train_job"],
            ingest_port=ingest_port,
            worker_web_port=metrics_port,
            datadir=workdir / "worker",
            alertmanager_url=alertmanager_url,
        )
        alerts_topic = env["PEERWATCH_TOPIC_ALERTS"]
        return cls(env, ingest_port, metrics_port, alerts_topic, workdir, f"job-{run}")

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.ingest_port}/api/v1/write"

    def serve_tls(self, tls: TlsFiles, mutual: bool = False) -> None:
        """Make the ingest serve HTTPS with ``tls``' certificate (``mutual``: and want clients
        to show one its CA signed; the tests' own requests show ``tls``' client certificate)."""
        self.env["PEERWATCH_INGEST_TLS_CERT_FILE"] = str(tls.cert)
        self.env["PEERWATCH_INGEST_TLS_KEY_FILE"] = str(tls.key)
        if mutual:
            self.env["PEERWATCH_INGEST_TLS_CLIENT_CA_FILE"] = str(tls.ca)
        self.ingest_tls, self.ingest_mutual_tls = tls, mutual

    def ingest_client_context(self) -> ssl.SSLContext | None:
        """What a client of this ingest needs for its HTTPS, None for plain HTTP."""
        if self.ingest_tls is None:
            return None
        identity = self.ingest_tls if self.ingest_mutual_tls else None
        return client_context(self.ingest_tls.ca, identity)

    @property
    def ingest_url(self) -> str:
        """The ingest's base URL, ``https`` once ``serve_tls`` was called."""
        scheme = "https" if self.ingest_tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.ingest_port}"

    def ingest(self) -> PeerwatchProcess:
        context = self.ingest_client_context()
        return PeerwatchProcess(
            ["ingest"],
            self.env,
            self.workdir / "ingest.log",
            f"{self.ingest_url}/-/ready",
            ready_context=context,
        )

    def worker(self) -> PeerwatchProcess:
        return PeerwatchProcess(
            ["worker"],
            self.env,
            self.workdir / "worker.log",
            f"http://127.0.0.1:{self.metrics_port}/metrics",
            "peerwatch_worker_ready 1.0",
        )

    async def worker_samples(self, name: str) -> list[float]:
        """The values of ``name``'s series (labelled or not) on the worker's /metrics."""
        return await metric_samples(self.metrics_port, name)

    async def buckets_scored(self) -> int:
        """Group buckets the worker has scored (from its /metrics)."""
        return int(sum(await self.worker_samples("peerwatch_worker_buckets_scored_total")))

    async def acked_frames_committed(self) -> bool:
        """Every frame the worker has acked is committed: a SIGKILL now has Kafka deliver
        again only what it held (its open buckets'), as any crash should."""
        consumed = sum(await self.worker_samples("peerwatch_worker_frames_total"))
        unacked = sum(await self.worker_samples("peerwatch_worker_frames_unacked"))
        return await self.frames_committed() >= consumed - unacked

    async def frames_committed(self) -> int:
        """The frames topic's offsets the workers' consumer group has committed, summed
        over its partitions: how many frames a restarted worker is not sent again."""
        return await committed_offsets(
            self.env["PEERWATCH_KAFKA"].split("://", 1)[1],
            self.env["PEERWATCH_APP_ID"],
            self.env["PEERWATCH_TOPIC_FRAMES"],
        )


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA and a server certificate it signed for 127.0.0.1, and a
    client certificate it signed (mutual TLS) if one was asked for."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path | None = None
    client_key: Path | None = None


def make_tls_files(directory: Path, name: str = "server", client: str | None = None) -> TlsFiles:
    """A CA and a certificate for ``127.0.0.1`` / ``localhost`` (a day valid), as PEM files;
    and one for the ``client`` name, if given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def build(
        subject: str, issuer: str, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        build("peerwatch test CA", "peerwatch test CA", ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def signed(subject: str, server: bool) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        cert = build(subject, "peerwatch test CA", key)
        if server:
            cert = cert.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = cert.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        paths = directory / f"{subject}.pem", directory / f"{subject}.key"
        paths[0].write_bytes(
            cert.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        )
        paths[1].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return paths

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    client_cert, client_key = signed(client, server=False) if client else (None, None)
    return TlsFiles(directory / "ca.pem", *signed(name, server=True), client_cert, client_key)


def basic_header(user: str, password: str) -> str:
    """The ``Authorization`` value of HTTP basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def client_context(ca: Path, identity: TlsFiles | None = None) -> ssl.SSLContext:
    """A client TLS context that trusts only ``ca`` (and shows ``identity``'s client cert)."""
    context = ssl.create_default_context(cafile=str(ca))
    if identity is not None:
        if identity.client_cert is None or identity.client_key is None:
            raise ValueError("make_tls_files(..., client=NAME) makes a client certificate")
        context.load_cert_chain(identity.client_cert, identity.client_key)
    return context


async def alerts_in_alertmanager(url: str, group: str) -> list[dict]:
    """peerwatch's alerts for one peer group (tests share one Alertmanager)."""
    params = {"filter": ['source="peerwatch"', f'group="{group}"']}
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"{url}/api/v2/alerts", params=params)
    reply.raise_for_status()
    return reply.json()


async def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[dict]:
    """Every message of ``topic`` from the start up to its end offsets when called (every
    record acknowledged before the call), as JSON: no wait for silence."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()  # without a group: every partition assigned once started
    try:
        return [json.loads(m.value) async for m in records_to_end(consumer, timeout_s)]
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group_id: str, topic: str) -> int:
    """The sum of ``group_id``'s committed offsets on ``topic``'s partitions (0: none)."""
    return sum(o for o in (await committed(bootstrap, group_id, topic)).values() if o > 0)


async def read_alert_records(bootstrap: str, topic: str) -> list[dict]:
    """The alert changes on the alerts topic: every record but the advisors' (those carry
    ``"record": "advice"``; docs/architecture.md, "Job lifecycle events, retry advice and
    the node ledger")."""
    return [r for r in await read_topic(bootstrap, topic) if r.get("record") != ADVICE_RECORD]


async def metric_samples(port: int, name: str) -> list[float]:
    """The values of ``name``'s series (labelled or not) on the /metrics page at ``port``."""
    async with httpx.AsyncClient() as client:
        page = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    return [
        float(ln.rsplit(" ", 1)[1])
        for ln in page.splitlines()
        if ln.startswith((name + "{", name + " "))
    ]


async def metric(port: int, name: str) -> float:
    """The sum of ``name``'s series on the /metrics page at ``port`` (0 when absent)."""
    return sum(await metric_samples(port, name))


async def wait_for(
    fetch: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str,
    every_s: float = 0.5,
    until: Callable[[T], bool] = bool,
) -> T:
    """Poll the async ``fetch`` until ``until`` holds for its value (by default: the value
    is truthy); that value, or fail with the last one seen. Where a test would sleep."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await fetch()
        if until(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout_s:.0f} s waiting for {what} (last value {value!r:.300})"
            )
        await asyncio.sleep(every_s)


def at_least(count: int) -> Callable[[Any], bool]:
    """``wait_for``'s ``until`` for a count: a number, or the length of what was fetched."""
    return lambda value: (value if isinstance(value, int) else len(value)) >= count


def epoch_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


def openmetrics(series: Iterable[tuple[Mapping[str, str], Sequence[int], Sequence[float]]]) -> str:
    """The series (labels with ``__name__``, timestamps in ms, values) as OpenMetrics text,
    each metric's series together (timestamps in s)."""
    by_name: dict[str, list[str]] = {}
    for labels, stamps, values in series:
        name = labels["__name__"]
        pairs = ",".join(
            f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__"
        )  # the simulator's label values hold no quotes, backslashes or newlines
        by_name.setdefault(name, []).extend(
            f"{name}{{{pairs}}} {v!r} {t / 1000:.3f}" for t, v in zip(stamps, values, strict=True)
        )
    return "\n".join(line for lines in by_name.values() for line in lines) + "\n# EOF\n"


@contextmanager
def backfilled_prometheus(
    workdir: Path,
    series: Iterable[tuple[Mapping[str, str], Sequence[int], Sequence[float]]],
    config: dict[str, Any],
) -> Iterator[str]:
    """Debian's Prometheus whose TSDB holds ``series`` as blocks backfilled by promtool
    (``tsdb create-blocks-from openmetrics``); its URL."""
    source = workdir / "history.om"
    source.write_text(openmetrics(series))
    data = workdir / "prometheus" / "data"  # where ``Prometheus`` keeps its TSDB
    data.mkdir(parents=True)
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with prometheus_running(workdir, config) as server:
        yield server.url


@contextmanager
def prometheus_running(workdir: Path, config: dict[str, Any]) -> Iterator[Prometheus]:
    """Debian's Prometheus with ``config`` (a prometheus.yml as a mapping), stopped after."""
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    with started(Prometheus(workdir / "prometheus", path)) as server:
        yield server
