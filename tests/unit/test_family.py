"""detectors.family: a detector family is a class and one entry in ``Pipeline.families``.

The family here is a small advisor written as issue 13's will be: it reads what peer
scoring found (``found.symptoms``), keeps its own state, and gives advice; the pipeline
runs it, persists its state under its name, restores it, and drops it with the group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd, GroupFamily
from detectors.group import ScoringParams
from detectors.state_codec import JsonState
from detectors.vocabulary import Advice, AlertChange
from detectors.xid.catalog import XidCatalog
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame
from streams.worker.pipeline import Pipeline, Scored

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(8)]


@dataclass(frozen=True)
class Silence(JsonState):
    buckets: dict[str, int] = field(default_factory=dict)  # node -> buckets reported silent


class SilenceAdvisor(GroupFamily[Silence]):
    """Advise excluding a node peer scoring has found silent for ``after`` buckets."""

    name = "silence"
    state_type = Silence

    def __init__(self, after: int = 2) -> None:
        self.after = after

    def step(
        self, state: Silence, bucket: ClosedBucket, found: BucketEvidence
    ) -> FamilyStep[Silence]:
        silent = {c.node or "" for c in found.symptoms if c.alertname == "PeerwatchNodeSilent"}
        counts = {n: state.buckets.get(n, 0) + 1 for n in sorted(silent)}
        advice = tuple(
            Advice("silence", "exclude_node", bucket.group, bucket.ts, f"{n} silent", node=n)
            for n, k in counts.items()
            if k >= self.after
        )
        return FamilyStep(Silence(counts), advice=advice)

    def end(self, state: Silence, ending: GroupEnd) -> tuple[AlertChange, ...]:
        return ()  # an advisor fires no alert


@pytest.fixture(scope="module")
def catalog() -> XidCatalog:
    return load_xid_catalog("nvidia")


def pipeline(catalog: XidCatalog, *, advisor: bool) -> Pipeline:
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog)
    if advisor:
        p.families = (*p.families, SilenceAdvisor())
    return p


def run(p: Pipeline, first: int, last: int, silent: str | None = "n07") -> list[Scored]:
    out: list[Scored] = []
    for i in range(first, last):
        ts = T0 + i * B
        for node in NODES:
            if node != silent or i < 6:
                p.add(Frame("job-a", node, ts, {"gpu_util": 95.0, "procs_running": 14.0}), ts / 1e3)
        out += p.due("job-a", ts / 1000 + 60)
    return out


def _changes(out: list[Scored]) -> list[dict[str, Any]]:
    return [c.to_dict() for s in out for c in (*s.changes, *s.active)]


def test_a_listed_family_runs_after_the_others_and_its_advice_comes_out(
    catalog: XidCatalog,
) -> None:
    with_advisor = run(pipeline(catalog, advisor=True), 0, 12)
    without = run(pipeline(catalog, advisor=False), 0, 12)
    assert _changes(with_advisor) == _changes(without)  # it changes no alert
    advised = [(s.bucket.ts, a.kind, a.node) for s in with_advisor for a in s.advice]
    fired = min(
        s.bucket.ts
        for s in with_advisor
        for c in s.changes
        if c.alertname == "PeerwatchNodeSilent" and c.status == "firing"
    )
    assert advised and advised[0] == (fired + B, "exclude_node", "n07")
    assert all(a.node == "n07" for s in with_advisor for a in s.advice)
    assert not any(s.advice for s in without)


def test_its_state_is_snapshotted_under_its_name_and_restored(catalog: XidCatalog) -> None:
    p = pipeline(catalog, advisor=True)
    run(p, 0, 10)
    snap = p.snapshot("job-a")
    n = snap["silence"]["buckets"]["n07"]
    assert snap["silence"] == {"buckets": {"n07": n}} and n >= 2
    q = pipeline(catalog, advisor=True)
    q.restore("job-a", snap)
    assert q.snapshot("job-a") == snap
    assert [a.node for s in run(q, 10, 11) for a in s.advice] == ["n07"]
    assert q.snapshot("job-a")["silence"] == {"buckets": {"n07": n + 1}}  # counted on
    plain = pipeline(catalog, advisor=False)
    plain.restore("job-a", snap)  # a worker without the family ignores its key
    assert "silence" not in plain.snapshot("job-a")


def test_its_state_goes_with_the_group(catalog: XidCatalog) -> None:
    p = pipeline(catalog, advisor=True)
    run(p, 0, 10)
    p.forget("job-a")
    assert p.snapshot("job-a")["silence"] is None
