"""Targets, the results table (text / markdown) and the ``--json`` form.

:func:`build_report` takes scored runs per scenario and checks every figure
against its target from issue 5 (:data:`TARGETS`), per scenario and overall:

=================================  ==========================================  ==========
key                                figure (Summary field)                       target
=================================  ==========================================  ==========
fail_stop_at_or_before_xid         at_or_before_xid                             >= 100 %
remap_creep_lead_h                 remap_creep_min_lead_h                       >= 72 h
fail_slow_culprit_3_buckets        fail_slow_culprit_3                          >= 99 %
fail_slow_class                    fail_slow_class_accuracy                     >= 95 %
false_node_alerts_per_group_day    must_not_page_false_per_group_day            <= 0.1
suite_runtime_s                    the caller's wall-clock seconds (overall)    < 300 s
=================================  ==========================================  ==========

Status: ``PASS`` or ``MISS``; ``N/A`` when the runs hold no case for the
target (no XID fail-stop fault, no must-not-page run, no runtime given) — a
target with nothing behind it is not passed. A figure that cannot be computed
although there are cases (a row-remap creep that was never warned) is a MISS.

JSON (``EvaluationReport.to_dict``), keys stable::

    {"schema": "peerwatch.evaluate/1", "meta": {...}, "runtime_s": float | null,
     "overall":   {"name": "overall", "runs": int, "runtime_s": ..., "summary": {...},
                   "targets": [{"key", "label", "value", "op", "threshold", "unit",
                                "cases", "detail", "status"}, ...]},
     "scenarios": [{same keys as overall}, ...]}

``summary`` holds every :class:`streams.lab.evaluation.aggregate.Summary` field.
With ``details=True`` each block also has ``faults`` and ``events`` (per-row
outcomes, each tagged with its ``run`` index) and ``false_pages`` (every false
node alert, and every group alert of a must-not-page run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from detectors.episodes import AlertEpisode
from detectors.state_codec import JsonRecord
from streams.lab.evaluation.aggregate import GROUP_NODES, Summary, summarize
from streams.lab.evaluation.scoring import RunScore

__all__ = [
    "BLOCK_KEYS",
    "REPORT_KEYS",
    "SCHEMA",
    "TARGETS",
    "TARGET_KEYS",
    "EvaluationReport",
    "ScenarioResult",
    "Target",
    "TargetCheck",
    "build_report",
    "check_targets",
    "render_markdown",
    "render_text",
]

SCHEMA = "peerwatch.evaluate/1"
REPORT_KEYS = ("schema", "meta", "runtime_s", "overall", "scenarios")
BLOCK_KEYS = ("name", "runs", "runtime_s", "summary", "targets")
TARGET_KEYS = ("key", "label", "value", "op", "threshold", "unit", "cases", "detail", "status")

Op = Literal[">=", "<=", "<"]
Status = Literal["PASS", "MISS", "N/A"]
Unit = Literal["%", "h", "/group-day", "s"]


@dataclass(frozen=True)
class Target:
    """One target of issue 5: which figure, compared how, against what."""

    key: str
    label: str
    op: Op
    threshold: float
    unit: Unit
    figure: Callable[[Summary], float | None]
    cases: Callable[[Summary], int]
    detail: Callable[[Summary], str]


def _pct_detail(num: str, den: str) -> Callable[[Summary], str]:
    return lambda s: f"{getattr(s, num)}/{getattr(s, den)}"


TARGETS: tuple[Target, ...] = (
    Target(
        "fail_stop_at_or_before_xid",
        "XID fail-stop alerted at/before the XID bucket",
        ">=",
        1.0,
        "%",
        lambda s: s.at_or_before_xid,
        lambda s: s.xid_faults,
        _pct_detail("at_or_before_xid_count", "xid_faults"),
    ),
    Target(
        "remap_creep_lead_h",
        "row-remap creep warned before the GPU is lost (min)",
        ">=",
        72.0,
        "h",
        lambda s: s.remap_creep_min_lead_h,
        lambda s: s.remap_creep_faults,
        _pct_detail("remap_creep_warned_72h", "remap_creep_faults"),
    ),
    Target(
        "fail_slow_culprit_3_buckets",
        "fail-slow culprit named within 3 buckets of onset",
        ">=",
        0.99,
        "%",
        lambda s: s.fail_slow_culprit_3,
        lambda s: s.fail_slow_faults,
        _pct_detail("fail_slow_culprit_3_count", "fail_slow_faults"),
    ),
    Target(
        "fail_slow_class",
        "fail-slow fault class right",
        ">=",
        0.95,
        "%",
        lambda s: s.fail_slow_class_accuracy,
        lambda s: s.fail_slow_faults,
        _pct_detail("fail_slow_class_correct", "fail_slow_faults"),
    ),
    Target(
        "false_node_alerts_per_group_day",
        f"false node alerts per {GROUP_NODES}-node group-day (must-not-page runs)",
        "<=",
        0.1,
        "/group-day",
        lambda s: s.must_not_page_false_per_group_day,
        lambda s: s.must_not_page_runs,
        lambda s: (
            f"{s.must_not_page_false_node_alerts} in {s.must_not_page_node_days:.1f} node-days"
        ),
    ),
)
RUNTIME_TARGET_S = 300.0
RUNTIME_KEY = "suite_runtime_s"


@dataclass(frozen=True)
class TargetCheck(JsonRecord):
    """A figure next to its target, with PASS / MISS / N/A."""

    key: str
    label: str
    value: float | None
    op: Op
    threshold: float
    unit: Unit
    cases: int
    detail: str
    status: Status

    KEY_ORDER = TARGET_KEYS


def _status(value: float | None, op: Op, threshold: float, cases: int) -> Status:
    if cases == 0:
        return "N/A"
    if value is None or not math.isfinite(value):
        return "MISS"
    ok = {">=": value >= threshold, "<=": value <= threshold, "<": value < threshold}[op]
    return "PASS" if ok else "MISS"


def check_targets(summary: Summary, runtime_s: float | None = None) -> tuple[TargetCheck, ...]:
    """Every target of :data:`TARGETS` for ``summary``; plus the runtime one when given."""
    checks = [
        TargetCheck(
            key=t.key,
            label=t.label,
            value=t.figure(summary),
            op=t.op,
            threshold=t.threshold,
            unit=t.unit,
            cases=t.cases(summary),
            detail=t.detail(summary),
            status=_status(t.figure(summary), t.op, t.threshold, t.cases(summary)),
        )
        for t in TARGETS
    ]
    if runtime_s is not None:
        checks.append(
            TargetCheck(
                key=RUNTIME_KEY,
                label="default suite runtime",
                value=runtime_s,
                op="<",
                threshold=RUNTIME_TARGET_S,
                unit="s",
                cases=1,
                detail="wall clock",
                status=_status(runtime_s, "<", RUNTIME_TARGET_S, 1),
            )
        )
    return tuple(checks)


@dataclass(frozen=True)
class ScenarioResult:
    """One block of the report: a scenario (or ``overall``), its figures and target checks."""

    name: str
    runs: tuple[RunScore, ...]
    summary: Summary
    targets: tuple[TargetCheck, ...]
    runtime_s: float | None

    def to_dict(self, details: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "runs": len(self.runs),
            "runtime_s": self.runtime_s,
            "summary": self.summary.to_dict(),
            "targets": [c.to_dict() for c in self.targets],
        }
        if details:
            out["faults"] = [
                {"run": i, **f.to_dict()} for i, r in enumerate(self.runs) for f in r.faults
            ]
            out["events"] = [
                {"run": i, **e.to_dict()} for i, r in enumerate(self.runs) for e in r.events
            ]
            out["false_pages"] = [
                {"run": i, "level": level, **_episode_dict(ep)}
                for i, r in enumerate(self.runs)
                for level, episodes in (("node", r.false_alerts), ("group", r.group_alerts))
                for ep in episodes
                if level == "node" or r.must_not_page
            ]
        return out


def _episode_dict(ep: AlertEpisode) -> dict[str, Any]:
    return {
        "alertname": ep.alertname,
        "node": ep.node,
        "fired_ts": ep.fired_ts,
        "resolved_ts": ep.resolved_ts,
        "critical": ep.critical,
    }


@dataclass(frozen=True)
class EvaluationReport:
    scenarios: tuple[ScenarioResult, ...]
    overall: ScenarioResult
    runtime_s: float | None
    meta: Mapping[str, Any]

    def missed(self) -> list[str]:
        """Every target missed (MISS), as "block: target", the overall block first."""
        return [
            f"{block.name}: {check.label}"
            for block in (self.overall, *self.scenarios)
            for check in block.targets
            if check.status == "MISS"
        ]

    def to_dict(self, details: bool = False) -> dict[str, Any]:
        """The ``--json`` form (keys: :data:`REPORT_KEYS`); JSON-safe, no NaN."""
        return {
            "schema": SCHEMA,
            "meta": dict(self.meta),
            "runtime_s": self.runtime_s,
            "overall": self.overall.to_dict(details),
            "scenarios": [s.to_dict(details) for s in self.scenarios],
        }


def build_report(
    runs: Mapping[str, Sequence[RunScore]],
    *,
    runtime_s: float | None = None,
    scenario_runtimes_s: Mapping[str, float] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> EvaluationReport:
    """Summaries and target checks per scenario (in ``runs``' order) and overall.

    ``runtime_s``: the whole suite's wall-clock seconds (checked against the
    5-minute target, overall only). ``meta``: free-form, copied into the JSON
    (seeds, command line, windows used).
    """
    per_runtime = scenario_runtimes_s or {}
    blocks = []
    for name, scenario_runs in runs.items():
        summary = summarize(scenario_runs)
        blocks.append(
            ScenarioResult(
                name,
                tuple(scenario_runs),
                summary,
                check_targets(summary),
                per_runtime.get(name),
            )
        )
    everything = tuple(r for block in blocks for r in block.runs)
    total = summarize(everything)
    overall = ScenarioResult(
        "overall", everything, total, check_targets(total, runtime_s), runtime_s
    )
    return EvaluationReport(tuple(blocks), overall, runtime_s, dict(meta or {}))


# --- rendering ------------------------------------------------------------------------------

_OP_TEXT = {">=": "≥", "<=": "≤", "<": "<"}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "%":
        return f"{100.0 * value:.1f} %"
    if unit == "h":
        return f"{value:.1f} h"
    if unit == "s":
        return f"{value:.1f} s"
    return f"{value:.2f}"


def _target_text(c: TargetCheck) -> str:
    threshold = _fmt(c.threshold, c.unit)
    if c.unit == "%" and c.threshold == 1.0 and c.op == ">=":
        return "= 100 %"
    return f"{_OP_TEXT[c.op]} {threshold}"


def _target_rows(block: ScenarioResult, skip_na: bool) -> list[list[str]]:
    return [
        [
            c.label,
            "— (no cases)" if c.cases == 0 else f"{_fmt(c.value, c.unit)} ({c.detail})",
            _target_text(c),
            c.status,
        ]
        for c in block.targets
        if not (skip_na and c.status == "N/A")
    ]


FIGURE_HEADERS = [
    "scenario",
    "runs",
    "faults",
    "recall",
    "≤XID",
    "culprit",
    "GPU",
    "class",
    "detect p50/p90",
    "false/grp-day",
    "grp-days",
    "crit/grp-day",
    "warn/grp-day",
    "quiet grp/grp-day",
    "events ok",
    "grp alerts",
    "s/grp-day",
]


def _figure_row(block: ScenarioResult) -> list[str]:
    s = block.summary
    p50, p90 = s.detect_s_p50, s.detect_s_p90
    detect = "—" if p50 is None else f"{p50:.0f}/{p90:.0f} s"
    return [
        block.name,
        str(s.runs),
        str(s.faults),
        _fmt(s.recall, "%"),
        _fmt(s.at_or_before_xid, "%"),
        _fmt(s.culprit_accuracy, "%"),
        _fmt(s.gpu_accuracy, "%"),
        _fmt(s.class_accuracy, "%"),
        detect,
        _fmt(s.false_per_group_day, ""),
        f"{s.group_days:.2f}",
        _fmt(s.false_critical_per_group_day, ""),
        _fmt(s.false_node_warnings_per_group_day, ""),
        _fmt(s.must_not_page_group_alerts_per_group_day, ""),
        _fmt(s.events_not_blamed_rate, "%"),
        str(s.group_alerts),
        "—"
        if block.runtime_s is None or not s.group_days
        else f"{block.runtime_s / s.group_days:.0f}",
    ]


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append(indent + "  ".join("-" * w for w in widths))
    for row in rows:
        cells = [
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def render_text(report: EvaluationReport) -> str:
    """The terminal table: overall targets, targets per scenario, then figures per scenario."""
    runtime = "" if report.runtime_s is None else f", {report.runtime_s:.1f} s"
    out = [
        f"peerwatch evaluate: {len(report.scenarios)} scenarios, "
        f"{report.overall.summary.runs} runs{runtime}",
        "",
        "Targets (overall)",
        _plain_table(
            ["target", "figure", "goal", "status"], _target_rows(report.overall, False), "  "
        ),
    ]
    for block in report.scenarios:
        rows = _target_rows(block, skip_na=True)
        if rows:
            out += [
                "",
                f"Targets: {block.name}",
                _plain_table(["target", "figure", "goal", "status"], rows, "  "),
            ]
    out += [
        "",
        "Figures",
        _plain_table(
            FIGURE_HEADERS, [_figure_row(b) for b in (*report.scenarios, report.overall)], "  "
        ),
    ]
    return "\n".join(out) + "\n"


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: EvaluationReport) -> str:
    """docs/detection-quality.md's form: the overall targets, then the figures per scenario."""
    return (
        _md_table(["target", "figure", "goal", "status"], _target_rows(report.overall, False))
        + "\n\n"
        + _md_table(FIGURE_HEADERS, [_figure_row(b) for b in (*report.scenarios, report.overall)])
        + "\n"
    )
