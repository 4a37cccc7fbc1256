"""repo_root finds the checkout's scripts (it broke when the launchers moved to streams/lab)."""

from __future__ import annotations

from streams.lab.launchers import repo_root


def test_repo_root_holds_the_kafka_script_and_the_streams_package() -> None:
    root = repo_root()
    assert (root / "scripts" / "kafka" / "kafka-kraft").is_file()
    assert (root / "streams" / "lab" / "launchers.py").is_file()
