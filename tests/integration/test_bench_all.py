"""``python -m bench --smoke``, through the one-command runner, for the bench no other test
runs: the end to end latency bench. Correctness only: it exits non-zero unless every
fault's alert reached Alertmanager and was traced; no figure is asserted. The worker,
worker-kafka and frame-codec benches have small tests of their own (test_bench_worker,
test_bench_worker_kafka, test_bench_frame_codec) and the evaluation suite has its own;
the ingest bench's smoke size takes about a minute on a loaded 2-core machine, beyond
this suite's budget (``python -m bench --smoke`` runs it)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.long
def test_the_runner_runs_the_e2e_bench_at_smoke_size(kafka_bootstrap: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "e2e", "--kafka", kafka_bootstrap],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    summary = run.stdout.rsplit("=== summary", 1)[1]
    assert "e2e" in summary and "FAILED" not in summary
    assert "processing (ack -> Alertmanager)" in run.stdout  # the e2e split was printed
