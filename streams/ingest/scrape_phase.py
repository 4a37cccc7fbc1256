"""Scrape rounds: which bucket a sample belongs to, from its scrape target's phase.

Prometheus spreads its targets' scrape offsets over the whole interval and
jitters each scrape by up to hundreds of ms. A target scraped at +29.8 s of a
30-s bucket lands in the next bucket whenever the jitter is positive: cutting
buckets at multiples of ``bucket_ms`` leaves its node empty in one bucket and
doubled in the next. So the builder learns each target's *phase* (where in the
interval its scrapes fall, from its first sample) and assigns a sample to the
round of the nearest scheduled scrape ``phase + k * bucket_ms``: a tolerance of
half an interval, so jitter never moves a sample to another bucket. Buckets
stay aligned to multiples of ``bucket_ms`` (round k is the bucket holding its
scheduled time). A sample more than ``relearn_ms`` off phase goes to the bucket
its timestamp falls in; when the phase really moves (a Prometheus restarted
with other offsets), two consecutive scrapes off phase with none on phase in
between re-learn it. A target scraped twice per bucket is off phase every
other scrape, never twice in a row, so it keeps its phase.
"""

from __future__ import annotations

__all__ = ["ScrapePhases", "ScrapeTarget"]


class ScrapeTarget:
    """One scrape target (``instance`` with its port, ``job``, HA replica).

    ``shift`` is what a timestamp gets added before cutting at ``bucket_ms``
    (half an interval minus the phase), None until the first sample. The
    on-phase window of the latest round -- timestamps ``lo`` .. ``hi`` go to
    ``bucket`` -- lets the hot path place a scrape's many series with one
    comparison.
    """

    __slots__ = ("bucket", "hi", "lo", "node", "off_ts", "ok_ts", "shift")

    def __init__(self, node: str = "") -> None:
        self.node = node
        self.shift: int | None = None
        self.ok_ts = -1  # a sample on phase, of the latest round seen
        self.off_ts = -1  # the first sample off phase since then
        self.lo, self.hi, self.bucket = 1, 0, 0  # an empty window

    @property
    def last_ts(self) -> int:
        return max(self.ok_ts, self.off_ts)


class ScrapePhases:
    """Learns phases and decides a target's round; the hot path inlines ``bucket``."""

    def __init__(self, bucket_ms: int, relearn_ms: int | None = None) -> None:
        if bucket_ms <= 0:
            raise ValueError("bucket_ms must be > 0")
        self.bucket_ms = bucket_ms
        self.half = bucket_ms // 2
        # jitter is ms to a few hundred ms; a sixth of an interval (5 s of 30) is a move
        self.relearn_ms = bucket_ms // 6 if relearn_ms is None else relearn_ms
        if not 0 < self.relearn_ms < self.half:
            raise ValueError("relearn_ms must be > 0 and below half a bucket")
        # a sample is on phase if  low <= (ts + shift) mod bucket_ms <= high
        self.low = self.half - self.relearn_ms
        self.high = self.half + self.relearn_ms
        self.relearned = 0
        self.learned = 0  # phases taken (first samples and re-learnings): a change to keep

    def learn(self, target: ScrapeTarget, ts: int) -> int:
        """Take ``ts`` as the target's phase; returns the new shift."""
        shift = target.shift = self.half - ts % self.bucket_ms
        target.ok_ts = ts
        self.learned += 1
        return shift

    def bucket(self, target: ScrapeTarget, ts: int) -> int:
        """The bucket of ``ts`` for ``target`` (learning or re-learning its phase if due).

        Callers may skip this when ``target.lo <= ts <= target.hi``: then it is
        ``target.bucket``.
        """
        shift = target.shift
        if shift is None:
            shift = self.learn(target, ts)
        d = ts + shift
        offset = d % self.bucket_ms
        if self.low <= offset <= self.high:
            bucket = d - offset
            if ts > target.ok_ts:
                target.ok_ts = ts
                target.bucket = bucket
                target.lo = bucket - shift + self.low
                target.hi = bucket - shift + self.high
            return bucket
        return self.off_phase(target, ts)

    def off_phase(self, target: ScrapeTarget, ts: int) -> int:
        """The bucket of a sample off its target's phase; re-learns on the second scrape
        off phase in a row (samples of one scrape share a timestamp, so they count once)."""
        gap = ts - target.off_ts
        if target.off_ts > target.ok_ts and self.half <= gap <= self.bucket_ms + self.half:
            self.learn(target, ts)
            self.relearned += 1
            d = ts + (target.shift or 0)
            return d - d % self.bucket_ms
        if target.off_ts <= target.ok_ts or gap > self.bucket_ms + self.half:
            target.off_ts = ts
        # unsure which round this is: the bucket its timestamp falls in
        return ts - ts % self.bucket_ms
