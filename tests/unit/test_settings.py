"""streams.settings: defaults, PEERWATCH_* environment, YAML/TOML files, precedence, validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from streams.settings import Settings, load_settings, secret_setting_names


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PEERWATCH_* variable of the developer's shell (or CI) leaks into these tests."""
    for name in list(os.environ):
        if name.upper().startswith("PEERWATCH_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- defaults -----------------------------------------------------------------------------------


def test_defaults_without_file_environment_or_flags() -> None:
    s = load_settings()
    assert s.kafka == "kafka://127.0.0.1:9092"
    assert s.topic_frames == "peerwatch.frames"
    assert s.node_labels == ["instance", "hostname", "Hostname"]
    assert s.group_labels == ["cluster"]
    assert s.features is None
    assert (s.bucket_s, s.grace_s, s.membership_buckets) == (30, 20.0, 20)
    assert s.max_body_bytes == 16 * 1024 * 1024
    assert s.alertmanager_url == "http://127.0.0.1:9093"
    assert s.grafana_url is None and s.grafana_token is None


def test_bucket_ms_is_bucket_s_in_milliseconds() -> None:
    assert Settings(bucket_s=15).bucket_ms == 15_000


def test_broker_host_port_strips_the_scheme_of_every_broker() -> None:
    s = Settings(kafka="kafka://a:9092;kafka://b:9093")
    assert s.broker_host_port == "a:9092,b:9093"


# --- environment --------------------------------------------------------------------------------


def test_environment_sets_scalar_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_BUCKET_S", "15")
    monkeypatch.setenv("PEERWATCH_GRACE_S", "7.5")
    monkeypatch.setenv("PEERWATCH_TOPIC_FRAMES", "frames.test")
    s = load_settings()
    assert (s.bucket_s, s.grace_s, s.topic_frames) == (15, 7.5, "frames.test")


def test_environment_list_values_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_GROUP_LABELS", '["train_job"]')
    monkeypatch.setenv("PEERWATCH_FEATURES", '["gpu_util", "intr_rate"]')
    s = load_settings()
    assert s.group_labels == ["train_job"]
    assert s.features == ["gpu_util", "intr_rate"]


def test_environment_empty_alertmanager_url_turns_alerting_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEERWATCH_ALERTMANAGER_URL", "")
    assert load_settings().alertmanager_url is None


def test_environment_secret_is_not_shown_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_GRAFANA_TOKEN", "glsa_very_secret")
    s = load_settings()
    assert s.grafana_token is not None
    assert s.grafana_token.get_secret_value() == "glsa_very_secret"
    assert "glsa_very_secret" not in repr(s)


def test_environment_list_that_is_not_json_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_GROUP_LABELS", "train_job")
    with pytest.raises(ValueError, match="group_labels"):
        load_settings()


# --- config files -------------------------------------------------------------------------------


def test_yaml_file_sets_values(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "peerwatch.yaml",
        "bucket_s: 10\ngroup_labels: [train_job, cluster]\nalertmanager_url: http://am:9093\n",
    )
    s = load_settings(path)
    assert s.bucket_s == 10
    assert s.group_labels == ["train_job", "cluster"]
    assert s.alertmanager_url == "http://am:9093"


def test_toml_file_sets_values(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "peerwatch.toml",
        'bucket_s = 10\ngroup_labels = ["train_job"]\nkafka = "kafka://k1:9092"\n',
    )
    s = load_settings(path)
    assert (s.bucket_s, s.group_labels, s.kafka) == (10, ["train_job"], "kafka://k1:9092")


def test_file_keys_may_use_dashes(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.yaml", "bucket-s: 10\nmax-body-bytes: 4096\n")
    s = load_settings(path)
    assert (s.bucket_s, s.max_body_bytes) == (10, 4096)


def test_empty_yaml_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "empty.yaml", "")) == Settings()


def test_config_path_from_environment_is_used_without_explicit_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "peerwatch.toml", "bucket_s = 12\n")
    monkeypatch.setenv("PEERWATCH_CONFIG", str(path))
    assert load_settings().bucket_s == 12


def test_explicit_config_beats_config_path_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PEERWATCH_CONFIG", str(write(tmp_path, "env.toml", "bucket_s = 12\n")))
    assert load_settings(write(tmp_path, "flag.toml", "bucket_s = 13\n")).bucket_s == 13


def test_empty_alertmanager_url_in_file_turns_alerting_off(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.yaml", 'alertmanager_url: ""\n')
    assert load_settings(path).alertmanager_url is None


# --- precedence: defaults < file < environment < flags -------------------------------------------


def test_environment_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "peerwatch.yaml", "bucket_s: 10\ngrace_s: 5\n")
    monkeypatch.setenv("PEERWATCH_BUCKET_S", "20")
    s = load_settings(path)
    assert s.bucket_s == 20  # from the environment
    assert s.grace_s == 5.0  # the file still sets what the environment does not


def test_environment_list_beats_file_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "peerwatch.toml", 'group_labels = ["cluster"]\n')
    monkeypatch.setenv("PEERWATCH_GROUP_LABELS", '["train_job"]')
    assert load_settings(path).group_labels == ["train_job"]


def test_empty_environment_value_beats_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "peerwatch.yaml", "alertmanager_url: http://am:9093\n")
    monkeypatch.setenv("PEERWATCH_ALERTMANAGER_URL", "")
    assert load_settings(path).alertmanager_url is None


def test_flags_beat_environment_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "peerwatch.yaml", "bucket_s: 10\n")
    monkeypatch.setenv("PEERWATCH_BUCKET_S", "20")
    assert load_settings(path, bucket_s=40).bucket_s == 40


def test_flags_beat_file(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.yaml", "group_labels: [cluster]\n")
    assert load_settings(path, group_labels=["train_job"]).group_labels == ["train_job"]


def test_none_flags_are_not_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "peerwatch.yaml", "bucket_s: 10\n")
    monkeypatch.setenv("PEERWATCH_GRACE_S", "3")
    s = load_settings(path, bucket_s=None, grace_s=None, ingest_port=None)
    assert (s.bucket_s, s.grace_s, s.ingest_port) == (10, 3.0, 9201)


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bucket_s", 0),
        ("grace_s", -1.0),
        ("membership_buckets", 0),
        ("topic_partitions", 0),
        ("ingest_port", 70_000),
        ("max_body_bytes", 100),
        ("ingest_idle_flush_s", 0.0),
        ("alert_resend_s", 0.0),
        ("node_labels", []),
        ("node_labels", ["instance", ""]),
        ("group_labels", []),
    ],
)
def test_invalid_flag_value_is_an_error_naming_the_setting(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        load_settings(**{field: value})


def test_invalid_environment_value_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEERWATCH_BUCKET_S", "0")
    with pytest.raises(ValidationError, match="bucket_s"):
        load_settings()


def test_invalid_file_value_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.yaml", "node_labels: []\n")
    with pytest.raises(ValidationError, match="node_labels"):
        load_settings(path)


def test_unknown_key_in_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.toml", "bucket_s = 30\nbukcet_size = 10\n")
    with pytest.raises(ValidationError, match="bukcet_size"):
        load_settings(path)


def test_unknown_flag_is_an_error_naming_it() -> None:
    with pytest.raises(ValidationError, match="no_such_setting"):
        load_settings(no_such_setting=1)


def test_file_that_is_not_a_mapping_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "peerwatch.yaml", "- bucket_s\n- 10\n")
    with pytest.raises(ValueError, match=r"peerwatch\.yaml.*mapping"):
        load_settings(path)


# --- secrets ------------------------------------------------------------------------------------


def test_every_secret_setting_has_a_file_variant() -> None:
    names = secret_setting_names()
    assert {"ingest_bearer_token", "alertmanager_password", "grafana_token"} <= set(names)
    assert all(f"{name}_file" in Settings.model_fields for name in names)


def test_a_secret_file_fills_its_setting_without_the_trailing_newline(tmp_path: Path) -> None:
    s = Settings(grafana_token_file=write(tmp_path, "token", "glsa_abc\n"))
    assert s.grafana_token is not None and s.grafana_token.get_secret_value() == "glsa_abc"


@pytest.mark.parametrize(
    ("content", "error"), [(None, "FileNotFoundError"), ("", "is empty"), ("\n", "is empty")]
)
def test_a_secret_file_that_cannot_be_used_is_an_error_naming_the_file(
    tmp_path: Path, content: str | None, error: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValidationError, match=f"grafana_token_file {path}:? {error}"):
        Settings(grafana_token_file=path)


def test_a_secret_and_its_file_together_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="both set"):
        Settings(grafana_token="a", grafana_token_file=write(tmp_path, "t", "b"))


@pytest.mark.parametrize(
    "values",
    [
        {"ingest_tls_cert_file": "/c.pem"},
        {"ingest_basic_auth_username": "prom"},
        {"alertmanager_password": "pw"},
        {"grafana_username": "admin"},
    ],
)
def test_half_a_pair_is_an_error(values: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="go together"):
        Settings(**values)  # type: ignore[arg-type]


def test_a_client_ca_without_https_is_an_error() -> None:
    with pytest.raises(ValidationError, match="needs ingest_tls_cert_file"):
        Settings(ingest_tls_client_ca_file="/ca.pem")  # type: ignore[arg-type]


def test_a_sink_takes_one_kind_of_auth() -> None:
    with pytest.raises(ValidationError, match="one kind of auth"):
        Settings(alertmanager_username="am", alertmanager_password="a", alertmanager_token="b")


def test_redacted_masks_secrets_and_url_passwords() -> None:
    s = Settings(
        kafka="kafka://u:kpw@a:9092;kafka://b:9093",
        alertmanager_url="http://am:ampw@127.0.0.1:9093/",
        grafana_token="gtok",
        ingest_basic_auth_username="prom",
        ingest_basic_auth_password="ipw",
    )
    dump = s.redacted()
    assert not {"kpw", "ampw", "gtok", "ipw"} & set(str(dump).replace("'", " ").split())
    assert dump["alertmanager_url"] == "http://am:**********@127.0.0.1:9093/"
    assert dump["kafka"] == "kafka://u:**********@a:9092;kafka://b:9093"
    assert dump["grafana_token"] == "**********" and dump["ingest_basic_auth_username"] == "prom"


def test_an_empty_username_is_unset_so_its_password_alone_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEERWATCH_INGEST_BASIC_AUTH_USERNAME", "")
    monkeypatch.setenv("PEERWATCH_INGEST_BASIC_AUTH_PASSWORD", "pw")
    with pytest.raises(ValidationError, match="go together"):
        load_settings()


# --- the ingest's write-ahead log ---------------------------------------------------------------


def test_the_write_ahead_log_is_on_by_default_under_the_datadir() -> None:
    assert Settings().ingest_wal_path == Path("peerwatch-data") / "ingest-wal"
    assert Settings(datadir=Path("/var/lib/p")).ingest_wal_path == Path("/var/lib/p/ingest-wal")
    assert Settings(ingest_wal_dir=Path("/wal")).ingest_wal_path == Path("/wal")
    assert Settings().ingest_wal_max_bytes == 1 << 30


def test_ingest_wal_false_turns_the_log_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEERWATCH_INGEST_WAL", "false")
    assert load_settings().ingest_wal_path is None
    assert load_settings(ingest_wal_dir=Path("/wal")).ingest_wal_path is None  # false wins


def test_an_empty_wal_directory_is_an_error_not_the_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEERWATCH_INGEST_WAL_DIR", "")
    with pytest.raises(ValidationError, match=r"ingest_wal_dir\n.*set ingest_wal to false"):
        load_settings()


def test_a_write_ahead_log_that_cannot_hold_two_bodies_is_an_error() -> None:
    with pytest.raises(ValidationError, match=r"must be at least twice max_body_bytes \(16384\)"):
        Settings(max_body_bytes=16384, ingest_wal_max_bytes=32767)
    Settings(max_body_bytes=16384, ingest_wal_max_bytes=32768)
    Settings(max_body_bytes=16384, ingest_wal_max_bytes=4096, ingest_wal=False)
