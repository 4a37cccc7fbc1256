"""Wire records: what travels on peerwatch's Kafka topics.

Faust ``Record`` classes live here and nowhere else; agents convert them to
plain detector inputs at the boundary. All records are JSON.
"""

from __future__ import annotations

import faust


class Frame(faust.Record, serializer="json"):
    """One node's features for one 30-s bucket (topic ``peerwatch.frames``, key = group).

    ``ts`` is the bucket start in epoch ms. ``values`` holds only the features
    that were observed: a missing feature is absent, never 0. ``gpus`` names the
    worst GPU for features reduced over GPUs. Several frames for the same
    (node, ts) may arrive (a late scrape, a resent request): they merge with the
    feature's own reduction, which is idempotent.
    """

    group: str
    node: str
    ts: int
    values: dict[str, float]
    gpus: dict[str, str] = {}
    left: bool = False  # departure notice: the node is no longer in this group
    role: str | None = None  # the node's role in its group (a ``role_labels`` value)
    # the group's label was on none of the node's series this bucket: kept on hold
    on_hold: bool = False


class AlertRecord(faust.Record, serializer="json"):
    """An alert as sent to Alertmanager, plus scoring detail.

    Topic ``peerwatch.alerts``, key = node (the group for group-level alerts).
    """

    status: str  # "firing" | "resolved"
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str | None
    score: float
    signals: list[dict]  # [{"feature", "z", "value", "median", "gpu"}]
    action: str | None = None
    lead_s: float | None = None
    bucket_ts: int = 0


class XidLine(faust.Record, serializer="json"):
    """A kernel log line from a node (topic ``peerwatch.xid``, key = group).

    Shipped by ``peerwatch xid-log`` (or any log shipper) with the node and the
    peer group it belongs to; the worker parses ``NVRM: Xid`` lines itself.
    """

    group: str
    node: str
    ts: int  # epoch ms when the line was read
    line: str
