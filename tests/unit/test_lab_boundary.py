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


# The tree under test, not the checkout: an editable install's finder maps every
# ``streams.*`` name to the checkout (streams.lab included) whatever sys.path says.
_ONLY_THE_TREE = (
    "import sys, runpy; "
    "sys.meta_path[:] = [f for f in sys.meta_path "
    "if not getattr(f, '__module__', '').startswith('__editable__')]; "
)


def _python(tree: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-c", _ONLY_THE_TREE + code, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _peerwatch(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _python(
        tree,
        "sys.argv = ['peerwatch', *sys.argv[1:]]; runpy.run_module('streams', run_name='__main__')",
        *args,
    )


def test_without_the_lab_the_service_starts_and_lab_commands_say_why(tmp_path: Path) -> None:
    tree = _service_tree(tmp_path)
    where = _python(
        tree,
        "import importlib.util, streams; "
        "print(streams.__file__, importlib.util.find_spec('streams.lab'))",
    )
    assert where.stdout.split() == [str(tree / "streams" / "__init__.py"), "None"], where
    settings = _peerwatch(tree, "settings")
    assert settings.returncode == 0, settings.stderr
    assert "group_labels" in settings.stdout
    for command in ("demo", "evaluate"):
        lab = _peerwatch(tree, command)
        assert lab.returncode == 1
        assert f"peerwatch {command} is lab tooling" in lab.stderr
        assert "Traceback" not in lab.stderr
