"""The shipped Grafana dashboard as its tests read it: panels, queries, variables."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "peerwatch.json"
_LABEL_VALUES = re.compile(r"label_values\((?P<match>.+),\s*(?P<label>\w+)\)")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too (rows themselves not)."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", ())
        else:
            yield panel


def queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(panel title / refId, expr)`` of every query target."""
    for panel in panels(dashboard):
        for target in panel.get("targets", ()):
            yield f"{panel['title']} / {target['refId']}", target["expr"]


def variable(dashboard: Mapping[str, Any], name: str) -> dict[str, Any]:
    (found,) = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    return found


def label_values(query: str) -> tuple[str, str]:
    """``(series selector, label)`` of a ``label_values(selector, label)`` variable query."""
    found = _LABEL_VALUES.fullmatch(query.strip())
    if found is None:
        raise ValueError(f"not a label_values() query: {query!r}")
    return found["match"].strip(), found["label"]


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` as Grafana sends it for single-value variables (``$name``/``${name}``).

    Values are used as they are: a test passes names without regex metacharacters.
    """

    def one(found: re.Match[str]) -> str:
        name = found["braced"] or found["plain"]
        if name not in values:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return values[name]

    return re.sub(r"\$(?:\{(?P<braced>\w+)\}|(?P<plain>\w+))", one, expr)
