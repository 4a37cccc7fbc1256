"""Job membership from the scheduler's events: parsing, the job table, the file source, and
the frame builder placing nodes by it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.catalog import DEFAULT_FEATURES
from streams.ingest.builder import FrameBuilder
from streams.ingest.membership import (
    JobMembership,
    MembershipError,
    MembershipFile,
    parse_event,
)
from streams.ingest.series import Series


def _event(job: str, state: str, nodes: list[str] | None = None, ts: int = 1) -> str:
    body: dict = {"job": job, "state": state, "ts": ts}
    if nodes is not None:
        body["nodes"] = nodes
    return json.dumps(body)


def test_a_running_event_parses() -> None:
    event = parse_event(_event("j1", "running", ["a", "b"], 5))
    assert (event.job, event.state, event.nodes, event.ts) == ("j1", "running", {"a", "b"}, 5)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{", "not JSON"),
        ("[]", "JSON object"),
        (b"\xff\xfe", "not JSON"),
        (json.dumps({"state": "running", "nodes": ["a"], "ts": 1}), "job"),
        (_event("j", "paused", ["a"]), "state"),
        (_event("j", "running", []), "needs its nodes"),
        (_event("j", "running", ["a", ""]), "node name"),
        (json.dumps({"job": "j", "state": "ended", "ts": "soon"}), "ts"),
        (json.dumps({"job": "j", "state": "ended", "ts": True}), "ts"),
        (json.dumps({"job": "j", "state": "running", "nodes": "a", "ts": 1}), "list"),
    ],
)
def test_bad_events_get_a_clear_reason(raw: str | bytes, reason: str) -> None:
    with pytest.raises(MembershipError, match=reason):
        parse_event(raw)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_any_input_parses_or_raises_membership_error(raw: bytes | str) -> None:
    with contextlib.suppress(MembershipError):
        parse_event(raw)


def test_running_then_a_spare_swap_then_ended() -> None:
    table = JobMembership()
    assert table.apply(parse_event(_event("j", "running", ["a", "b", "c"], 1))) == {
        "a": "j",
        "b": "j",
        "c": "j",
    }
    # b failed; the spare s took its place
    assert table.apply(parse_event(_event("j", "running", ["a", "c", "s"], 2))) == {
        "b": None,
        "s": "j",
    }
    assert table.apply(parse_event(_event("j", "ended", ts=3))) == {
        "a": None,
        "c": None,
        "s": None,
    }
    assert table.node_job == {} and table.jobs == {}


def test_an_older_event_of_a_job_is_ignored() -> None:
    table = JobMembership()
    table.apply(parse_event(_event("j", "ended", ts=10)))
    assert table.apply(parse_event(_event("j", "running", ["a"], 5))) == {}


def test_a_node_in_a_newer_job_leaves_the_older_one() -> None:
    table = JobMembership()
    table.apply(parse_event(_event("j1", "running", ["a", "b"], 1)))
    assert table.apply(parse_event(_event("j2", "running", ["b"], 2))) == {"b": "j2"}
    assert table.jobs["j1"] == {"a"}
    assert table.apply(parse_event(_event("j1", "ended", ts=3))) == {"a": None}
    assert table.node_job == {"b": "j2"}


def test_the_file_source_reads_appended_lines_and_skips_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    source = MembershipFile(path)
    assert list(source.poll()) == []  # no file yet: nothing, no error
    path.write_text(_event("j", "running", ["a"], 1) + "\nnot json\n" + '{"job": "j"')
    assert [e.ts for e in source.poll()] == [1]  # the unfinished last line waits
    with path.open("a") as f:
        f.write(', "state": "ended", "ts": 2}\n')
    assert [(e.state, e.ts) for e in source.poll()] == [("ended", 2)]
    assert list(source.poll()) == []


def test_a_replaced_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(_event("j", "running", ["a", "b"], 1) + "\n")
    source = MembershipFile(path)
    assert len(list(source.poll())) == 1
    (tmp_path / "new.jsonl").write_text(_event("k", "running", ["c"], 1) + "\n")
    (tmp_path / "new.jsonl").replace(path)
    assert [e.job for e in source.poll()] == ["k"]


# --- the frame builder places nodes by the scheduler's word -------------------------------------


def _procs(node: str, ts: int, **labels: str) -> Series:
    return Series(
        {"__name__": "node_procs_running", "instance": f"{node}:9100", "cluster": "c", **labels},
        [(ts, 12.0)],
    )


def _builder() -> FrameBuilder:
    return FrameBuilder(DEFAULT_FEATURES, group_labels=("train_job", "cluster"), grace_ms=0)


def test_an_assigned_node_is_in_its_job_whatever_its_labels_say() -> None:
    b = _builder()
    b.assign("n1", "llm-42")
    b.add([_procs("n1", 1_000), _procs("n2", 1_000)])
    frames = {(f.group, f.node) for f in b.close_due(10**9) if not f.left}
    assert frames == {("llm-42", "n1"), ("c", "n2")}


def test_an_assignment_before_the_node_first_reports_holds() -> None:
    b = _builder()
    b.assign("n1", "llm-42")
    b.add([_procs("n1", 1_000, train_job="other")])
    assert [f.group for f in b.close_due(10**9)] == ["llm-42"]


def test_a_node_the_scheduler_releases_falls_back_to_its_labels_and_departs() -> None:
    b = _builder()
    b.assign("n1", "llm-42")
    b.add([_procs("n1", 1_000)])
    b.assign("n1", None)
    b.add([_procs("n1", 31_000)])
    frames = b.close_due(10**9)
    assert {(f.group, f.ts, f.left) for f in frames} == {
        ("llm-42", 0, False),
        ("llm-42", 30_000, True),
        ("c", 30_000, False),
    }
