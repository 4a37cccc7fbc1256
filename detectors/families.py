"""Every alert family peerwatch sends, as data: the one place an alertname is defined.

The sinks' summaries (:mod:`streams.sinks.payloads`), the evaluation's fault classes
(:mod:`streams.lab.evaluation.taxonomy`), the peer-scoring lifecycle's fire counts
(:mod:`detectors.alerts`) and the shipped Alertmanager routes and inhibitions
(checked by ``tests/unit/test_alert_registry.py``) all read :data:`REGISTRY`;
a new family is one entry here plus its runbook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from detectors.vocabulary import AlertSeverity

__all__ = [
    "FAIL_SLOW",
    "GROUP_DEGRADED",
    "JOB_SLOW",
    "NODE_COLLAPSE",
    "NODE_DEVIATION",
    "NODE_SILENT",
    "REGISTRY",
    "REMAP_ALERT",
    "XID_ALERT",
    "AlertFamily",
    "family",
]

NODE_COLLAPSE = "PeerwatchNodeCollapse"
NODE_SILENT = "PeerwatchNodeSilent"
NODE_DEVIATION = "PeerwatchNodeDeviation"
GROUP_DEGRADED = "PeerwatchGroupDegraded"
XID_ALERT = "PeerwatchXid"
REMAP_ALERT = "PeerwatchRowRemap"
FAIL_SLOW = "PeerwatchFailSlow"
JOB_SLOW = "PeerwatchJobSlow"

# When an alert fires: in the bucket of its first evidence, or after that many consecutive
# buckets of it (the lifecycle params' field of that name).
Fire = Literal["at_once", "persistence", "silent_buckets"]


@dataclass(frozen=True)
class AlertFamily:
    """One alertname and everything decided about it.

    ``severities``: the severities it can carry; one means fixed, two that the
    evidence chooses (the XID catalog's entry, the row-remap finding's kind).
    ``node_level``: keyed by node (else by the group, never naming a node).
    ``klass``: the fault class it claims without a ``class`` label (None: it
    does not say by its name alone). ``summary``: the annotation's template
    (``{node}``, ``{group}``). ``fire``: see :data:`Fire`. ``resolve``: the
    lifecycle params' field giving the buckets without evidence before it
    resolves. ``actions``: the ``action`` labels it may carry, and ``drains``
    those that take the node out of service (the scheduler's route).
    ``inhibited_by``: families whose firing on the same node silences it.
    """

    name: str
    severities: tuple[AlertSeverity, ...]
    node_level: bool
    klass: str | None
    summary: str
    fire: Fire
    resolve: str
    actions: tuple[str, ...] = ()
    drains: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.severities or len(set(self.severities)) != len(self.severities):
            raise ValueError(f"{self.name}: severities must be distinct and at least one")
        if not set(self.drains) <= set(self.actions):
            raise ValueError(f"{self.name}: drains {self.drains} not among actions")
        if self.drains and not self.node_level:
            raise ValueError(f"{self.name}: a group-level alert names no node to drain")

    @property
    def severity(self) -> AlertSeverity:
        """The fixed severity; ValueError for a family whose evidence chooses it."""
        if len(self.severities) != 1:
            raise ValueError(f"{self.name}'s severity is chosen by its evidence")
        return self.severities[0]

    @property
    def runbook(self) -> str:
        """The runbook's file name (under docs/runbooks, or ``runbook_base_url``)."""
        return f"{self.name}.md"


_SYMPTOMS = (NODE_COLLAPSE, NODE_DEVIATION, NODE_SILENT)
_STAGES = ("S1_OBSERVE", "S2_REBALANCE", "S3_ISOLATE", "S4_RESTART_WITHOUT_NODE")

REGISTRY: Mapping[str, AlertFamily] = {
    f.name: f
    for f in (
        AlertFamily(
            NODE_COLLAPSE,
            ("critical",),
            node_level=True,
            klass=None,  # procs_running -> 0 is what any fail-stop looks like
            summary="{node}: hard failure signature against its peers",
            fire="at_once",
            resolve="resolve_after",
            inhibited_by=(XID_ALERT,),
        ),
        AlertFamily(
            NODE_SILENT,
            ("critical",),
            node_level=True,
            klass="host",
            summary="{node}: stopped reporting while its peers report",
            fire="silent_buckets",
            resolve="resolve_after",
            inhibited_by=(XID_ALERT,),
        ),
        AlertFamily(
            NODE_DEVIATION,
            ("warning",),
            node_level=True,
            klass=None,
            summary="{node}: sustained deviation from its peers",
            fire="persistence",
            resolve="resolve_after",
            inhibited_by=(XID_ALERT, NODE_COLLAPSE),
        ),
        AlertFamily(
            GROUP_DEGRADED,
            ("warning",),
            node_level=False,
            klass="cluster-wide",
            summary="group {group}: peers deviate together (not a node fault)",
            fire="persistence",
            resolve="resolve_after",
        ),
        AlertFamily(
            XID_ALERT,
            ("critical", "warning"),  # the catalog entry's severity
            node_level=True,
            klass=None,  # 79 is the bus, 94 memory: the class label says which
            summary="{node}: GPU XID error",
            fire="at_once",
            resolve="xid_hold_buckets",
            # the shipped catalog's recovery actions (streams/catalog/xid.toml; a test checks)
            actions=(
                "CONTACT_SUPPORT",
                "RESET_GPU",
                "RESTART_APP",
                "RESTART_BM",
                "WORKFLOW_NVLINK5_ERR",
                "WORKFLOW_NVLINK_ERR",
                "WORKFLOW_XID_48",
            ),
            drains=("CONTACT_SUPPORT", "RESET_GPU", "RESTART_BM"),
        ),
        AlertFamily(
            REMAP_ALERT,
            ("critical", "warning"),  # creep warns, uncorrectable/pending/failure are critical
            node_level=True,
            klass="memory",
            summary="{node}: GPU row remapping",
            fire="at_once",
            resolve="resolve_after",
            actions=("CONTACT_SUPPORT", "RESET_GPU"),
            drains=("CONTACT_SUPPORT", "RESET_GPU"),
        ),
        AlertFamily(
            FAIL_SLOW,
            ("warning",),
            node_level=True,
            klass=None,  # the culprit's class label (compute / network / cpu)
            summary="{node}: slows its job down (fail-slow culprit)",
            fire="at_once",  # the change detector's confirmation is the persistence
            resolve="resolve_after",
            actions=_STAGES,
            drains=("S4_RESTART_WITHOUT_NODE",),
            inhibited_by=(XID_ALERT, NODE_COLLAPSE),
        ),
        AlertFamily(
            JOB_SLOW,
            ("warning",),
            node_level=False,
            klass=None,  # "cluster-wide" or "unknown" by label
            summary="group {group}: job slowed down, no node to blame",
            fire="at_once",
            resolve="resolve_after",
            actions=_STAGES,  # no drains: there is no node to take out
        ),
    )
}


def family(alertname: str) -> AlertFamily:
    """The family of ``alertname``; ValueError naming the known ones otherwise."""
    try:
        return REGISTRY[alertname]
    except KeyError:
        raise ValueError(f"unknown alertname {alertname!r}; known: {sorted(REGISTRY)}") from None
