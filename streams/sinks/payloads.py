"""Turn detector alert states into what the sinks send.

One function per output shape: the Alertmanager payload (labels identify the
alert; annotations say why, with the top signals and their z) and the
``peerwatch.alerts`` record (the same plus machine-readable scoring detail).
Every alert links its runbook (``runbook_url``) and, as ``generatorURL``, the
dashboard filtered to its group and node (:class:`AlertLinks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from detectors.families import REGISTRY
from detectors.vocabulary import AlertChange
from streams.records import AlertRecord
from streams.settings import Settings
from streams.sinks.alertmanager import rfc3339
from streams.sinks.credentials import without_userinfo

# The annotation template per alertname ({node}, {group}).
SUMMARIES = {f.name: f.summary for f in REGISTRY.values()}


DASHBOARD_LOOKBACK_MS = 3_600_000  # the dashboard link opens an hour before the alert started


@dataclass(frozen=True)
class AlertLinks:
    """Where an alert points on-call: ``runbook_base`` holds ``<alertname>.md`` (the repo's
    docs/runbooks, or wherever it is browsable); ``dashboard_url`` is the Grafana
    dashboard, whose ``group`` and ``node`` variables the link sets."""

    runbook_base: str = "docs/runbooks"
    dashboard_url: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertLinks:
        """``dashboard_url``, else the dashboard the Grafana annotations go to (``grafana_url``
        without credentials, ``/d/<grafana_dashboard_uid>``)."""
        dashboard = settings.dashboard_url
        if dashboard is None and settings.grafana_url and settings.grafana_dashboard_uid:
            base, _ = without_userinfo(settings.grafana_url)
            dashboard = f"{base.rstrip('/')}/d/{settings.grafana_dashboard_uid}"
        return cls(settings.runbook_base_url, dashboard)

    def runbook_url(self, alertname: str) -> str:
        known = REGISTRY.get(alertname)
        page = known.runbook if known is not None else f"{alertname}.md"
        return f"{self.runbook_base.rstrip('/')}/{page}"

    def generator_url(self, change: AlertChange) -> str:
        """The dashboard on the alert's group and node from an hour before it started; the
        runbook when there is no dashboard and it is an absolute URL, else "" (Alertmanager
        answers 422 to a generatorURL that is not an absolute URI, such as the default
        repo path). Fixed per alert (no wall clock in it)."""
        if not self.dashboard_url:
            runbook = self.runbook_url(change.alertname)
            return runbook if _is_absolute(runbook) else ""
        params = [("var-group", change.group)]
        if change.node:
            params.append(("var-node", change.node))
        params += [("from", str(change.starts_bucket_ts - DASHBOARD_LOOKBACK_MS)), ("to", "now")]
        parts = urlsplit(self.dashboard_url)
        query = "&".join(q for q in (parts.query, urlencode(params)) if q)
        return urlunsplit(parts._replace(query=query))


DEFAULT_LINKS = AlertLinks()


def _is_absolute(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme and parts.netloc)


def _signal_text(signals: Any) -> str:
    parts = []
    for s in signals:
        where = f" gpu{s.gpu}" if getattr(s, "gpu", None) else ""
        parts.append(f"{s.feature}{where} z={s.z:+.1f} ({s.value:.4g} vs peers {s.median:.4g})")
    return "; ".join(parts)


def alert_labels(change: AlertChange) -> dict[str, str]:
    """The alert's identity in Alertmanager: it must not change while the alert fires.

    ``gpu`` is a label only where it identifies the alert (per-GPU XID, remap
    and fail-slow alerts set it in ``change.labels``); a node alert's worst GPU
    changes with its strongest signal, so it is an annotation (``worst_gpu``).
    ``action`` is a label too, for routes and inhibitions: the detectors resolve an
    alert and fire a new one when its action escalates, so it never moves under a
    firing alert.
    """
    labels = {
        "alertname": change.alertname,
        "severity": change.severity,
        "group": change.group,
        "source": "peerwatch",
    }
    if change.node:
        labels["node"] = change.node
    labels.update(change.labels)
    if change.action:
        labels["action"] = change.action
    return labels


def _worst_gpu(change: AlertChange) -> str | None:
    if any(k == "gpu" for k, _ in change.labels):
        return None
    gpu = next((s.gpu for s in change.signals if getattr(s, "gpu", None)), None)
    return None if gpu is None else str(gpu)


def alert_annotations(change: AlertChange, links: AlertLinks = DEFAULT_LINKS) -> dict[str, str]:
    template = SUMMARIES.get(change.alertname, "{node} {group}: anomaly")
    return {
        "summary": template.format(node=change.node or "-", group=change.group),
        "runbook_url": links.runbook_url(change.alertname),
        "description": change.reason,
        "signals": _signal_text(change.signals),
        "score": f"{change.score:.2f}",
        **({"worst_gpu": gpu} if (gpu := _worst_gpu(change)) is not None else {}),
        **({"action": change.action} if change.action else {}),
        **({"lead_s": f"{change.lead_s:.0f}"} if change.lead_s is not None else {}),
        **dict(change.annotations),
    }


def to_payload(change: AlertChange, links: AlertLinks = DEFAULT_LINKS) -> dict[str, Any]:
    """What ``AlertmanagerSink.submit`` takes."""
    return {
        "status": change.status,
        "labels": alert_labels(change),
        "annotations": alert_annotations(change, links),
        "starts_at_s": change.starts_bucket_ts / 1000.0,
        "generator_url": links.generator_url(change),
    }


def to_record(change: AlertChange, links: AlertLinks = DEFAULT_LINKS) -> AlertRecord:
    """The ``peerwatch.alerts`` message."""
    return AlertRecord(
        status=change.status,
        labels=alert_labels(change),
        annotations=alert_annotations(change, links),
        starts_at=rfc3339(change.starts_bucket_ts / 1000.0),
        ends_at=rfc3339(change.bucket_ts / 1000.0) if change.status == "resolved" else None,
        score=float(change.score),
        signals=[
            {
                "feature": s.feature,
                "z": float(s.z),
                "value": float(s.value),
                "median": float(s.median),
                "gpu": s.gpu,
            }
            for s in change.signals
        ],
        bucket_ts=change.bucket_ts,
        action=change.action,
        lead_s=change.lead_s,
    )
