"""The modules of streams/ and detectors/ import each other as a DAG: no import cycles.

Module-level imports count, those under ``if TYPE_CHECKING:`` too (a type-only
cycle is still two modules that cannot be understood apart). Imports inside a
function do not: they are how a command loads what only it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "detectors")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _top_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Imports run at import time: the module's own and those in its ifs and trys."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _top_level(block)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _top_level(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            for alias in node.names:  # ``from pkg import module`` imports the module
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "streams.frames" in graph["streams.worker.windows"]
    assert "streams.lab.simulator.config" in graph["streams.lab.simulator.traits"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_streams_and_detectors_have_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def _imports_anywhere(path: Path) -> set[str]:
    """Every module a file names in an import, at any depth (functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_service_does_not_import_the_lab() -> None:
    """The live service (detectors/, streams/ outside streams.lab) runs without the lab,
    as in the service image; only the CLI's lab commands load it, inside themselves."""
    offenders = {
        name: sorted(n for n in _imports_anywhere(path) if n.startswith("streams.lab"))
        for name, path in modules().items()
        if not name.startswith("streams.lab")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert set(offenders) <= {"streams.cli"}, offenders
    graph = import_graph()  # and the CLI only inside its lab commands
    assert not any(t.startswith("streams.lab") for t in graph["streams.cli"])


SHELL_LIBRARIES = ("faust", "aiokafka", "httpx", "aiohttp", "prometheus_client", "asyncio")


def test_detectors_import_no_io_library() -> None:
    """detectors/ is pure: no Kafka, HTTP, metrics or event-loop library, at any depth."""
    offenders = {
        name: sorted(n for n in _imports_anywhere(path) if n.split(".")[0] in SHELL_LIBRARIES)
        for name, path in modules().items()
        if name.startswith("detectors")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert "faust" in {n.split(".")[0] for n in _imports_anywhere(ROOT / "streams/worker/app.py")}
