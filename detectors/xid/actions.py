"""XID severities and recovery actions (NVIDIA's resolution buckets), ranked by disruption.

Action order, least to most disruptive: IGNORE < RESTART_APP < RESET_GPU <
RESTART_VM < RESTART_BM < (UPDATE_SWFW, CHECK_*, WORKFLOW_*: an operator has
to decide) < CONTACT_SUPPORT.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from detectors.errors import RulesError
from detectors.vocabulary import SEVERITIES, Severity

__all__ = [
    "ACTIONS",
    "RESET_CLASS",
    "SEVERITIES",
    "SEVERITY_RANK",
    "Severity",
    "action_rank",
    "action_rule",
    "is_action",
]

SEVERITY_RANK: Mapping[str, int] = {s: i for i, s in enumerate(SEVERITIES)}

_OPERATOR_RANK = 5  # UPDATE_SWFW, CHECK_*, WORKFLOW_*: hold the GPU for a human decision
ACTIONS: Mapping[str, int] = MappingProxyType(
    {
        "IGNORE": 0,
        "RESTART_APP": 1,
        "RESET_GPU": 2,
        "RESTART_VM": 3,
        "RESTART_BM": 4,
        "UPDATE_SWFW": _OPERATOR_RANK,
        "CHECK_MECHANICALS": _OPERATOR_RANK,
        "CHECK_UVM": _OPERATOR_RANK,
        "CONTACT_SUPPORT": 6,
    }
)
"""Named resolution buckets and their rank; any ``WORKFLOW_<NAME>`` is valid too."""

RESET_CLASS = frozenset({"RESET_GPU", "RESTART_VM", "RESTART_BM"})
"""Actions that reset the GPU: a second reset-class incident means the reset did not help."""

_WORKFLOW = re.compile(r"WORKFLOW_[A-Z0-9]+(?:_[A-Z0-9]+)*")


def is_action(name: object) -> bool:
    """Whether ``name`` is a resolution bucket this module knows."""
    return isinstance(name, str) and (name in ACTIONS or _WORKFLOW.fullmatch(name) is not None)


def action_rule(name: str, value: object) -> None:
    """The rule (:mod:`detectors.checks`) of a field holding a resolution bucket."""
    if not is_action(value):
        raise RulesError(
            f"{name} must be an action ({', '.join(ACTIONS)} or WORKFLOW_<NAME>), got {value!r}"
        )


def action_rank(action: str) -> int:
    """How disruptive ``action`` is (higher = more); ``ValueError`` for an unknown name."""
    if action in ACTIONS:
        return ACTIONS[action]
    if _WORKFLOW.fullmatch(action):
        return _OPERATOR_RANK
    raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}, WORKFLOW_<NAME>")
