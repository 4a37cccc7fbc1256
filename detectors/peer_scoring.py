"""Peer scoring as a detector family: the group's bucket scored against its peers.

:func:`detectors.group.score_bucket` does the maths; this family adds what the alerts
need on the way out (a deviation alert names the class of its leading signal, and a
firing alert keeps the labels it fired with: :func:`detectors.lifecycle.keep_identity`)
and hands on what it found: the training phase, the idle nodes, and its alerts as
symptoms for per-GPU health.

Its snapshot keys are the ones the worker's changelog table has always held:
``detector`` (the :class:`GroupState`) and ``identity`` (the held labels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from detectors.alerts import NODE_DEVIATION, active_alerts
from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd
from detectors.features import FeatureSpec, class_of
from detectors.group import GroupState, ScoringParams, score_bucket
from detectors.lifecycle import keep_identity
from detectors.vocabulary import AlertChange, AlertKey, Labels

__all__ = ["PeerScoring", "PeerState"]


@dataclass(frozen=True)
class PeerState:
    """The group's scoring state, and the labels of its firing peer alerts (held until
    they resolve)."""

    scoring: GroupState = field(default_factory=GroupState)
    identity: Mapping[AlertKey, Labels] = field(default_factory=dict)


class PeerScoring:
    """The peer scoring family (``detectors.group``) over a feature catalog."""

    name = "detector"

    def __init__(self, features: Sequence[FeatureSpec], params: ScoringParams) -> None:
        self.features = tuple(features)
        self.params = params

    def new(self) -> PeerState:
        return PeerState()

    def step(
        self, state: PeerState, bucket: ClosedBucket, found: BucketEvidence
    ) -> FamilyStep[PeerState]:
        scoring, result = score_bucket(
            state.scoring,
            bucket.group,
            bucket.ts,
            bucket.frames,
            bucket.gpus,
            bucket.expected,
            self.features,
            self.params,
            bucket.roles,
            bucket.on_hold,
        )
        identity, changes, active = keep_identity(
            state.identity, map(self._classify, result.changes), map(self._classify, result.active)
        )
        found = replace(
            found,
            phase=result.phase,
            idle=frozenset(result.idle),
            symptoms=(*result.active, *result.changes),
            peer=result,
        )
        return FamilyStep(PeerState(scoring, identity), tuple(changes), tuple(active), found=found)

    def figures(self, state: PeerState) -> None:
        return None  # its per-node figures are the bucket's verdicts (``BucketResult``)

    def end(self, state: PeerState, ending: GroupEnd) -> tuple[AlertChange, ...]:
        alerts = state.scoring.alerts.values()
        firing = active_alerts(alerts, group=ending.group, bucket_ts=ending.ts)
        _, changes, _ = keep_identity(state.identity, map(ending.resolve, firing), ())
        return tuple(changes)

    def _classify(self, change: AlertChange) -> AlertChange:
        """A deviation alert names the class of the signal that leads it (network, cpu, …).

        Collapse and silence are symptoms of a fail-stop: the XID, when there is
        one, says which part failed, so they claim no class here.
        """
        if change.alertname != NODE_DEVIATION or any(k == "class" for k, _ in change.labels):
            return change
        klass = class_of(change.signals, self.features)
        if klass is None:
            return change
        return replace(change, labels=tuple(sorted((*change.labels, ("class", klass)))))

    def save(self, group: str, state: PeerState | None) -> dict[str, Any]:
        identity = {} if state is None else state.identity
        return {
            "detector": None if state is None else state.scoring.to_dict(),
            "identity": [
                [name, node, dict(labels)]
                for (name, node), labels in sorted(
                    identity.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
                )
            ],
        }

    def load(self, group: str, snap: Mapping[str, Any]) -> PeerState | None:
        identity = {
            (str(name), None if node is None else str(node)): tuple(sorted(labels.items()))
            for name, node, labels in snap.get("identity", ())
        }
        data = snap.get("detector")
        if data is None and not identity:
            return None
        scoring = GroupState() if data is None else GroupState.from_dict(data)
        return PeerState(scoring, identity)
