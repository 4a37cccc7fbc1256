"""The service runs without the lab: a tree with streams/lab removed (what the service
image carries) still starts the service's commands, and the lab's commands say what is
missing instead of a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _service_tree(tmp_path: Path) -> Path:
    for package in ("streams", "detectors"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.rmtree(tmp_path / "streams" / "lab")
    return tmp_path


def _peerwatch(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_the_lab_the_service_starts_and_lab_commands_say_why(tmp_path: Path) -> None:
    tree = _service_tree(tmp_path)
    settings = _peerwatch(tree, "settings")
    assert settings.returncode == 0, settings.stderr
    assert "group_labels" in settings.stdout
    for command in ("demo", "evaluate"):
        lab = _peerwatch(tree, command)
        assert lab.returncode == 1
        assert f"peerwatch {command} is lab tooling" in lab.stderr
        assert "Traceback" not in lab.stderr
