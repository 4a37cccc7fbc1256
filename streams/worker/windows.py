"""Per-group bucket windows: collect one bucket's frames, decide when to score it.

A bucket of a group closes (and is scored) at the first of:

* every expected member has reported for it;
* ``grace_s`` of wall time have passed since its first frame arrived (a node
  that is late or dead must not hold the group back; a timer drives this for
  quiet groups, since nothing else would wake the worker);
* frames for a bucket ``lag_buckets`` newer have arrived (event time has moved
  on, e.g. a replay faster than real time).

Buckets close in order. A frame for a bucket that is already closed is late:
it is counted and dropped. Partial frames of the same (node, bucket) merge with
each feature's own reduction. Expected members are the nodes seen in the last
``membership_buckets`` buckets, so a node that goes silent stays expected for a
while and its absence is scored as a signal. A departure notice (the node moved to
another group) ends its membership from the notice's bucket on, whatever order
it arrives in relative to the node's last frames for older buckets. A frame *on
hold* (its node's series lacked the group's label: maybe taken out of the job, its
departure still to come) is a member's frame; the bucket says which nodes were on
hold, and their peer alerts are frozen.

A group *ends* when nothing is left to score: no bucket is open and either every
member has departed or no frame came for ``membership_buckets`` buckets of wall
time (the job ended, or its frames simply stopped). ``ended`` says so; the
pipeline then resolves the group's alerts and drops it.

This is bookkeeping only; the maths is in ``detectors`` (a :class:`ClosedBucket` is the
detector families' input: ``detectors.family``). Time is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from detectors.family import ClosedBucket
from detectors.features import FeatureSpec
from streams.frames import merge_frames


@dataclass
class _OpenBucket:
    first_arrival_s: float
    frames: dict[str, dict[str, float]] = field(default_factory=dict)
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)
    on_hold: set[str] = field(default_factory=set)


@dataclass
class GroupWindow:
    """Open buckets and membership of one peer group."""

    group: str
    features: Sequence[FeatureSpec]
    bucket_ms: int
    grace_s: float
    membership_buckets: int
    lag_buckets: int = 2
    closed_upto: int = -1  # ts of the newest closed bucket
    last_seen: dict[str, int] = field(default_factory=dict)  # node -> newest bucket ts
    joined: dict[str, int] = field(default_factory=dict)  # node -> oldest bucket ts seen
    roles: dict[str, str] = field(default_factory=dict)  # node -> its latest role (sticky)
    left: dict[str, int] = field(default_factory=dict)  # node -> bucket ts it departed at
    last_arrival_s: float | None = None  # wall time of the newest frame taken (None: none yet)
    _open: dict[int, _OpenBucket] = field(default_factory=dict)
    # a departure or a restore since the last tidy-up may have left members to forget
    # (frames alone never do: only a close moves the horizon)
    _untidy: bool = field(default=True, compare=False, repr=False)

    def add(
        self,
        node: str,
        ts: int,
        values: Mapping[str, float],
        gpus: Mapping[str, str],
        now_s: float,
        role: str | None = None,
        *,
        on_hold: bool = False,
    ) -> bool:
        """Take one (partial) frame. False if it is late (its bucket already closed).

        The node is on hold in the bucket only if every partial frame of it says so
        (another ingest's partial may have seen the group's label)."""
        if ts <= self.closed_upto:
            return False
        self.last_arrival_s = now_s
        departed = self.left.get(node)
        if departed is not None:
            if ts == departed:  # the departure's own bucket is no longer the group's
                return True
            if ts > departed:  # it came back: a new member from here on
                self._drop(node)
        if role:
            self.roles[node] = role
        bucket = self._open.get(ts)
        if bucket is None:
            bucket = self._open[ts] = _OpenBucket(first_arrival_s=now_s)
        if node in bucket.frames:
            bucket.frames[node], bucket.gpus[node] = merge_frames(
                bucket.frames[node], bucket.gpus[node], values, gpus, self.features
            )
            if not on_hold:
                bucket.on_hold.discard(node)
        else:
            bucket.frames[node], bucket.gpus[node] = dict(values), dict(gpus)
            if on_hold:
                bucket.on_hold.add(node)
        if ts > self.last_seen.get(node, -1):
            self.last_seen[node] = ts
        if ts < self.joined.get(node, ts + 1):
            self.joined[node] = ts
        return True

    def leave(self, node: str, ts: int, now_s: float) -> None:
        """The node left the group at bucket ``ts``: from then on not expected, not silent.

        Its frames for older buckets may still arrive (the frame builder sends the
        departure when the node moves, its last frame here when that bucket closes):
        they count, but do not make it a member again; only a frame newer than ``ts``
        does.
        """
        self.left[node] = max(ts, self.left.get(node, ts))
        self._untidy = True
        self.last_arrival_s = now_s
        for bucket_ts, bucket in self._open.items():
            if bucket_ts >= ts:
                bucket.frames.pop(node, None)
                bucket.gpus.pop(node, None)
                bucket.on_hold.discard(node)

    def expected_at(self, ts: int) -> frozenset[str]:
        horizon = ts - self.membership_buckets * self.bucket_ms
        # A node that joined after ts (its first frame is for a newer bucket)
        # was not a member then: it must not hold ts open or look silent in it.
        return frozenset(
            n
            for n, seen in self.last_seen.items()
            if seen >= horizon and self.joined[n] <= ts and self.left.get(n, ts + 1) > ts
        )

    def _complete(self, ts: int, frames: Mapping[str, object]) -> bool:
        """``expected_at(ts) <= frames.keys()``, stopping at the first expected node
        missing. ``due`` runs after every frame: the newest members first finds one at once
        while frames come in (they tend to come in joining order) instead of building
        the whole set per frame."""
        horizon = ts - self.membership_buckets * self.bucket_ms
        for n in reversed(self.last_seen):
            if (
                n not in frames
                and self.last_seen[n] >= horizon
                and self.joined[n] <= ts
                and self.left.get(n, ts + 1) > ts
            ):
                return False
        return True

    def due(self, now_s: float) -> list[ClosedBucket]:
        """Close and return every bucket that is ready, oldest first."""
        if not self._open:
            return []
        newest = max(self._open)
        ready_upto = -1
        for ts in sorted(self._open):
            bucket = self._open[ts]
            # Until one bucket has closed the hard way, membership is unknown
            # (the first frame alone would look "complete").
            complete = self.closed_upto >= 0 and self._complete(ts, bucket.frames)
            timed_out = now_s - bucket.first_arrival_s >= self.grace_s
            overtaken = newest - ts >= self.lag_buckets * self.bucket_ms
            if complete or timed_out or overtaken:
                ready_upto = ts  # closing ts closes everything older too
        closed = []
        for ts in sorted(t for t in self._open if t <= ready_upto):
            bucket = self._open.pop(ts)
            expected = self.expected_at(ts)
            roles = {n: r for n, r in self.roles.items() if n in expected}
            closed.append(
                ClosedBucket(
                    self.group,
                    ts,
                    bucket.frames,
                    bucket.gpus,
                    expected,
                    roles,
                    frozenset(bucket.on_hold),
                )
            )
            self.closed_upto = ts
        if closed or self._untidy:
            self._forget_departed()
        return closed

    def ended(self, now_s: float) -> str | None:
        """Why the group has ended (nothing open, and no member left or nothing sent for
        ``membership_buckets``), or None while it goes on."""
        if self._open:
            return None
        # Departed nodes' frames for older buckets may still come (the builder sends a
        # departure first): only once those buckets are closed is nobody left.
        older_open = self.left and self.closed_upto < max(self.left.values()) - self.bucket_ms
        if not (self.last_seen.keys() - self.left.keys() or older_open):
            return "every node left the group"
        quiet_s = self.membership_buckets * self.bucket_ms / 1000.0
        if self.last_arrival_s is not None and now_s - self.last_arrival_s >= quiet_s:
            return f"no frame for {self.membership_buckets} buckets"
        return None

    def oldest_open_age(self, now_s: float) -> float:
        """Seconds since the oldest open bucket got its first frame (-inf if none)."""
        if not self._open:
            return float("-inf")
        return now_s - min(b.first_arrival_s for b in self._open.values())

    def _forget_departed(self) -> None:
        self._untidy = False
        horizon = self.closed_upto - self.membership_buckets * self.bucket_ms
        for node in [n for n, seen in self.last_seen.items() if seen < horizon]:
            self._drop(node)
        # once the departure's bucket closed, every frame still to come is newer: a rejoin
        for node in [n for n, ts in self.left.items() if ts <= self.closed_upto]:
            self._drop(node)

    def _drop(self, node: str) -> None:
        self.last_seen.pop(node, None)
        self.joined.pop(node, None)
        self.roles.pop(node, None)
        self.left.pop(node, None)

    # Membership and progress survive a worker restart (kept in a Faust table).
    # Open buckets are not in the snapshot: the worker acks their frames only once
    # they close (streams.worker.acks), so after a crash Kafka delivers them again.
    def snapshot(self) -> dict[str, Any]:
        return {
            "closed_upto": self.closed_upto,
            "last_seen": dict(self.last_seen),
            "joined": dict(self.joined),
            "roles": dict(self.roles),
            "left": dict(self.left),
        }

    def restore(self, snap: Mapping[str, Any]) -> None:
        self.closed_upto = int(snap.get("closed_upto", -1))
        self.last_seen = {str(k): int(v) for k, v in snap.get("last_seen", {}).items()}
        joined = snap.get("joined", {})
        self.joined = {n: int(joined.get(n, seen)) for n, seen in self.last_seen.items()}
        roles = snap.get("roles", {})
        self.roles = {n: str(roles[n]) for n in self.last_seen if roles.get(n)}
        self.left = {str(k): int(v) for k, v in snap.get("left", {}).items()}
        self._untidy = True
