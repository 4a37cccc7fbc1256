"""Wire records of the alerts and kernel-log topics (Faust records, JSON).

Agents convert them to plain detector inputs at the boundary. Frames are not
here: the ingest, which runs without Faust, writes them (``streams.frames``).
"""

from __future__ import annotations

import faust


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
