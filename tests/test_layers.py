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
                # `from app.core import floor`: the module floor, not the package
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if (ROOT / sub.replace(".", "/")).with_suffix(".py").exists()
                             or (ROOT / sub.replace(".", "/") / "__init__.py").exists()
                             else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("app.")}
        graph[name] = deps - {name}
    return graph


def test_the_app_has_no_import_circle():
    graph = app_imports()
    conversation = graph["app.core.conversation"]
    assert len(graph) > 20 and conversation >= {"app.core.pipeline", "app.core.turn"}
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
    "records": {"app", "app.core", "app.stages", "app.web", "app.ops", "app.paths",
                "app.messages", "app.metrics", "app.language", "app.clock", "app.stages.tts.base"},
    "stages": {"app.stages.vad", "app.stages.asr", "app.stages.asr_config",
               "app.stages.whisper_read", "app.stages.asrhost",
               "app.stages.host", "app.stages.tts.host",
               "app.stages.audio", "app.stages.llm", "app.stages.budget", "app.stages.replytext",
               "app.stages.chunking", "app.stages.endofturn", "app.stages.smartturn",
               "app.stages.interruption", "app.stages.echo", "app.stages.padding",
               "app.stages.servermetrics",
               "app.stages.tts", "app.stages.tts.edge", "app.stages.tts.espeak",
               "app.stages.tts.kokoro", "app.stages.tts.piper"},
    "settings": {"app.config"},
    "turn": {"app.core.session", "app.core.wire", "app.core.turn", "app.core.audiogate",
             "app.core.turnlog", "app.core.floor", "app.core.floor_types", "app.core.eventlog"},
    "chain": {"app.core.pipeline", "app.core.anchor", "app.core.prompt", "app.core.rival"},
    "conversation": {"app.core.conversation", "app.core.seat"},
    "web": {"app.web.ui", "app.web.hub", "app.web.transport", "app.web.views", "app.web.plots",
            "app.web.server", "app.web.client", "app.web.prometheus", "app.web.realtime",
            "app.web.realtime_out", "app.web.realtime_reply", "app.web.realtime_protocol",
            "app.web.realtime_audio"},
    "operations": {"app.ops.machine", "app.ops.launch", "app.ops.gpuplan", "app.ops.cli",
                   "app.ops.workers", "app.ops.prepare", "app.__main__"},
}
"""The app's layers, lowest first (docs/ARCHITECTURE.md): a module imports from its own
layer or lower ones only. Each stage's settings live beside it; `app.config`'s `AppConfig`
gathers them, so it sits on the stages, under what reads it. The state machine
(`app.core.floor`) sits below the chain it drives."""


def test_imports_point_down_the_layers():
    graph = app_imports()
    rank = {m: i for i, layer in enumerate(LAYERS.values()) for m in layer}
    assert set(graph) == set(rank), f"place these in a layer: {set(graph) ^ set(rank)}"
    upward = [f"{m} -> {d}" for m, deps in graph.items() for d in deps
              if d in rank and rank[d] > rank[m]]
    assert not upward, upward
    # pure: no session, no thread, no I/O
    assert graph["app.core.floor"] <= {"app.messages", "app.core.floor_types"}


def test_folders_point_down():
    """The folders follow the layers: app/'s top-level records <- stages/ <- core/ <- web/
    <- ops/ (and `python -m app`); a folder imports from itself or lower ones only. The one
    top-level module above the records, `app.config` (the stages' settings gathered),
    counts with stages/."""
    order = ["app", "stages", "core", "web", "ops"]

    def folder(module: str) -> int:
        if module == "app.__main__":
            return len(order)
        if module == "app.config":
            return order.index("stages")
        parts = module.split(".")
        return order.index(parts[1]) if len(parts) > 2 and parts[1] in order else 0

    upward = [f"{m} -> {d}" for m, deps in app_imports().items() for d in deps
              if folder(d) > folder(m)]
    assert not upward, upward
