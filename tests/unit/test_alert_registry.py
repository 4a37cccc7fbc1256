"""The alert registry against everything shipped that names an alert: the Alertmanager
routes and inhibitions, the PrometheusRule, the dashboard, the runbooks, and the code."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from detectors.failslow.alerts import STAGE_ACTIONS
from detectors.families import REGISTRY, AlertFamily
from detectors.remap import _ACTION, _SEVERITY
from streams.lab.evaluation.taxonomy import FAMILY_CLASSES, FAULT_CLASSES
from streams.sinks.payloads import SUMMARIES
from tests.unit.test_alert_links import _catalog_actions

ROOT = Path(__file__).resolve().parents[2]
ALERTMANAGER = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
RULES = yaml.safe_load((ROOT / "deploy/kubernetes/base/prometheusrule.yaml").read_text())
HEALTH = {r["alert"] for g in RULES["spec"]["groups"] for r in g["rules"] if "alert" in r}
KNOWN = set(REGISTRY) | HEALTH
NAME = re.compile(r"Peerwatch[A-Z][A-Za-z]+")
_MATCHER = re.compile(r'\s*(\w+)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*')


def _matches(matchers: Sequence[str], labels: Mapping[str, str]) -> bool:
    """Alertmanager's matcher semantics (regexes are anchored; a missing label is "")."""
    for matcher in matchers:
        found = _MATCHER.fullmatch(matcher)
        assert found is not None, f"cannot read matcher {matcher!r}"
        name, op, value = found.groups()
        have = labels.get(name, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    return True


def _receivers(route: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """The receivers an alert reaches through ``route`` (children first, ``continue`` on)."""
    out: list[str] = []
    for child in route.get("routes", ()):
        if _matches(child.get("matchers", ()), labels):
            child = {"receiver": route["receiver"], **child}
            out += _receivers(child, labels)
            if not child.get("continue", False):
                break
    return out or [route["receiver"]]


def _expected(family: AlertFamily, severity: str, action: str | None) -> list[str]:
    """What the registry says: a draining action goes to the scheduler's hook too, a critical
    alert pages on-call, anything else stays on the default receiver."""
    drain = action in family.drains
    page = ["oncall"] if severity == "critical" else ([] if drain else ["default"])
    return (["node-remediation"] if drain else []) + page


def _cases() -> list[tuple[str, str, str | None]]:
    return [
        (f.name, severity, action)
        for f in REGISTRY.values()
        for severity in f.severities
        for action in (None, *f.actions)
    ]


@pytest.mark.parametrize(("alertname", "severity", "action"), _cases())
def test_the_shipped_routes_send_every_family_where_the_registry_says(
    alertname: str, severity: str, action: str | None
) -> None:
    family = REGISTRY[alertname]
    labels = {"source": "peerwatch", "alertname": alertname, "severity": severity}
    labels |= {"group": "job-1"} | ({"node": "gpu001"} if family.node_level else {})
    if action is not None:
        labels["action"] = action
    assert _receivers(ALERTMANAGER["route"], labels) == _expected(family, severity, action)


def test_the_shipped_inhibitions_are_the_registrys() -> None:
    expected: dict[str, set[str]] = {}
    for f in REGISTRY.values():
        for source in f.inhibited_by:
            expected.setdefault(source, set()).add(f.name)
    shipped: dict[str, set[str]] = {}
    for rule in ALERTMANAGER["inhibit_rules"]:
        sources = [n for n in REGISTRY if _matches(rule["source_matchers"], {"alertname": n})]
        if not sources:
            continue  # peerwatch's own health alerts
        assert rule["equal"] == ["node"], rule
        targets = {n for n in REGISTRY if _matches(rule["target_matchers"], {"alertname": n})}
        for source in sources:
            shipped.setdefault(source, set()).update(targets)
    assert shipped == expected


def test_every_alertname_matcher_in_the_alertmanager_config_matches_a_known_alert() -> None:
    matcher_lists = [r.get("matchers", ()) for r in ALERTMANAGER["route"].get("routes", ())]
    for rule in ALERTMANAGER["inhibit_rules"]:
        matcher_lists += [rule["source_matchers"], rule["target_matchers"]]
    for matchers in matcher_lists:
        for matcher in matchers:
            if matcher.replace(" ", "").startswith("alertname"):
                hits = [n for n in KNOWN if _matches([matcher], {"alertname": n})]
                assert hits, f"{matcher!r} matches no alert peerwatch sends"


def _shipped_files() -> list[Path]:
    files = [p for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    files += [p for p in (ROOT / "docs" / "runbooks").rglob("*") if p.is_file()]
    return [p for p in files if p.name != "alertmanager.yml"]  # its regexes: checked above


@pytest.mark.parametrize("path", _shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_alert_a_shipped_file_names_is_a_family_or_a_health_rule(path: Path) -> None:
    unknown = set(NAME.findall(path.read_text())) - KNOWN
    assert not unknown, f"{path.relative_to(ROOT)} names {sorted(unknown)}: not in the registry"


@pytest.mark.parametrize("alertname", sorted(REGISTRY))
def test_every_family_has_its_runbook_listed(alertname: str) -> None:
    runbook = REGISTRY[alertname].runbook
    assert (ROOT / "docs" / "runbooks" / runbook).is_file()
    assert f"({runbook})" in (ROOT / "docs" / "runbooks" / "README.md").read_text()


def test_the_sinks_and_the_taxonomy_read_the_registry() -> None:
    assert set(SUMMARIES) == set(FAMILY_CLASSES) == set(REGISTRY)
    for f in REGISTRY.values():
        assert f.klass is None or f.klass in FAULT_CLASSES, f.name
        assert f.summary.format(node="n", group="g")


def test_the_registry_knows_the_actions_and_severities_the_detectors_give() -> None:
    assert set(REGISTRY["PeerwatchXid"].actions) == _catalog_actions()
    assert set(REGISTRY["PeerwatchRowRemap"].actions) == set(_ACTION.values())
    assert set(REGISTRY["PeerwatchRowRemap"].severities) == set(_SEVERITY.values())
    for name in ("PeerwatchFailSlow", "PeerwatchJobSlow"):
        assert REGISTRY[name].actions == tuple(STAGE_ACTIONS.values())


def test_a_family_missing_from_the_registry_is_caught() -> None:
    """The name check is not vacuous: a name outside the registry and the rules is flagged."""
    assert set(NAME.findall("see PeerwatchNodeMelted")) - KNOWN == {"PeerwatchNodeMelted"}
