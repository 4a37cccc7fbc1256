"""One typed settings object for every peerwatch process.

Precedence, lowest to highest: defaults < config file (YAML or TOML, given by
``--config`` or ``PEERWATCH_CONFIG``) < environment (``PEERWATCH_*``) < CLI
flags. Passed explicitly to whatever needs it; there is no global instance.
"""

from __future__ import annotations

import os
import re
import tomllib
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from detectors.advisors.checkpoint_interval import CheckpointIntervalParams
from detectors.advisors.checkpoint_io import CheckpointIoParams
from detectors.advisors.ledger import LedgerParams
from detectors.advisors.retry import RetryParams
from detectors.failslow.monitor import FailSlowParams
from detectors.features import DEFAULT_BUCKET_MS
from detectors.gpu_health import GpuHealthParams
from detectors.group import ScoringParams


class Settings(BaseSettings):
    # hide_input_in_errors: a model-level error would otherwise print every input, secrets too
    model_config = SettingsConfigDict(
        env_prefix="PEERWATCH_",
        env_nested_delimiter="__",  # PEERWATCH_SCORING__Z_EVIDENCE=5: one field of a section
        extra="forbid",
        hide_input_in_errors=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # CLI flags > environment > config file, merged field by field, so that one field
        # of a section from the environment overrides only that field of the file's section
        return (init_settings, env_settings, _ConfigFileSource(settings_cls))

    # Kafka
    kafka: str = Field("kafka://127.0.0.1:9092", description="broker URL(s), faust style")
    topic_frames: str = "peerwatch.frames"
    topic_alerts: str = "peerwatch.alerts"
    topic_xid: str = "peerwatch.xid"
    xid_log_wal_dir: Path | None = Field(
        None, description="xid-log: a line is on disk until Kafka acknowledged it (unset: off)"
    )
    topic_partitions: int = Field(4, ge=1)
    topic_replication: int = Field(1, ge=1, description="replication of topics peerwatch creates")
    app_id: str = "peerwatch"
    # Kafka security, for every client (streams.kafka.options builds aiokafka's and Faust's options)
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None
    kafka_password_file: Path | None = None
    kafka_ca_file: Path | None = Field(
        None, description="PEM CA bundle for the brokers' certificates; system CAs if unset"
    )
    kafka_cert_file: Path | None = Field(None, description="PEM client certificate: mutual TLS")
    kafka_key_file: Path | None = Field(None, description="PEM private key of the client cert")

    # logs: "json" for one JSON object per line (every process, library lines included)
    log_format: Literal["text", "json"] = "text"

    # identity of a node and of its peer group, from labels
    node_labels: list[str] = ["instance", "hostname", "Hostname"]
    group_labels: list[str] = ["cluster"]
    membership_hold_buckets: int = Field(
        2, ge=0, description="a node keeps its group this many buckets without its label"
    )
    role_labels: list[str] = Field([], description="first present names a node's role")
    # the scheduler's job -> nodes events (streams.ingest.membership): they outrank labels
    membership_file: Path | None = Field(None, description="JSON-lines file of job events")
    topic_jobs: str | None = Field(None, description="Kafka topic of job events (key = job)")
    topic_job_attempts: str | None = Field(
        None,
        description="Kafka topic of job lifecycle events for the retry advisor and the node "
        "ledger (key = the job's peer group), e.g. peerwatch.jobs; off if unset",
    )
    # HA Prometheus pairs: one replica per cluster (Cortex / Mimir's HA tracker)
    replica_labels: list[str] = ["prometheus_replica", "__replica__"]
    ha_cluster_labels: list[str] = ["cluster"]
    ha_failover_s: float = Field(
        60.0, gt=0, description="elect another replica after this long without the elected one"
    )
    features: list[str] | None = Field(None, description="feature names to use; all if unset")
    feature_files: list[Path] = Field(
        [], description="extra feature catalogs (features.toml's shape), merged in order"
    )

    # time
    bucket_s: int = Field(
        DEFAULT_BUCKET_MS // 1000,
        ge=1,
        description="bucket size of the ingest's frames, the worker's windows and every detector",
    )
    grace_s: float = Field(20.0, ge=0, description="wait this long for late nodes before scoring")
    membership_buckets: int = Field(
        20, ge=1, description="a node is expected if seen this recently"
    )

    # ingest
    ingest_host: str = "127.0.0.1"
    ingest_port: int = Field(9201, ge=0, le=65535)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    ingest_grace_s: float = Field(
        15.0, ge=0, description="a bucket's frames leave this long after its end, in event time"
    )
    ingest_idle_flush_s: float = Field(
        45.0, gt=0, description="close every open bucket after this long without any sample"
    )
    ingest_max_backlog_frames: int = Field(
        200_000, ge=1, description="above this many unsent frames, answer 503"
    )
    ingest_max_concurrent_requests: int = Field(
        64, ge=1, description="writes in progress beyond this get 503 (Prometheus retries)"
    )
    ingest_body_timeout_s: float = Field(
        30.0, gt=0, description="a write whose body takes longer to arrive gets 503"
    )
    ingest_access_log: bool = Field(
        False,
        description="one log line per HTTP request (a fleet writes thousands a second; "
        "off: errors and refusals are logged either way)",
    )
    # cardinality guards (issue 9): past a limit, the samples of a *new* series / node /
    # group member drop, counted in peerwatch_ingest_samples{outcome=*_limit} and logged
    ingest_decoder: Literal["auto", "native", "python"] = Field(
        "auto",
        description="remote_write decoder: native (compiled, native/), python, or auto "
        "(native if installed)",
    )
    ingest_max_series_per_request: int = Field(
        500_000, ge=1, description="a write with more series gets 400 (Prometheus sends ~2,000)"
    )
    ingest_max_series_per_node: int = Field(
        20_000, ge=1, description="series tracked per node (a B200 node sends ~800)"
    )
    ingest_max_nodes: int = Field(200_000, ge=1, description="nodes the ingest tracks")
    ingest_max_nodes_per_group: int = Field(5_000, ge=1, description="nodes per peer group")
    ingest_max_features_per_group: int = Field(
        2_000, ge=1, description="frame features per peer group (per-GPU ones counted per GPU)"
    )
    ingest_wal: bool = Field(
        True,
        description="keep each body answered 204 in a write-ahead log until Kafka has its "
        "frames: written and fsynced (a new segment's directory entry too) before the reply, "
        "replayed on start, so a crash, a kill "
        "or a stop while Kafka is away loses none of it, and while Kafka is away writes are "
        "taken (204) until the log is full. false: memory only -- a crash or kill loses the "
        "open buckets and every frame not yet on Kafka, and writes get 503 while Kafka is "
        "unreachable",
    )
    ingest_wal_dir: Path | None = Field(
        None,
        description="the write-ahead log's directory (unset: <datadir>/ingest-wal); it must "
        "be writable at start, and one ingest holds it (locked)",
    )
    ingest_wal_max_bytes: int = Field(
        1 << 30,
        ge=4096,
        description="what the write-ahead log may hold on disk; when it cannot take one more "
        "body of max_body_bytes, writes get 503 (peerwatch_ingest_wal_refused_total"
        '{reason="full"}) until Kafka has taken frames and their segments went',
    )
    # who may write (streams.ingest.security): TLS, and a bearer token and/or a basic-auth pair;
    # every secret below can also come from a file: the same name with ``_file``
    ingest_tls_cert_file: Path | None = Field(None, description="PEM certificate (chain): HTTPS")
    ingest_tls_key_file: Path | None = Field(None, description="PEM private key of the cert")
    ingest_tls_client_ca_file: Path | None = Field(
        None, description="clients must present a certificate this CA signed (mutual TLS)"
    )
    ingest_bearer_token: SecretStr | None = Field(
        None, description="writes must send Authorization: Bearer <token>"
    )
    ingest_bearer_token_file: Path | None = None
    ingest_basic_auth_username: str | None = None
    ingest_basic_auth_password: SecretStr | None = None
    ingest_basic_auth_password_file: Path | None = None

    # worker
    worker_web_host: str = Field(
        "127.0.0.1", description="worker /metrics, /-/healthy, /-/ready address (0.0.0.0: all)"
    )
    worker_web_port: int = Field(6066, ge=0, le=65535)
    datadir: Path = Path("peerwatch-data")
    outbox_dir: Path | None = Field(
        None, description="journal of undelivered alerts (default: <datadir>/outbox)"
    )
    store: str = Field(
        "memory://",
        description="table store: memory:// (rebuilt from the changelog at each start) or "
        "rocksdb:// (files under datadir; a restart reads only the changelog's tail)",
    )
    # Default 1: with 4, the buckets re-scored after a rebalance are scored by two workers
    # (the scale-out and chaos tests' exactly-once checks fail; nothing is lost); a fleet
    # that counts scored buckets at least once can take 4 (docs/configuration.md).
    snapshot_every_buckets: int = Field(
        1,
        ge=1,
        description="write a group's snapshot to the group-state table every this many "
        "buckets (aligned on the bucket index, at once on an alert change or advice, and "
        "when the group ends), not after each: its encoding and changelog bytes were a "
        "quarter of the worker's CPU at fleet scale. A frame is acked only once a written "
        "snapshot covers its bucket, so a crash or rebalance loses nothing; the successor "
        "re-scores up to this many buckets per group from Kafka (counted and logged as "
        "scored twice; alerts they change are re-sent only if the crash fell between "
        "their send and the snapshot, as with 1)",
    )

    # XID catalog: "nvidia" (NVIDIA's resolution buckets) or "report" (the
    # source report's simpler mapping), plus an optional operator override file
    xid_profile: str = "nvidia"
    xid_overrides: Path | None = None

    # alert outputs; credentials in a URL's userinfo work too (sent as basic auth)
    alertmanager_url: str | None = "http://127.0.0.1:9093"
    alertmanager_username: str | None = None
    alertmanager_password: SecretStr | None = None
    alertmanager_password_file: Path | None = None
    alertmanager_token: SecretStr | None = None
    alertmanager_token_file: Path | None = None
    alertmanager_ca_file: Path | None = Field(None, description="PEM CA bundle to verify HTTPS")
    alert_resend_s: float = Field(60.0, gt=0)
    grafana_url: str | None = None
    grafana_token: SecretStr | None = None
    grafana_token_file: Path | None = None
    grafana_username: str | None = None
    grafana_password: SecretStr | None = None
    grafana_password_file: Path | None = None
    grafana_ca_file: Path | None = Field(None, description="PEM CA bundle to verify HTTPS")
    grafana_dashboard_uid: str | None = Field(
        "peerwatch",
        description="annotate this dashboard (the shipped deploy/grafana/peerwatch.json's uid); "
        "empty: organisation-wide, found by tags",
    )
    # peerwatch backtest: the history server's bearer token (VictoriaMetrics behind vmauth,
    # a Prometheus behind an auth proxy); sent per request, never shown
    backtest_bearer_token: SecretStr | None = None
    backtest_bearer_token_file: Path | None = None
    backtest_timeout_s: float = Field(120.0, gt=0, description="per history request")
    # links in every alert (streams.sinks.payloads.AlertLinks)
    runbook_base_url: str = Field(
        "docs/runbooks",
        description="where docs/runbooks is browsable; an alert links <this>/<alertname>.md",
    )
    dashboard_url: str | None = Field(
        None,
        description="the Grafana dashboard's URL: an alert's generatorURL, filtered to its "
        "group and node (var-group, var-node); the runbook if unset",
    )

    # Detector parameters, one section per family: a table in the config file
    # (``scoring: {z_evidence: 5}``) or one field from the environment
    # (PEERWATCH_SCORING__Z_EVIDENCE=5). The defaults and the checks are the
    # detectors' own parameter dataclasses'.
    scoring: ScoringParams = Field(
        default_factory=ScoringParams,
        description="peer scoring: fusion, lifecycle, group-shift guard, learned baselines, "
        "multivariate model, populations, phases (detectors.group.ScoringParams)",
    )
    gpu_health: GpuHealthParams = Field(
        default_factory=GpuHealthParams,
        description="per-GPU health: XID hold, gauge, escalation, row remaps "
        "(detectors.gpu_health.GpuHealthParams)",
    )
    failslow: FailSlowParams = Field(
        default_factory=FailSlowParams,
        description="fail-slow: change points, cycles, localisation, mitigation, SLO "
        "(detectors.failslow.monitor.FailSlowParams)",
    )
    # advisors: recommendations on peerwatch.alerts and /metrics, never paged
    checkpoint_io: CheckpointIoParams = Field(
        default_factory=CheckpointIoParams,
        description="checkpoint I/O advisor: storage maxima, queue-dominated share "
        "(detectors.advisors.checkpoint_io.CheckpointIoParams)",
    )
    checkpoint_interval: CheckpointIntervalParams = Field(
        default_factory=CheckpointIntervalParams,
        description="checkpoint interval advice: MTBF prior, how far from Young/Daly is off "
        "(detectors.advisors.checkpoint_interval.CheckpointIntervalParams)",
    )
    retry: RetryParams = Field(
        default_factory=RetryParams,
        description="retry advisor: backoff, caps on identical and consecutive failures, XID "
        "action to step (detectors.advisors.retry.RetryParams)",
    )
    ledger: LedgerParams = Field(
        default_factory=LedgerParams,
        description="node-health ledger: window, concentration, chronic nodes, peer-rate flag "
        "for application-class XIDs (detectors.advisors.ledger.LedgerParams)",
    )

    @model_validator(mode="before")
    @classmethod
    def _bucket_only_from_bucket_s(cls, data: Any) -> Any:
        # the sections' bucket fields follow bucket_s; a second place to set it would disagree
        if isinstance(data, dict):
            for path in _BUCKET_FIELDS:
                node: Any = data
                for key in path[:-1]:
                    node = node.get(key) if isinstance(node, dict) else None
                if isinstance(node, dict) and path[-1] in node:
                    raise ValueError(f"{'.'.join(path)} follows bucket_s: set bucket_s instead")
        return data

    @model_validator(mode="after")
    def _detectors_follow_the_bucket(self) -> Settings:
        self.gpu_health = replace(self.gpu_health, bucket_ms=self.bucket_ms)
        self.failslow = self.failslow.for_bucket(float(self.bucket_s))
        return self

    @field_validator("dashboard_url")
    @classmethod
    def _absolute_url(cls, v: str | None) -> str | None:
        # it becomes the alerts' generatorURL: Alertmanager refuses alerts whose one is relative
        if v is not None and not re.match(r"https?://[^/\s]+", v):
            raise ValueError("must be an absolute http(s) URL")
        return v

    @field_validator("ingest_wal_dir", mode="before")
    @classmethod
    def _wal_dir_named(cls, v: object) -> object:
        # Path("") is the working directory: an empty value is a mistake, not a wish
        if v == "":
            raise ValueError(
                "empty: unset it for <datadir>/ingest-wal, or set ingest_wal to false to run "
                "without the write-ahead log"
            )
        return v

    @model_validator(mode="after")
    def _wal_holds_a_body(self) -> Settings:
        if self.ingest_wal and self.ingest_wal_max_bytes < 2 * self.max_body_bytes:
            raise ValueError(
                f"ingest_wal_max_bytes ({self.ingest_wal_max_bytes}) must be at least twice "
                f"max_body_bytes ({self.max_body_bytes}): the log is full when it cannot "
                "take one more body"
            )
        return self

    @field_validator("node_labels", "group_labels")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v or any(not s for s in v):
            raise ValueError("needs at least one non-empty label name")
        return v

    @field_validator(
        "alertmanager_url",
        "grafana_url",
        "dashboard_url",
        "grafana_dashboard_uid",
        "ingest_basic_auth_username",
        "alertmanager_username",
        "grafana_username",
        mode="before",
    )
    @classmethod
    def _empty_is_off(cls, v: object) -> object:
        return None if v == "" else v

    @model_validator(mode="after")
    def _secrets_from_files(self) -> Settings:
        """``<secret>_file`` fills ``<secret>`` with the file's text (a Kubernetes Secret
        mounted as a volume); the error names the file, never its content."""
        for name in secret_setting_names():
            path = getattr(self, f"{name}_file", None)
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"{name} and {name}_file are both set; set one")
            try:
                text = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{name}_file {path}: {type(exc).__name__}") from None
            if not text:
                raise ValueError(f"{name}_file {path} is empty")
            setattr(self, name, SecretStr(text))
        return self

    @model_validator(mode="after")
    def _pairs_complete(self) -> Settings:
        for first, second in (
            ("ingest_tls_cert_file", "ingest_tls_key_file"),
            ("ingest_basic_auth_username", "ingest_basic_auth_password"),
            ("alertmanager_username", "alertmanager_password"),
            ("grafana_username", "grafana_password"),
        ):
            if (getattr(self, first) is None) != (getattr(self, second) is None):
                raise ValueError(f"{first} and {second} go together; set both or neither")
        if self.ingest_tls_client_ca_file and not self.ingest_tls_cert_file:
            raise ValueError("ingest_tls_client_ca_file needs ingest_tls_cert_file (HTTPS)")
        for sink in ("alertmanager", "grafana"):
            if getattr(self, f"{sink}_password") and getattr(self, f"{sink}_token"):
                raise ValueError(f"{sink}_password and {sink}_token: one kind of auth per sink")
        return self

    @model_validator(mode="after")
    def _kafka_security_fits(self) -> Settings:
        # Each half-configured case would otherwise connect without the intended security.
        sasl = self.kafka_security_protocol.startswith("SASL_")
        tls = self.kafka_security_protocol.endswith("SSL")
        protocol = f"kafka_security_protocol is {self.kafka_security_protocol}"
        if sasl and not (self.kafka_username and self.kafka_password is not None):
            raise ValueError(f"{protocol}: set kafka_username and kafka_password(_file)")
        if not sasl and (self.kafka_username or self.kafka_password is not None):
            raise ValueError(f"kafka_username/password are set but {protocol}")
        if not tls and (self.kafka_ca_file or self.kafka_cert_file or self.kafka_key_file):
            raise ValueError(f"kafka_ca_file/cert_file/key_file are set but {protocol}")
        if (self.kafka_cert_file is None) != (self.kafka_key_file is None):
            raise ValueError("kafka_cert_file and kafka_key_file go together; set both or neither")
        return self

    @property
    def bucket_ms(self) -> int:
        return self.bucket_s * 1000

    @property
    def ingest_wal_path(self) -> Path | None:
        """The ingest's write-ahead log directory; None when the log is off (``ingest_wal``)."""
        if not self.ingest_wal:
            return None
        return self.ingest_wal_dir or self.datadir / "ingest-wal"

    def redacted(self) -> dict[str, Any]:
        """Every setting as plain data, secrets and URL passwords masked (a settings dump)."""
        # SecretStr dumps as "**********"; sets (a detector section's classes) sorted, or the
        # dump's order would follow the process's string hashing
        data = _sets_sorted(self.model_dump(), self.model_dump(mode="json"))
        for name, value in data.items():
            if isinstance(value, str):
                data[name] = _URL_PASSWORD.sub(r"\1:**********@", value)
        return data

    @property
    def broker_host_port(self) -> str:
        """``host:port,...`` without the ``kafka://`` scheme (for aiokafka)."""
        return ",".join(u.split("://", 1)[-1] for u in self.kafka.split(";"))


# detector fields that bucket_s sets (Settings._detectors_follow_the_bucket)
_BUCKET_FIELDS = (
    ("gpu_health", "bucket_ms"),
    ("failslow", "mitigation", "bucket_s"),
    ("failslow", "slo", "bucket_s"),
)


def _sets_sorted(python: Any, data: Any) -> Any:
    """``data`` (a JSON-mode dump) with every list that was a set in ``python`` sorted."""
    if isinstance(python, set | frozenset):
        return sorted(data, key=str)
    if isinstance(python, dict):
        return {k: _sets_sorted(python.get(k), v) for k, v in data.items()}
    if isinstance(python, list | tuple):
        return [_sets_sorted(p, d) for p, d in zip(python, data, strict=True)]
    return data


# ``scheme://user:password@`` in a URL (or each of a ``;``-separated list)
_URL_PASSWORD = re.compile(r"(://[^/@:;]*):[^/@;]*@")


def secret_setting_names() -> list[str]:
    """The settings that hold secrets (typed ``SecretStr``): never shown in full anywhere."""
    return [
        name
        for name, field in Settings.model_fields.items()
        if "SecretStr" in str(field.annotation)
    ]


_MAX_FILE_BYTES = 256 * 1024  # a settings file is a few KB; bounds the parsers' time
_MAX_BRACKET_DEPTH = 64


def _bracket_depth(raw: bytes) -> int:
    """Deepest nesting of ``[`` / ``{`` (quotes ignored: an upper bound is all it needs)."""
    depth = deepest = 0
    for byte in raw.translate(None, delete=bytes(set(range(256)) - set(b"[]{}"))):
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def _read_file(path: Path) -> dict[str, Any]:
    """The file's settings; ``ValueError`` naming the file for anything that is not a
    mapping of names to values (the CLI prints those; YAML's own errors are no ValueError)."""
    kind = "TOML" if path.suffix == ".toml" else "YAML"
    raw = path.read_bytes()
    if len(raw) > _MAX_FILE_BYTES:
        raise ValueError(f"{path}: {len(raw)} bytes; a settings file is at most {_MAX_FILE_BYTES}")
    if _bracket_depth(raw) > _MAX_BRACKET_DEPTH:
        # PyYAML's scanner is quadratic in flow nesting (5,000 '[' took 7 s before it
        # gave up): refuse before parsing. Settings nest two levels deep.
        raise ValueError(f"{path}: nested too deeply to be a settings file")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if kind == "TOML" else yaml.safe_load(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not valid {kind}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a settings file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of setting names to values")
    names = [k for k in data if not isinstance(k, str)]
    if names:
        raise ValueError(f"{path}: setting names are strings, got {names[0]!r}")
    return {k.replace("-", "_"): v for k, v in data.items()}


# the config file's values while load_settings builds a Settings (its lowest source)
_CONFIG_FILE_VALUES: ContextVar[dict[str, Any] | None] = ContextVar(
    "peerwatch_config_file", default=None
)


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The values ``load_settings`` read from the config file."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ hands over the whole mapping

    def __call__(self) -> dict[str, Any]:
        return _CONFIG_FILE_VALUES.get() or {}


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from file < environment < ``overrides`` (CLI flags; None = not given)."""
    path = config or (Path(p) if (p := os.environ.get("PEERWATCH_CONFIG")) else None)
    token = _CONFIG_FILE_VALUES.set(_read_file(path) if path else {})
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    finally:
        _CONFIG_FILE_VALUES.reset(token)
