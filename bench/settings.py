"""The benchmarks' `--setting NAME=FLAGS` (the same thing measured with other flags, in one
run; leading NAME=VALUE words are environment), and the order the settings run in, shared
by bench.voice_to_voice, bench.capacity and bench.cpu_serving."""

from __future__ import annotations

import re
import shlex


def parse_settings(items: list[str]) -> dict[str, list[str]]:
    """`["off=--turn-detector off", "on="]` -> `{"off": ["--turn-detector", "off"], "on": []}`,
    in the order given; a malformed item stops the benchmark with a message saying which."""
    settings: dict[str, list[str]] = {}
    for item in items:
        name, sep, flags = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--setting {item!r}: expected NAME=FLAGS, e.g. off='--no-ab'")
        if name in settings:
            raise SystemExit(f"--setting {name!r} is given twice; name each setting once")
        try:
            settings[name] = shlex.split(flags)
        except ValueError as exc:  # an unclosed quote
            raise SystemExit(f"--setting {item!r}: {exc}") from None
    return settings


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The settings' order in each round, every other round reversed (A B, B A, A B, ...):
    a drift over the run, or the first run's cold caches, falls on each setting alike."""
    return [names if i % 2 == 0 else names[::-1] for i in range(rounds)]


def split_env(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    """A setting's leading NAME=VALUE words (environment for the app and the servers it
    starts, e.g. the ISA caps; in bench.cpu_serving the server's), then its flags."""
    env: dict[str, str] = {}
    while tokens and re.fullmatch(r"[A-Z][A-Z0-9_]*=.*", tokens[0]):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    return env, tokens
