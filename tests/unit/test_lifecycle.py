"""detectors.lifecycle: the transitions every alert family runs on (peer scoring's too)."""

from __future__ import annotations

from detectors.lifecycle import Firing, clear, confirm, resolved
from detectors.vocabulary import AlertChange

B = 30_000


def proposed(ts: int, reason: str = "score 9.0 >= 8") -> AlertChange:
    return AlertChange(
        "PeerwatchNodeDeviation", "n1", "job", "firing", "warning", 9.0, (), reason, ts, ts, 0
    )


def test_confirm_fires_once_the_streak_reaches_the_count_and_sends_nothing_before() -> None:
    assert confirm(1, 3, proposed(0), 0) == (None, [])
    assert confirm(2, 3, proposed(B), B) == (None, [])
    firing, sent = confirm(3, 3, proposed(2 * B), 2 * B)
    assert sent == [proposed(2 * B)]
    assert firing == Firing(proposed(2 * B), 2 * B)


def test_confirm_with_a_count_of_one_fires_at_once() -> None:
    assert confirm(1, 1, proposed(0), 0)[1] == [proposed(0)]


def test_clear_counts_buckets_without_evidence_and_resolves_with_the_old_reason() -> None:
    once, gone = clear(
        Firing(proposed(0), 0), B, resolve_after=2, why="no evidence for {n} buckets"
    )
    assert gone is None and once is not None and once.clear_streak == 1
    kept, gone = clear(once, 2 * B, resolve_after=2, why="no evidence for {n} buckets")
    assert kept is None and gone is not None
    assert (gone.status, gone.bucket_ts) == ("resolved", 2 * B)
    assert gone.reason == "no evidence for 2 buckets; was: score 9.0 >= 8"


def test_resolved_at_once_leads_the_reason_with_why() -> None:
    gone = resolved(proposed(0), B, "node left the group")
    assert (gone.status, gone.bucket_ts, gone.starts_bucket_ts) == ("resolved", B, 0)
    assert gone.reason == "node left the group; was: score 9.0 >= 8"
