"""How well the sound tells the agent's echo from a person (`app.stages.echo`): a reply read
by the app's own voice (piper for English, Kokoro for Mandarin), and against it

- its echo: a stretch of the reply through a room (a direct path and a decaying tail),
  a small speaker (no bass), at a delay and level drawn per clip;
- a voice: a recorded question (voices no test uses), alone;
- a voice over the echo: the same question with the echo under it, at three levels, and
  with the echo louder than the voice.

Each is matched against the whole reply, as the app matches what it heard against what it
sent; the table gives each kind's spread and how many reach `ECHO_MATCH`.

  .venv/bin/python -m bench.echo_match --out docs/bench/echo_match/echo_match
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.metrics import percentile
from app.paths import ROOT
from app.stages.audio import RATE, resample
from app.stages.echo import ECHO_MATCH, echo_match
from bench import report

REPLIES = {
    "en": "Stay warm and keep your home cozy. Drink plenty of water, get some rest, and wrap "
          "up in a blanket when the evening gets cold. If the weather turns bad, stay indoors "
          "and read a good book.",
    "zh": "今天天气很冷，出门记得多穿一点。晚上早点休息，多喝热水。"
          "如果下雨的话，就在家里看看书吧。",
}
CLIPS = {"en": "assets/over_set/en_*.flac", "zh": "assets/zh_set/zh_*.flac"}
MIX_DB = (-12, -6, 0, 6)
"""The echo's level against the voice's, in the mixtures."""
MAX_S = 4.0  # the interruption check's window


def reply_audio(language: str) -> np.ndarray:
    """The reply in the app's own offline voice, at 16 kHz."""
    from app.stages.tts import build_tts
    from app.stages.tts.base import TtsConfig

    pcm, rate, _, _ = build_tts(TtsConfig(engine="offline")).synthesize(REPLIES[language],
                                                                        language)
    return resample(pcm.astype(np.float32) / 32768, rate)


def load(path: Path) -> np.ndarray:
    import soundfile as sf

    audio, rate = sf.read(path, dtype="float32")
    return resample(audio if audio.ndim == 1 else audio.mean(axis=1), rate)


def through_room(x: np.ndarray, rng: np.random.Generator, delay_ms: float) -> np.ndarray:
    """`x` out of a small speaker (a first-order high-pass) into a room (the direct path and
    a noise tail decaying over tens of ms), heard `delay_ms` later."""
    speaker = np.concatenate([[x[0]], x[1:] - 0.95 * x[:-1]])
    n = int(0.25 * RATE)
    tail = rng.standard_normal(n) * np.exp(-np.arange(n) / rng.uniform(0.02, 0.08) / RATE)
    impulse = tail * 0.3
    impulse[0] = 1.0
    wet = np.convolve(speaker, impulse)[:len(x)]
    return np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), wet])[:len(x)]


def level(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x ** 2)) + 1e-12)


def cases(reply: np.ndarray, voices: list[np.ndarray], seed: int = 0):
    """(kind, heard) for each voice: the echo alone, the voice alone, the voice over the
    echo at each of `MIX_DB`; the quiet of a room under each."""
    rng = np.random.default_rng(seed)
    for voice in voices:
        n = min(len(voice), int(MAX_S * RATE), len(reply) // 2)
        start = int(rng.integers(0, len(reply) - n))
        room = through_room(reply, rng, rng.uniform(20, 250))[start:start + n]
        echo = room / level(room) * level(voice[:n]) * 10 ** (rng.uniform(-30, -6) / 20)
        quiet = rng.standard_normal(n).astype(np.float32) * 10 ** (-60 / 20)
        yield "echo", echo + quiet
        yield "voice", voice[:n] + quiet
        for db in MIX_DB:
            under = room / level(room) * level(voice[:n]) * 10 ** (db / 20)
            yield f"voice + echo at {db:+d} dB", voice[:n] + under + quiet


def measure(language: str, limit: int = 0) -> dict[str, list[float]]:
    reply = reply_audio(language)
    paths = sorted(ROOT.glob(CLIPS[language]))[:limit or None]
    matches: dict[str, list[float]] = {}
    for kind, heard in cases(reply, [load(p) for p in paths]):
        matches.setdefault(kind, []).append(round(echo_match(heard, reply), 3))
    return matches


def main() -> None:
    args = report.parser(__doc__, "echo_match").parse_args()
    m, command, measured = report.header("bench.echo_match")
    rows = []
    for language in REPLIES:
        for kind, values in measure(language).items():
            rows.append({"language": language, "kind": kind, "n": len(values),
                         "min": min(values), "p10": round(percentile(values, 10), 3),
                         "p50": round(percentile(values, 50), 3),
                         "p90": round(percentile(values, 90), 3), "max": max(values),
                         "echo": sum(v >= ECHO_MATCH for v in values), "all": values})
    lines = [f"{measured} Echo at or above a match of {ECHO_MATCH}.", "",
             "| language | heard | clips | min | p10 | p50 | p90 | max | taken for echo |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['language']} | {r['kind']} | {r['n']} | {r['min']} | {r['p10']} | "
              f"{r['p50']} | {r['p90']} | {r['max']} | {r['echo']} of {r['n']} |" for r in rows]
    report.write(args.out, m, command, lines, echo_match=ECHO_MATCH, rows=rows)


if __name__ == "__main__":
    main()
