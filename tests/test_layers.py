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


LAYERS = {
    "records": {"app", "app.config", "app.messages", "app.metrics", "app.language",
                "app.clock", "app.tts.base"},
    "stages": {"app.vad", "app.asr", "app.whisper_read", "app.asrhost", "app.audio",
               "app.llm", "app.budget", "app.replytext",
               "app.chunking", "app.endofturn", "app.smartturn", "app.interruption",
               "app.padding", "app.servermetrics", "app.tts", "app.tts.edge",
               "app.tts.espeak", "app.tts.kokoro", "app.tts.piper"},
    "turn": {"app.session", "app.wire", "app.turn", "app.audiogate", "app.turnlog",
             "app.floor", "app.floor_types", "app.eventlog"},
    "chain": {"app.pipeline", "app.anchor", "app.prompt", "app.rival"},
    "conversation": {"app.conversation", "app.seat"},
    "web": {"app.ui", "app.hub", "app.transport", "app.views", "app.plots", "app.server",
            "app.client", "app.prometheus", "app.realtime", "app.realtime_out",
            "app.realtime_reply", "app.realtime_protocol", "app.realtime_audio"},
    "operations": {"app.machine", "app.launch", "app.gpuplan", "app.cli", "app.workers",
                   "app.prepare", "app.__main__"},
}
"""The app's layers, lowest first (docs/ARCHITECTURE.md): a module imports from its own
layer or lower ones only. The state machine (`app.floor`) sits below the chain it drives."""


def test_imports_point_down_the_layers():
    graph = app_imports()
    rank = {m: i for i, layer in enumerate(LAYERS.values()) for m in layer}
    assert set(graph) == set(rank), f"place these in a layer: {set(graph) ^ set(rank)}"
    upward = [f"{m} -> {d}" for m, deps in graph.items() for d in deps
              if d in rank and rank[d] > rank[m]]
    assert not upward, upward
    # pure: no session, no thread, no I/O
    assert graph["app.floor"] <= {"app.messages", "app.floor_types"}
