"""streams.lab.launchers.peerwatch_env: the environment every launcher gives a peerwatch child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.lab.launchers import peerwatch_env

SHOW = (
    "import json; from streams.settings import load_settings; s = load_settings(); "
    "print(json.dumps([s.kafka, s.topic_frames, s.topic_alerts, s.topic_xid, s.group_labels, "
    "s.ingest_port, str(s.datadir), s.alert_resend_s, s.alertmanager_url]))"
)


def test_a_child_reads_the_settings_it_was_given(tmp_path: Path) -> None:
    env = peerwatch_env(
        "127.0.0.1:9092",
        topics="run-1",
        group_labels=["train_job", "job"],
        ingest_port=8123,
        datadir=tmp_path / "worker",
        alert_resend_s=2.5,
        alertmanager_url="",
    )
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("PEERWATCH_")}
    out = subprocess.run(
        [sys.executable, "-c", SHOW], env=clean | env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [
        "kafka://127.0.0.1:9092",
        "run-1-frames",
        "run-1-alerts",
        "run-1-xid",
        ["train_job", "job"],
        8123,
        str(tmp_path / "worker"),
        2.5,
        None,  # empty: no Alertmanager
    ]


def test_a_kafka_url_is_kept_and_topics_are_optional() -> None:
    assert peerwatch_env("kafka://broker:9093") == {"PEERWATCH_KAFKA": "kafka://broker:9093"}


def test_a_keyword_that_is_no_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="not settings: ingest_prot"):
        peerwatch_env("127.0.0.1:9092", ingest_prot=8080)
