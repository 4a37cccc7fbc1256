"""The shipped Alertmanager config is valid and routes peerwatch alerts as documented."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"


def _amtool(*args: str) -> str:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool (Debian prometheus-alertmanager) is not installed")
    done = subprocess.run([amtool, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_config_passes_amtool() -> None:
    assert "SUCCESS" in _amtool("check-config", str(CONFIG))


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["alertname=PeerwatchXid", "severity=critical"], "oncall"),
        (["alertname=PeerwatchNodeCollapse", "severity=critical"], "oncall"),
        (["alertname=PeerwatchGroupDegraded", "severity=warning"], "default"),
        (["alertname=PeerwatchNodeDeviation", "severity=warning"], "default"),
    ],
)
def test_routes(labels: list[str], receiver: str) -> None:
    out = _amtool(
        "config", "routes", "test", f"--config.file={CONFIG}", "source=peerwatch", *labels
    )
    assert out.strip() == receiver
