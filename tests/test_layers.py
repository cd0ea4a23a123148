"""The app's modules import one way: no module imports, even for types only, one that
imports it back (directly or around a circle)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def app_imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "app").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("app.")}
        graph[name] = deps - {name}
    return graph


def test_the_app_has_no_import_circle():
    graph = app_imports()
    assert len(graph) > 20 and graph["app.conversation"] >= {"app.pipeline", "app.turn"}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        for dep in sorted(graph.get(node, ())):
            if dep in path:
                circles.append(path[path.index(dep):] + [dep])
            elif dep not in done:
                visit(dep, [*path, dep])
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        visit(start, [start])
    assert not circles, circles
