"""Scoring the detectors against labelled runs: the core of ``peerwatch evaluate``.

* :mod:`~streams.lab.evaluation.taxonomy` — fault kind → expected class and target
  category; alert family → class.
* :mod:`detectors.episodes` — alert transitions → paging episodes (shared with the backtest).
* :mod:`~streams.lab.evaluation.scoring` — one run's alerts against its ground truth
  (pure; the windows are defined there).
* :mod:`~streams.lab.evaluation.aggregate` — figures over runs and seeds.
* :mod:`~streams.lab.evaluation.report` — targets with PASS / MISS, text / markdown
  tables, the ``--json`` form.
* :mod:`~streams.lab.evaluation.plot` — the ``--plot`` heatmap (needs matplotlib).

Nothing here does I/O except ``plot_score_heatmap`` writing its PNG.
"""

from detectors.episodes import AlertEpisode, AlertEvent, alert_episodes, to_alert_event
from streams.lab.evaluation.aggregate import GROUP_NODES, Summary, summarize
from streams.lab.evaluation.report import (
    TARGETS,
    EvaluationReport,
    TargetCheck,
    build_report,
    check_targets,
    render_markdown,
    render_text,
)
from streams.lab.evaluation.scoring import (
    EventOutcome,
    FaultOutcome,
    RunScore,
    ScoringWindows,
    score_run,
)
from streams.lab.evaluation.taxonomy import (
    FAMILY_CLASSES,
    FAULT_CLASSES,
    FAULT_EXPECTATIONS,
    FaultExpectation,
)

__all__ = [
    "FAMILY_CLASSES",
    "FAULT_CLASSES",
    "FAULT_EXPECTATIONS",
    "GROUP_NODES",
    "TARGETS",
    "AlertEpisode",
    "AlertEvent",
    "EvaluationReport",
    "EventOutcome",
    "FaultExpectation",
    "FaultOutcome",
    "RunScore",
    "ScoringWindows",
    "Summary",
    "TargetCheck",
    "alert_episodes",
    "build_report",
    "check_targets",
    "render_markdown",
    "render_text",
    "score_run",
    "summarize",
    "to_alert_event",
]
