"""Job lifecycle events in the backtest: handed to the same pipeline as the history's clock
passes them, so a failure after an XID gets the retry step the live worker would give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streams.backtest.events import EventsFileError
from streams.backtest.history import TimeRange
from streams.backtest.job_events import load_job_events
from streams.backtest.run import run_backtest
from streams.backtest.summary import Accumulator
from streams.settings import Settings
from tests.unit.test_backtest_run import MINUTE, T0, MemorySource, _simulated

GROUP = "llm-pretrain"  # the simulator's train_job
SETTINGS = Settings(group_labels=["train_job"])


def _job(attempt: int, state: str, ts: int, nodes: list[str]) -> dict[str, Any]:
    return {"job_id": f"sess-{attempt}", "name": "llm-42", "attempt": attempt, "state": state,
            "ts": ts, "nodes": nodes, "gang": len(nodes), "group": GROUP}  # fmt: skip


def _backtest(tmp_path: Path, lines: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """20 min of 6 nodes, an NVLink + bus fault on gpu066 at minute 12 (XID 145 in the
    12:00 bucket, 79 in the 12:30 one), with ``lines`` as the job-events file."""
    _, series = _simulated(20)
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    accumulator = Accumulator([], SETTINGS.bucket_ms)
    stats = run_backtest(
        MemorySource(series, SETTINGS.bucket_ms, 7 * MINUTE),
        TimeRange(T0, T0 + 20 * MINUTE),
        SETTINGS,
        accumulator.add,
        job_events=load_job_events(path),
        on_advice=accumulator.add_advice,
    )
    return accumulator.result(), stats.job_events


def _retry_steps(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (a["kind"], a["node"], a["bucket_ts"], a["figures"]["delay_s"], a["figures"]["failures"])
        for a in result["advice"]["items"]
        if a["advisor"] == "retry"
    ]


def _nodes() -> list[str]:
    _, series = _simulated(1)
    return sorted({labels["instance"].split(":")[0] for labels, _, _ in series})


def test_a_failure_after_the_xid_excludes_its_node_and_the_next_one_backs_off(
    tmp_path: Path,
) -> None:
    nodes = _nodes()
    assert "gpu066" in nodes and len(nodes) == 6
    failed_1, failed_2 = T0 + 14 * MINUTE, T0 + 18 * MINUTE
    spares = [n for n in nodes if n != "gpu066"] + ["gpu067"]
    result, handed = _backtest(tmp_path, [
        _job(1, "running", T0, nodes),
        _job(1, "failed", failed_1, nodes),  # the XID alerts of 12:00 and 12:30 are scored by then
        _job(2, "running", T0 + 15 * MINUTE, spares),
        _job(2, "failed", failed_2, spares),  # no XID on its nodes: a plain retry, backed off
        _job(3, "running", T0 + 25 * MINUTE, spares),  # after the range: not handed over
    ])  # fmt: skip
    assert handed == 4
    assert _retry_steps(result) == [
        ("exclude_nodes", "gpu066", failed_1, 600.0, 1),
        ("retry", None, failed_2, 1200.0, 2),
    ]
    exclude = next(a for a in result["advice"]["items"] if a["kind"] == "exclude_nodes")
    assert exclude["action"] == "EXCLUDE_AND_RETRY" and exclude["group"] == GROUP
    causes = sorted(exclude["figures"]["xids"].split(","))
    assert causes == ["145@gpu066:WORKFLOW_NVLINK5_ERR", "79@gpu066:WORKFLOW_NVLINK5_ERR"]


def test_a_failure_before_the_xid_bucket_is_scored_does_not_see_it(tmp_path: Path) -> None:
    """The live worker would not have scored the 12:00 bucket at 12:10 either."""
    nodes = _nodes()
    at = T0 + 12 * MINUTE + 10_000
    result, _ = _backtest(tmp_path, [_job(1, "running", T0, nodes), _job(1, "failed", at, nodes)])
    assert _retry_steps(result) == [("retry", None, at, 600.0, 1)]


def test_a_bad_job_event_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    good = json.dumps(_job(1, "running", T0, ["gpu061"]))
    path.write_text(
        f"# the scheduler's export\n{good}\n\n" + good.replace("running", "dead") + "\n"
    )
    with pytest.raises(EventsFileError, match=rf"^{path}: line 4: state must be one of \["):
        load_job_events(path)
    path.write_text(f"{good}\n{{not json\n")
    with pytest.raises(EventsFileError, match=rf"^{path}: line 2: not JSON"):
        load_job_events(path)
