"""What the whole suite shares, unit and integration tests alike.

- Run order: the tests marked ``long`` (tens of seconds each, most of them waiting on
  real processes) first, so that under xdist (``-n``, ``--dist loadgroup``: one test at
  a time to whichever worker is free) they overlap each other and the short tests fill
  the gaps, instead of one of them starting last and running alone.
- Each test's own data directory (``PEERWATCH_DATADIR``): the ingest's write-ahead log
  lives under it by default.
- One Apache Kafka for all xdist workers: the controller starts it while the workers
  collect and hands it to them as ``PEERWATCH_TEST_KAFKA`` (each worker's own broker
  cost a JVM start and a JVM's idle CPU, four times); ``PEERWATCH_TEST_KAFKA_STATE``
  names the file that says when it is ready, or why it did not start.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from streams.lab.launchers import KafkaKRaft

UNIT = Path(__file__).parent / "unit"
_SHARED = pytest.StashKey[tuple["KafkaKRaft", Path]]()  # the controller's broker, its dir


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable


@pytest.fixture(autouse=True)
def _datadir_of_its_own(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every test's processes (in-process or children, which inherit the environment) keep
    their data in a directory of the test's own, not in ``peerwatch-data/`` of the working
    directory: the ingest's write-ahead log is on by default there, locked by one ingest
    and replayed by the next, so tests sharing it would block or feed each other. A test
    that names ``datadir`` (or ``ingest_wal_dir``) itself wins over this."""
    name = request.node.name[:40].translate(str.maketrans("[]/:", "____"))
    monkeypatch.setenv("PEERWATCH_DATADIR", str(tmp_path_factory.mktemp(f"datadir-{name}")))


def _wants_shared_kafka(config: pytest.Config) -> bool:
    """The xdist controller of a run that may hold integration tests, with no broker named."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return False
    if os.environ.get("PEERWATCH_TEST_KAFKA") or "not integration" in config.option.markexpr:
        return False
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    return not paths or not all(path.is_relative_to(UNIT) for path in paths)


def pytest_configure(config: pytest.Config) -> None:
    if not _wants_shared_kafka(config):
        return
    from streams.lab.launchers import KafkaKRaft, ServiceError

    workdir = Path(tempfile.mkdtemp(prefix="peerwatch-test-kafka-"))
    kafka, state = KafkaKRaft(workdir / "broker"), workdir / "state"

    def start() -> None:
        try:
            kafka.start()
        except ServiceError as exc:
            said = f"Apache Kafka (shared by the xdist workers) did not start: {exc}"
        else:
            said = "ready"
        written = state.with_suffix(".tmp")
        written.write_text(said)
        written.rename(state)  # whole or not at all, for the workers polling it

    os.environ["PEERWATCH_TEST_KAFKA"] = kafka.bootstrap  # the workers inherit it
    os.environ["PEERWATCH_TEST_KAFKA_STATE"] = str(state)
    threading.Thread(target=start, name="shared-kafka", daemon=True).start()
    config.stash[_SHARED] = (kafka, workdir)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SHARED in config.stash:
        kafka, workdir = config.stash[_SHARED]
        kafka.stop()
        shutil.rmtree(workdir, ignore_errors=True)
