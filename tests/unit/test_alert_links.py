"""What on-call gets with every alert: a runbook per alertname, the dashboard link, and
``action`` as a label that never moves under a firing alert."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import detectors
from detectors.alerts import FAMILIES, AlertChange
from detectors.failslow.alerts import FAIL_SLOW, JOB_SLOW, STAGE_ACTIONS
from detectors.gpu_health import (
    REMAP_ALERT,
    XID_ALERT,
    GpuHealthParams,
    GpuHealthState,
    active_gpu_alerts,
    step_gpu_health,
)
from streams.catalog import load_xid_catalog
from streams.settings import Settings
from streams.sinks.payloads import SUMMARIES, AlertLinks, alert_labels, to_payload, to_record

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / "docs" / "runbooks"
B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B


def _names_in_detectors() -> set[str]:
    """Every ``"Peerwatch…"`` string constant in detectors/: a new family cannot hide."""
    names = set()
    for path in Path(detectors.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = getattr(node, "value", None) if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"Peerwatch[A-Z][A-Za-z]+", value):
                names.add(value)
    return names


DETECTION_ALERTS = sorted({*FAMILIES, XID_ALERT, REMAP_ALERT, FAIL_SLOW, JOB_SLOW})


def test_the_alert_names_are_the_ones_the_code_defines() -> None:
    """The families' constants, every Peerwatch* literal in detectors/ and the summaries agree."""
    assert len(DETECTION_ALERTS) == 8
    assert _names_in_detectors() == set(DETECTION_ALERTS)
    assert set(SUMMARIES) == set(DETECTION_ALERTS)


@pytest.mark.parametrize("alertname", DETECTION_ALERTS)
def test_every_alert_has_a_runbook_with_the_three_sections(alertname: str) -> None:
    text = (RUNBOOKS / f"{alertname}.md").read_text()
    assert text.startswith(f"# {alertname}\n")
    for section in ("## What it means", "## What to check", "## What to do"):
        assert section in text, f"{alertname}.md lacks {section!r}"
    assert f"[{alertname}]({alertname}.md)" in (RUNBOOKS / "README.md").read_text()


def _catalog_actions() -> set[str]:
    data = tomllib.loads((ROOT / "streams" / "catalog" / "xid.toml").read_text())
    found: set[str] = set()

    def visit(entry: dict) -> None:
        for key in ("action", "repeat_action"):
            if key in entry:
                found.add(entry[key])
        for sub in entry.get("substatus", {}).values():
            visit(sub)

    for profile in data["profiles"].values():
        visit(profile.get("unknown", {}))
        for entry in profile.get("xid", {}).values():
            visit(entry)
    return found - {"IGNORE"}  # an ignored XID sends no alert


def test_the_xid_runbook_says_what_to_do_for_every_action_the_catalog_gives() -> None:
    text = (RUNBOOKS / "PeerwatchXid.md").read_text()
    actions = _catalog_actions()
    assert {"RESTART_APP", "RESET_GPU", "CONTACT_SUPPORT"} <= actions
    assert sorted(a for a in actions if f"`{a}`" not in text) == []


def test_the_fail_slow_runbook_says_what_to_do_at_every_stage() -> None:
    text = (RUNBOOKS / "PeerwatchFailSlow.md").read_text()
    assert sorted(a for a in STAGE_ACTIONS.values() if f"`{a}`" not in text) == []


def _change(node: str | None = "gpu-07", **kw) -> AlertChange:  # type: ignore[no-untyped-def]
    fields = dict(
        alertname=XID_ALERT, node=node, group="job a", status="firing", severity="critical",
        score=79.0, signals=(), reason="XID 79", bucket_ts=T0, starts_bucket_ts=T0,
        evidence_since_ts=T0, action="CONTACT_SUPPORT", labels=(("gpu", "3"),),
    )  # fmt: skip
    fields.update(kw)
    return AlertChange(**fields)  # type: ignore[arg-type]


def test_runbook_url_and_action_go_to_alertmanager_and_the_topic() -> None:
    links = AlertLinks("https://git.example/peerwatch/blob/main/docs/runbooks/")
    payload, record = to_payload(_change(), links), to_record(_change(), links)
    url = "https://git.example/peerwatch/blob/main/docs/runbooks/PeerwatchXid.md"
    assert payload["annotations"]["runbook_url"] == record.annotations["runbook_url"] == url
    assert payload["labels"]["action"] == record.labels["action"] == "CONTACT_SUPPORT"
    assert payload["annotations"]["action"] == "CONTACT_SUPPORT"


def test_the_default_runbook_url_is_the_repo_path() -> None:
    links = AlertLinks.from_settings(Settings())
    assert to_payload(_change(), links)["annotations"]["runbook_url"] == (
        "docs/runbooks/PeerwatchXid.md"
    )
    assert (ROOT / "docs/runbooks/PeerwatchXid.md").is_file()


def test_generator_url_is_the_dashboard_on_the_group_and_node() -> None:
    links = AlertLinks(dashboard_url="https://grafana.example/d/peerwatch/peerwatch?orgId=2")
    url = urlsplit(to_payload(_change(), links)["generator_url"])
    assert url._replace(query="").geturl() == "https://grafana.example/d/peerwatch/peerwatch"
    assert parse_qs(url.query) == {
        "orgId": ["2"], "var-group": ["job a"], "var-node": ["gpu-07"],
        "from": [str(T0 - 3_600_000)], "to": ["now"],
    }  # fmt: skip


def test_a_group_alert_links_the_dashboard_without_a_node() -> None:
    links = AlertLinks(dashboard_url="https://grafana.example/d/peerwatch")
    query = parse_qs(urlsplit(links.generator_url(_change(node=None))).query)
    assert "var-node" not in query and query["var-group"] == ["job a"]


def test_without_a_dashboard_generator_url_is_an_absolute_runbook_url() -> None:
    links = AlertLinks("https://git.example/peerwatch/docs/runbooks")
    url = "https://git.example/peerwatch/docs/runbooks/PeerwatchXid.md"
    assert to_payload(_change(), links)["generator_url"] == url


def test_a_relative_runbook_is_no_generator_url() -> None:
    """Regression: the default repo path as generatorURL made Alertmanager answer 422 to
    every alert (it must be an absolute URI)."""
    assert to_payload(_change())["generator_url"] == ""


@pytest.mark.parametrize("url", ["grafana/d/peerwatch", "/d/peerwatch", "ftp://x/d"])
def test_dashboard_url_must_be_absolute_http(url: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        Settings(dashboard_url=url)


def test_the_grafana_dashboard_is_the_default_link_without_its_credentials() -> None:
    """With Grafana annotations on, alerts link the dashboard the annotations land on."""
    settings = Settings(grafana_url="https://bot:s3cret@grafana.example/")
    url = AlertLinks.from_settings(settings).generator_url(_change())
    assert url.startswith("https://grafana.example/d/peerwatch?var-group=job+a&var-node=gpu-07&")
    assert "s3cret" not in url


def test_dashboard_url_setting_empty_is_unset() -> None:
    assert Settings(dashboard_url="").dashboard_url is None


def test_an_alert_without_an_action_has_no_action_label() -> None:
    assert "action" not in alert_labels(_change(action=None))


def test_every_label_set_sent_firing_is_resolved_or_still_active() -> None:
    """Repeated XIDs escalate the action (64: RESET_GPU, then 79): with ``action`` a label,
    the old label set is resolved before the new one fires, so no alert is left behind in
    Alertmanager firing until it times out."""
    catalog = load_xid_catalog("report")
    state = GpuHealthState.new(catalog, GpuHealthParams())
    fired, resolved = [], set()
    for i, xid in enumerate((0.0, 64.0, 79.0, 79.0)):
        frames = {"n1": {"xid_last@0": xid}}
        for change in step_gpu_health(state, "job", T0 + i * B, frames, GpuHealthParams()):
            labels = tuple(sorted(to_payload(change)["labels"].items()))
            (fired.append if change.status == "firing" else resolved.add)(labels)
    active = {tuple(sorted(to_payload(a)["labels"].items())) for a in active_gpu_alerts(state)}
    assert len({dict(f)["action"] for f in fired}) == 2  # it did escalate
    assert set(fired) - resolved == active and len(active) == 1
