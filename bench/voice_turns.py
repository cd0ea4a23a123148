"""Spoken turns through the app's audio channel, for hosts without a browser (a GPU server):
start the app as a user does (`python -m app ARGS`), talk to it with `app.web.client.VoiceClient`
(20 ms microphone frames on the client's clock, the page's reports), and read back the
app's own per-turn records of both endpoints.

  python -m bench.voice_turns --out docs/bench/gpu --turns 24 -- \\
      --launch --primary-checkpoint DRY_LOWLAT --anchor-checkpoint DRY_EXPERTS_ONLY ...

Questions (`--clips`): en, the recorded English clips in assets/ and questions spoken by
piper, in turn; zh, the recorded Mandarin clips in assets/ and the finished questions and
requests of the Mandarin set (assets/zh_set/, voices no test uses), for `--language zh`.
Voice-to-voice is the app's figure (last voiced frame -> first reply audio received, both
on the client's clock), cross-checked against the client's own (the clip's last sample
above -40 dBFS -> the first reply chunk). Writes OUT/voice_turns.json and .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from app.metrics import percentile
from app.ops.launch import ROOT, AppServer
from app.stages.audio import resample
from app.web.client import LEAD_S, VoiceClient

QUESTIONS = [
    "What is a good name for a black cat?",
    "How far away is the moon?",
    "Can you suggest a quick breakfast?",
    "Why is the sky blue?",
    "What should I pack for a day at the beach?",
    "How do I boil an egg?",
    "Tell me a fun fact about octopuses.",
    "What time of year is best for planting tulips?",
]
STAGES = ["eot_wait_ms", "asr_after_speech_ms", "asr_ms", "ttft_ms", "server_ttft_ms",
          "first_piece_ms", "handoff_ms",
          "tts_first_audio_ms", "transport_ms", "v2v_ms"]


def read_clip(path: Path) -> np.ndarray:
    x, rate = sf.read(path, dtype="float32")
    return resample(x if x.ndim == 1 else x.mean(1), rate, 16000)


def clips(language: str = "en") -> list[tuple[str, np.ndarray]]:
    """(text, 16 kHz float32 speech) to say, recorded clips first."""
    from app.stages.tts.piper import PiperTts

    truth = json.loads((ROOT / "assets" / "transcripts.json").read_text())
    out = [(truth[path.name], read_clip(path))
           for path in sorted((ROOT / "assets").glob(f"{language}_*.wav")) if path.name in truth]
    if language == "zh":  # no pause inside: each clip is one finished turn
        labels = json.loads((ROOT / "assets" / "zh_set" / "labels.json").read_text())
        return out + [(lb["text"], read_clip(ROOT / "assets" / "zh_set" / lb["file"]))
                      for lb in labels if lb["kind"] == "complete"]
    piper = PiperTts()
    piper.setup()
    for text in QUESTIONS:
        pcm, rate = piper.synthesize(text, "en")
        out.append((text, resample(pcm.astype(np.float32) / 32768, rate, 16000)))
    return out


def speech_end_s(x: np.ndarray) -> float:
    loud = np.nonzero(np.abs(x) > 0.01)[0]
    return (loud[-1] + 1) / 16000 if len(loud) else len(x) / 16000


def summarize(rows: list[dict], client_v2v: list[float]) -> dict:
    def med(endpoint: str, key: str) -> float | None:
        vals = [r[key] for r in rows if r["endpoint"] == endpoint and r.get(key) is not None
                and not r.get("error")]
        return round(statistics.median(vals), 1) if vals else None

    primary = [r for r in rows if r["endpoint"] == "primary" and not r.get("error")]
    v2v = [r["v2v_ms"] for r in primary if r.get("v2v_ms") is not None]
    return {
        "turns": len(primary),
        "anchor_turns": sum(r["endpoint"] == "anchor" and not r.get("error") for r in rows),
        "v2v_ms": {"p50": percentile(v2v, 50), "p90": percentile(v2v, 90), "all": v2v},
        "client_v2v_ms": {"p50": percentile(client_v2v, 50),
                          "p90": percentile(client_v2v, 90)},
        "stage_medians_ms": {k: med("primary", k) for k in STAGES},
        "voice_waits": {"turns": sum(r.get("voice_wait_ms") is not None for r in primary),
                        "p50_ms": med("primary", "voice_wait_ms")},
        "ab_medians": {e: {k: med(e, k) for k in ("ttft_ms", "ms_per_token", "llm_turn_ms")}
                       for e in ("primary", "anchor")},
        "timeline_medians_ms": median_timeline(primary),
    }


def median_timeline(rows: list[dict]) -> dict[str, float]:
    """Each stage event's median time after the last voiced frame, in the chain's order."""
    keys = sorted({k for r in rows for k in r.get("timeline", {})},
                  key=lambda k: statistics.median(r["timeline"][k] for r in rows
                                                  if k in r.get("timeline", {})))
    return {k: round(statistics.median(r["timeline"][k] for r in rows
                                       if k in r.get("timeline", {})), 1) for k in keys}


def markdown(summary: dict, command: str) -> str:
    s = summary
    lines = [f"# Voice turns through the audio channel ({dt.date.today()})", "",
             f"`{command}`", "",
             f"{s['turns']} turns (anchor measured on {s['anchor_turns']}). Voice-to-voice "
             f"(app's record): p50 {s['v2v_ms']['p50']} ms, p90 {s['v2v_ms']['p90']} ms; "
             f"client's own: p50 {s['client_v2v_ms']['p50']} ms, "
             f"p90 {s['client_v2v_ms']['p90']} ms.", "",
             "| stage (primary, median) | ms |", "|---|---|"]
    lines += [f"| {k.removesuffix('_ms').replace('_', ' ')} | {v} |"
              for k, v in s["stage_medians_ms"].items()]
    waits = s["voice_waits"]
    lines += ["", f"Turns whose first audio waited for the user's voice to go: "
              f"{waits['turns']}" + (f" (median wait {waits['p50_ms']} ms)." if waits["turns"]
                                     else ".")]
    line = s["timeline_medians_ms"]
    lines += ["", "Median timeline, ms after the last voiced frame: " +
              " · ".join(f"{k} {v}" for k, v in line.items())]
    lines += ["", "| A/B medians | TTFT ms | ms/token | turn ms |", "|---|---|---|---|"]
    for e, m in s["ab_medians"].items():
        lines.append(f"| {e} | {m['ttft_ms']} | {m['ms_per_token']} | {m['llm_turn_ms']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--turns", type=int, default=24)
    ap.add_argument("--start-timeout", type=float, default=900)
    ap.add_argument("--clips", choices=["en", "zh"], default="en",
                    help="the questions' language (zh: give the app --language zh)")
    ap.add_argument("app_args", nargs=argparse.REMAINDER, help="-- then the app's flags")
    args = ap.parse_args()
    app_args = [a for a in args.app_args if a != "--"]
    args.out.mkdir(parents=True, exist_ok=True)
    said = clips(args.clips)
    app = AppServer(app_args, log_path=args.out / "app.log").start()
    records: list[dict] = []
    try:
        t0 = time.monotonic()
        app.wait_healthy(timeout_s=args.start_timeout)
        print(f"app up in {time.monotonic() - t0:.0f} s", flush=True)
        client_v2v = []
        with VoiceClient(app.url, auth=app.credentials) as client:
            for i in range(args.turns):
                text, x = said[i % len(said)]
                reply = client.say(x, timeout_s=120)
                # the client's clock: when the clip's last loud sample went out (also when the
                # reply came while the clip's trailing room sound was still being sent)
                last_voiced = reply.stream_start_ms + (LEAD_S + speech_end_s(x)) * 1000
                client_v2v.append(round(reply.first_audio_ms - last_voiced, 1))
                records.append({"said": text, "turn": reply.turn,
                                "client_v2v_ms": client_v2v[-1]})
                print(f"turn {i + 1}: {client_v2v[-1]:.0f} ms  {text!r}", flush=True)
                time.sleep(1.0)
            time.sleep(3.0)  # the anchor's measurement of the last turn
            rows = client.export()
    finally:
        app.stop()
    summary = summarize(rows, client_v2v)
    command = "python -m bench.voice_turns " + " ".join(sys.argv[1:])
    (args.out / "voice_turns.json").write_text(json.dumps(
        {"date": str(dt.date.today()), "command": command, "summary": summary,
         "client": records, "rows": rows}, indent=1, ensure_ascii=False))
    (args.out / "voice_turns.md").write_text(markdown(summary, command))
    print(markdown(summary, command))


if __name__ == "__main__":
    main()
