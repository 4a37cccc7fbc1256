"""One protocol for detector families: an explicit state, one step per closed bucket.

A family (peer scoring, per-GPU health, fail-slow, an advisor) is an object the
pipeline holds once, with its parameters, and runs for every group:

* ``new()`` — a group's first state. The state is a plain value (a dataclass the
  state codec persists); the family keeps none itself, the pipeline holds it per group.
* ``step(state, bucket, found)`` — judge one :class:`ClosedBucket`; ``found`` is what
  the families before it found in the same bucket (:class:`BucketEvidence`). Returns a
  :class:`FamilyStep`: the new state, alert transitions, firing alerts, advice, and the
  evidence for the families after it.
* ``end(state, ending)`` — the group ended: the alerts it holds, resolved.
* ``save(group, state)`` / ``load(group, snap)`` — the keys of the group's snapshot the
  family owns (:class:`GroupFamily`: its state by the state codec under its name).
* ``figures(state)`` — what the family exports of a group's state for the shell's
  metrics (a value of its own type; None: nothing), so the shell reads every family's
  figures through this one hook instead of a view per family.

Families run in the pipeline's order, so a later one can use an earlier one's finding
(the training phase, the idle nodes, the peer alerts as GPU-health symptoms) through
``found`` rather than by hand. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from detectors.lifecycle import resolved
from detectors.state_codec import decode, to_data
from detectors.vocabulary import Advice, AlertChange

if TYPE_CHECKING:
    from detectors.failslow.monitor import FailSlowVerdict
    from detectors.group import BucketResult
    from detectors.phase import Phase

__all__ = [
    "BucketEvidence",
    "ClosedBucket",
    "Family",
    "FamilyStep",
    "GroupEnd",
    "GroupFamily",
]

S = TypeVar("S")


@dataclass
class ClosedBucket:
    """One group's bucket as it closed: every member's frame, who was expected."""

    group: str
    ts: int
    frames: dict[str, dict[str, float]]
    gpus: dict[str, dict[str, str]]
    expected: frozenset[str]
    roles: dict[str, str] = field(default_factory=dict)  # node -> its role in the job, if known
    on_hold: frozenset[str] = frozenset()  # nodes whose frames all lacked the group's label


@dataclass(frozen=True)
class BucketEvidence:
    """What the families run so far found in one bucket.

    ``peer``: peer scoring's result, and from it ``phase`` (the training phase),
    ``idle`` (nodes outside the job: no one's peers) and ``symptoms`` (its alert
    transitions and firing alerts, which per-GPU health weighs); ``failslow``: the
    job's fail-slow verdict (None: not judged, e.g. a stale bucket); ``changes``:
    every alert transition of the families so far (the pipeline fills it in; the
    node ledger records them).
    """

    phase: Phase | None = None
    idle: frozenset[str] = frozenset()
    symptoms: tuple[AlertChange, ...] = ()
    peer: BucketResult | None = None
    failslow: FailSlowVerdict | None = None
    changes: tuple[AlertChange, ...] = ()

    @property
    def paused(self) -> bool:
        """A checkpoint save or restart load within its usual length: the job is not training."""
        return self.phase is not None and self.phase.expected


@dataclass(frozen=True)
class FamilyStep(Generic[S]):
    """One family's outcome for one bucket. ``found``: the evidence the families after it
    see (None: what it was given)."""

    state: S
    changes: tuple[AlertChange, ...] = ()
    active: tuple[AlertChange, ...] = ()
    advice: tuple[Advice, ...] = ()
    found: BucketEvidence | None = None


@dataclass(frozen=True)
class GroupEnd:
    """A group ended at bucket ``ts`` (``why``); ``moved``: its nodes that departed to
    another group (their per-node state goes with them)."""

    group: str
    ts: int
    why: str
    moved: frozenset[str] = frozenset()

    def resolve(self, change: AlertChange) -> AlertChange:
        """A firing alert of the group, resolved because the group ended."""
        return resolved(change, self.ts, f"group ended ({self.why})")


class Family(Protocol[S]):
    """A detector family (see the module docstring)."""

    @property
    def name(self) -> str: ...

    def new(self) -> S: ...

    def step(self, state: S, bucket: ClosedBucket, found: BucketEvidence) -> FamilyStep[S]: ...

    def end(self, state: S, ending: GroupEnd) -> tuple[AlertChange, ...]: ...

    def save(self, group: str, state: S | None) -> dict[str, Any]: ...

    def load(self, group: str, snap: Mapping[str, Any]) -> S | None: ...

    def figures(self, state: S) -> object | None: ...


class GroupFamily(Generic[S]):
    """A family whose state is the group's, persisted by the state codec under ``name``
    (None in the snapshot: the group has not been scored yet). Subclasses set ``name``
    and ``state_type`` and write ``step`` and ``end``."""

    name: str
    state_type: type[S]

    def new(self) -> S:
        return self.state_type()

    def save(self, group: str, state: S | None) -> dict[str, Any]:
        return {self.name: None if state is None else to_data(state)}

    def load(self, group: str, snap: Mapping[str, Any]) -> S | None:
        data = snap.get(self.name)
        return None if data is None else decode(self.state_type, data, self.name)

    def figures(self, state: S) -> object | None:
        return None
