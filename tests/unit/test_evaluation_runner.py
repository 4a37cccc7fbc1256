"""The suite runner: stable result order whatever order the runs finish in, a
callback per finished run, and the same scores in parallel as in one process."""

from __future__ import annotations

import pytest

from streams.lab.evaluation.runner import run_suite
from streams.progress import progress

SMALL = ["gpu-slow-16", "nvlink-bus-fault-16"]  # the two 16-node scenarios: seconds each


@pytest.fixture(scope="module")
def serial():
    seen: list[str] = []
    results = run_suite(SMALL, [2000], jobs=1, on_done=lambda r: seen.append(r.scenario))
    return results, seen


def test_parallel_runs_come_back_in_the_order_asked_with_the_same_scores(serial):
    serial, _ = serial
    finished = []
    parallel = run_suite(SMALL, [2000], jobs=2, on_done=lambda r: finished.append(r.scenario))
    assert [r.scenario for r in parallel] == SMALL
    assert sorted(finished) == sorted(SMALL)
    assert [r.score for r in parallel] == [r.score for r in serial]


def test_the_serial_path_reports_each_run_as_it_finishes(serial):
    results, seen = serial
    assert seen == SMALL == [r.scenario for r in results]


def test_progress_counts_without_a_terminal(capsys):
    with progress(2, "runs") as advance:
        advance("a")
        advance("b")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # no bar drawn into pipes or CI logs
