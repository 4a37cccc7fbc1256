"""bench.overload leaves no child process behind when it is stopped by a signal.

The broker and the ingest lead process groups of their own (a Ctrl-C in the
terminal must not hit them before the bench decides), so a bench that dies
without its cleanup -- SIGTERM's default action, e.g. from ``timeout`` or a job
runner killing the bench's group -- left them running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PIDS = re.compile(r"pids: broker (\d+), ingest (\d+)")
LOAD_PID = re.compile(r"pids: load generator (\d+)")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_broker_the_ingest_and_the_load_generator_too(
    sig: signal.Signals,
) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench.overload", "--broker", "embedded", "--rounds", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    children: list[int] = []
    try:
        assert bench.stdout is not None
        deadline = time.monotonic() + 120
        for line in bench.stdout:
            if m := PIDS.search(line):
                children = [int(m[1]), int(m[2])]
            elif m := LOAD_PID.search(line):
                children.append(int(m[1]))
                break
            assert time.monotonic() < deadline, "the bench did not start its children"
        assert len(children) == 3 and all(map(_alive, children))
        bench.send_signal(sig)
        bench.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while any(map(_alive, children)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        for pid in [bench.pid, *children]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        bench.wait()
