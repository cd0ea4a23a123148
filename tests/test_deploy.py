"""deploy/compose.yaml, checked as far as a machine without Docker and GPUs allows: it
parses, its vLLM flags are the ones the app launches with (the model card's), and the app's
flags pass the app's own parser, in the image the Dockerfile builds."""

import re

import yaml

from app.config import PRIMARY_MODEL
from app.ops.cli import from_args, parse
from app.ops.gpuplan import MARLIN_DENSE
from app.ops.launch import CARD_FLAGS, VOICE_FLAGS
from app.ops.workers import split_slots
from tests.conftest import ROOT

COMPOSE = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())


def pairs(words: list[str]) -> list[tuple[str, str | None]]:
    """Flags with their values (None for a bare flag)."""
    out = []
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out.append((w, None if nxt is None or nxt.startswith("--") else nxt))
    return out


def test_the_model_servers_run_with_the_cards_flags():
    vllm = COMPOSE["services"]["vllm"]
    flags = pairs(vllm["command"])
    for flag in pairs(CARD_FLAGS + VOICE_FLAGS):
        assert flag in flags, flag
    assert ("--model", PRIMARY_MODEL) in flags and ("--data-parallel-size", "2") in flags
    assert vllm["environment"] == MARLIN_DENSE
    gpus = vllm["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpus["driver"] == "nvidia" and "gpu" in gpus["capabilities"]


def test_the_apps_flags_pass_its_parser_in_the_dockerfiles_image(monkeypatch):
    app = COMPOSE["services"]["app"]
    monkeypatch.setenv("VOICE_AGENT_AUTH", "me:secret")  # the file refuses to start without
    args = parse(app["command"])
    cfg = from_args(args)
    served = dict(pairs(COMPOSE["services"]["vllm"]["command"]))["--served-model-name"]
    assert cfg.primary.base_url == "http://vllm:8000/v1" and cfg.primary.model == served
    assert cfg.host == "0.0.0.0" and cfg.auth == ("me", "secret")
    assert args.workers > 1 and len(split_slots(cfg.max_sessions, args.workers)) == args.workers
    assert app["ports"] == [f"{cfg.port}:{cfg.port}"]
    assert "VOICE_AGENT_AUTH:?" in app["environment"]["VOICE_AGENT_AUTH"]
    # the same interpreter and module as the image's own entry point
    dockerfile = (ROOT / "Dockerfile").read_text()
    entry = re.search(r'ENTRYPOINT \["([^"]+)", "-m", "app"', dockerfile)
    assert entry and app["entrypoint"] == [entry.group(1), "-m", "app"]
    assert COMPOSE["services"]["vllm"]["image"] == app["image"] == "lowlat-voice-agent"
    assert "docker build -t lowlat-voice-agent" in dockerfile
