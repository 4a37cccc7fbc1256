"""Count what a chaos run lost or doubled, from what the real parts said.

Signals (no test hooks in the service):

- buckets scored: the workers' ``bucket_scored group=… bucket=… nodes=…`` log
  lines, one per scored bucket. A per-(group, bucket) metric would be a label
  per bucket (unbounded); the alerts topic carries only changes. The log line
  is one line of code and what an operator would grep.
- buckets and alerts expected: the same samples through the in-process
  pipeline (``streams.worker.offline``), which an integration test holds equal to
  the live path in a run without faults.
- alerts decided: the ``peerwatch.alerts`` topic.
- alerts delivered: Alertmanager's ``GET /api/v2/alerts``, polled several
  times per bucket of wall time during the run (it lists active alerts only,
  so a poll at the end would miss those that resolved). An alert that fired
  and resolved while Alertmanager was unreachable (the workers' log times its
  decisions) reaches it as resolved only and is counted apart, not as lost.

Alertmanager knows an alert by its labels and merges a re-sent alert into the
one it holds, so a duplicate there is an *episode* (label set + ``startsAt``)
that the decisions do not account for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

Identity = tuple[tuple[str, str], ...]

BUCKET_LINE = re.compile(r"bucket_scored group=(\S+) bucket=(\d+) nodes=(\d+)")


def identity(labels: Mapping[str, str]) -> Identity:
    return tuple(sorted(labels.items()))


def epoch_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


DECISION_LINE = re.compile(
    # the workers' text format (streams.telemetry.logs) leads with the time; Faust's used brackets
    r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]?.*? alert_(firing|resolved) "
    r"alertname=(\S+) group=(\S+) node=(\S+) bucket=(\d+)",
    re.M,
)
# The Alertmanager sink's longest backoff: after an outage it may wait this long to retry.
SINK_BACKOFF_MAX_S = 30.0
# A firing resolved this soon after it was decided may never leave the outbox as firing.
COALESCED_S = 1.0

DecisionKey = tuple[str, str, str, str, int]  # status, alertname, group, node ("None"), bucket


def decision_times(logs: Iterable[str]) -> dict[DecisionKey, float]:
    """Wall time (epoch s) each alert change was first decided, from the workers' logs."""
    out: dict[DecisionKey, float] = {}
    for text in logs:
        for m in DECISION_LINE.finditer(text):
            when = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            key = (m[2], m[3], m[4], m[5], int(m[6]))
            out[key] = min(when, out.get(key, when))
    return out


def _decision_key(record: Mapping[str, Any]) -> DecisionKey:
    labels = record["labels"]
    return (
        record["status"],
        labels["alertname"],
        labels["group"],
        str(labels.get("node")),
        int(record["bucket_ts"]),
    )


def _resolved_while_unreachable(
    records: list[Mapping[str, Any]],
    times: Mapping[DecisionKey, float],
    unreachable: Iterable[tuple[float, float]],
) -> bool:
    """Each firing of the alert was resolved before Alertmanager could be reached again,
    or within ``COALESCED_S`` of its decision (a warning XID superseded by the critical
    one a bucket later).

    The outbox keeps the latest state per alert, so such an alert reaches
    Alertmanager as resolved only: its API never lists it as active.
    """
    spans = list(unreachable)
    ordered = sorted(records, key=lambda r: (int(r["bucket_ts"]), r["status"] == "firing"))
    for i, record in enumerate(ordered):
        if record["status"] != "firing":
            continue
        resolve = next((r for r in ordered[i + 1 :] if r["status"] == "resolved"), None)
        fired = times.get(_decision_key(record))
        ended = None if resolve is None else times.get(_decision_key(resolve))
        if fired is None or ended is None:
            return False
        if ended - fired <= COALESCED_S:
            continue  # superseded in the outbox before it was sent: only the resolve goes out
        if not any(a <= fired and ended <= b + SINK_BACKOFF_MAX_S for a, b in spans):
            return False
    return True


def _resurrections(
    records: list[Mapping[str, Any]],
    times: Mapping[DecisionKey, float],
    poll_times: list[float],
    shown: set[int],
) -> int:
    """Times Alertmanager showed the alert again after a resolve had reached it and before
    it was decided firing again: a stale re-send. Gone and back each for two polls in a
    row (Alertmanager's list was seen to drop an active alert from one answer)."""
    ordered = sorted(records, key=lambda r: (int(r["bucket_ts"]), r["status"] == "firing"))
    count = 0
    for i, record in enumerate(ordered):
        resolved = times.get(_decision_key(record)) if record["status"] == "resolved" else None
        if resolved is None:
            continue
        refire = next((r for r in ordered[i + 1 :] if r["status"] == "firing"), None)
        until = times.get(_decision_key(refire), float("inf")) if refire else float("inf")
        seen = [k in shown for k, t in enumerate(poll_times) if resolved < t < until]
        pairs = list(pairwise(seen))
        gone = next((j for j, pair in enumerate(pairs) if pair == (False, False)), None)
        if gone is not None and (True, True) in pairs[gone:]:
            count += 1
    return count


def scored_buckets(worker: str, log_text: str) -> list[tuple[str, str, int, int]]:
    """``(worker, group, bucket_ts, nodes)`` for every bucket_scored line of one worker's log."""
    return [
        (worker, m[1], int(m[2]), int(m[3]))
        for line in log_text.splitlines()
        if (m := BUCKET_LINE.search(line))
    ]


@dataclass
class Samples:
    sent: int = 0  # in remote_write requests the sender got 2xx for
    requests: dict[str, int] = field(default_factory=dict)  # by HTTP status or error name
    ingest: dict[str, int] = field(default_factory=dict)  # by outcome: the ingests' /metrics


@dataclass
class ChaosReport:
    faults: list[str]
    samples: Samples
    frames_expected: int
    frames_scored: int  # node frames in the buckets' first scoring
    buckets_expected: int
    buckets_once: int
    buckets_twice: int  # scored more than once (a redelivery that was not recognised)
    buckets_never: int
    buckets_short: int  # scored, but with fewer nodes than expected (frames lost)
    buckets_by_two_workers: int
    buckets_unexpected: int  # scored live, not offline
    alerts_expected: int  # alert changes the in-process pipeline decides
    alerts_decided: int  # alert changes on the alerts topic
    alerts_decided_twice: int
    alerts_missing: int  # expected, never decided
    alerts_extra: int  # decided, not expected
    firing_decided: int  # distinct alerts (label sets) that were decided firing
    firing_delivered: int  # of those, seen active in Alertmanager
    firing_lost: int
    firing_resolved_unreachable: int  # fired and resolved while Alertmanager was unreachable
    am_duplicates: int
    am_resurrected: int  # shown again after a delivered resolve, without a new firing
    stale_at_end: int  # resolved by the last decision, still active in Alertmanager at the end
    missing_at_end: int  # firing by the last decision, not active in Alertmanager at the end
    workers: dict[str, int]  # buckets scored per worker
    details: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.buckets_never
            or self.buckets_twice
            or self.buckets_short
            or self.alerts_decided_twice
            or self.firing_lost
            or self.am_duplicates
            or self.am_resurrected
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def render(self) -> str:
        s = self.samples
        rows = [
            ("faults", ", ".join(self.faults) or "none"),
            ("samples sent (2xx)", s.sent),
            ("samples by ingest outcome", ", ".join(f"{k}: {v}" for k, v in s.ingest.items())),
            # the decoder skips series of metrics no feature reads before counting them
            ("samples of unread metrics (uncounted)", s.sent - sum(s.ingest.values())),
            ("requests", ", ".join(f"{k}: {v}" for k, v in sorted(s.requests.items()))),
            ("frames scored / expected", f"{self.frames_scored} / {self.frames_expected}"),
            ("buckets expected", self.buckets_expected),
            ("buckets scored once", self.buckets_once),
            ("buckets scored twice or more", self.buckets_twice),
            ("buckets never scored", self.buckets_never),
            ("buckets scored short of frames", self.buckets_short),
            ("buckets scored by two workers", self.buckets_by_two_workers),
            ("buckets per worker", ", ".join(f"{k}: {v}" for k, v in self.workers.items())),
            ("alert changes expected / decided", f"{self.alerts_expected} / {self.alerts_decided}"),
            ("alert changes decided twice", self.alerts_decided_twice),
            ("alert changes missing / extra", f"{self.alerts_missing} / {self.alerts_extra}"),
            ("alerts decided firing", self.firing_decided),
            ("alerts delivered (Alertmanager API)", self.firing_delivered),
            ("alerts lost", self.firing_lost),
            ("alerts resolved while AM unreachable", self.firing_resolved_unreachable),
            ("duplicate episodes in Alertmanager", self.am_duplicates),
            ("alerts shown again after resolve", self.am_resurrected),
            (
                "stale / missing in Alertmanager at end",
                f"{self.stale_at_end} / {self.missing_at_end}",
            ),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines.append(f"{'verdict':<{width}}  {'OK' if self.ok else 'LOSS OR DUPLICATES'}")
        return "\n".join(lines)


def _change_key(status: str, ident: Identity, bucket_ts: int) -> tuple[str, Identity, int]:
    return (status, ident, bucket_ts)


def tally(
    *,
    faults: Iterable[str],
    samples: Samples,
    expected_buckets: Mapping[tuple[str, int], int],
    scored: Iterable[tuple[str, str, int, int]],
    expected_changes: Iterable[tuple[str, Identity, int]],
    decided: Iterable[Mapping[str, Any]],
    am_seen: Mapping[Identity, set[int]],
    am_final: set[Identity],
    decision_times: Mapping[DecisionKey, float] | None = None,
    am_unreachable: Iterable[tuple[float, float]] = (),
    am_polls: tuple[list[float], Mapping[Identity, set[int]]] = ([], {}),
) -> ChaosReport:
    """Compare what was expected with what the workers, the topic and Alertmanager showed."""
    scorings: dict[tuple[str, int], list[tuple[str, int]]] = {}
    per_worker: Counter[str] = Counter()
    for worker, group, ts, nodes in scored:
        scorings.setdefault((group, ts), []).append((worker, nodes))
        per_worker[worker] += 1
    once = twice = never = short = two_workers = 0
    frames_scored = 0
    details: dict[str, list[Any]] = {"never": [], "twice": [], "short": []}
    for key, nodes in sorted(expected_buckets.items()):
        got = scorings.get(key, [])
        if not got:
            never += 1
            details["never"].append(list(key))
            continue
        once += len(got) == 1
        if len(got) > 1:
            twice += 1
            details["twice"].append([*key, [w for w, _ in got]])
        two_workers += len({w for w, _ in got}) > 1
        frames_scored += got[0][1]
        if got[0][1] < nodes:
            short += 1
            details["short"].append([*key, got[0][1], nodes])
    unexpected = sum(1 for key in scorings if key not in expected_buckets)

    expected = Counter(expected_changes)
    decided_keys: Counter[tuple[str, Identity, int]] = Counter()
    episodes: dict[Identity, set[int]] = {}
    last_status: dict[Identity, tuple[int, str]] = {}
    by_alert: dict[Identity, list[Mapping[str, Any]]] = {}
    for record in decided:
        ident = identity(record["labels"])
        by_alert.setdefault(ident, []).append(record)
        change = _change_key(record["status"], ident, int(record["bucket_ts"]))
        decided_keys[change] += 1
        if record["status"] == "firing":
            episodes.setdefault(ident, set()).add(epoch_ms(record["starts_at"]))
        previous = last_status.get(ident)
        if previous is None or previous[0] <= change[2]:
            last_status[ident] = (change[2], record["status"])
    missing = sum((expected - decided_keys).values())
    extra_keys = set(decided_keys) - set(expected)
    delivered = {i for i in episodes if am_seen.get(i)}
    unseen = sorted(set(episodes) - delivered)
    spans = list(am_unreachable)
    benign = [
        i for i in unseen if _resolved_while_unreachable(by_alert[i], decision_times or {}, spans)
    ]
    lost = [i for i in unseen if i not in benign]
    details["lost"] = [dict(i) for i in lost]
    details["resolved_while_unreachable"] = [dict(i) for i in benign]
    am_duplicates = sum(
        max(0, len(am_seen.get(i, ())) - len(starts)) for i, starts in episodes.items()
    )
    poll_times, shown = am_polls
    back = {
        i: n
        for i in by_alert
        if (n := _resurrections(by_alert[i], decision_times or {}, poll_times, shown.get(i, set())))
    }
    resurrected = sum(back.values())
    details["resurrected"] = [dict(i) for i in back]
    final = {i: status for i, (_, status) in last_status.items()}
    stale = [i for i, status in final.items() if status == "resolved" and i in am_final]
    missing_end = [i for i, status in final.items() if status == "firing" and i not in am_final]
    details["missing_at_end"] = [dict(i) for i in missing_end]
    return ChaosReport(
        faults=list(faults),
        samples=samples,
        frames_expected=sum(expected_buckets.values()),
        frames_scored=frames_scored,
        buckets_expected=len(expected_buckets),
        buckets_once=once,
        buckets_twice=twice,
        buckets_never=never,
        buckets_short=short,
        buckets_by_two_workers=two_workers,
        buckets_unexpected=unexpected,
        alerts_expected=sum(expected.values()),
        alerts_decided=sum(decided_keys.values()),
        alerts_decided_twice=sum(n - 1 for n in decided_keys.values() if n > 1),
        alerts_missing=missing,
        alerts_extra=len(extra_keys),
        firing_decided=len(episodes),
        firing_delivered=len(delivered),
        firing_lost=len(lost),
        firing_resolved_unreachable=len(benign),
        am_duplicates=am_duplicates,
        am_resurrected=resurrected,
        stale_at_end=len(stale),
        missing_at_end=len(missing_end),
        workers=dict(sorted(per_worker.items())),
        details=details,
    )
