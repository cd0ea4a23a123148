"""What the open page costs the browser's main thread while nothing is said: idle, then with
the microphone on (silence), for this checkout and for other revisions, in one run.

  .venv/bin/python -m bench.page_cost [--rev REV ...] [--seconds 30]

Each checkout's app is started as the demo's page sees it (`--preset demo`; no model is
needed: nobody speaks), the page opened in headless Chromium on the app's cores, and the
main thread's task, script and style/layout time read over CDP (`Performance.getMetrics`)
before and after each phase. On the 2-core default the browser shares a core with ASR and
TTS, so what the page burns while idle is taken from the next turn. Writes
docs/bench/page_cost.json and .md; prints the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from app.ops.launch import ROOT, AppServer, app_cpus
from app.ops.machine import describe, machine
from bench.page import open_page, start_recording
from bench.voice_to_voice import OFFLINE, baseline_tree, browser_times


def page_cost(name: str, rev: str, seconds: float) -> dict:
    from playwright.sync_api import sync_playwright

    app = AppServer(["--base-url", "http://127.0.0.1:9/v1", "--model", "none", "--preset",
                     "demo", *OFFLINE], cwd=baseline_tree(rev) if rev else ROOT,
                    log_path=ROOT / "logs" / f"bench-page-cost-{name}.log",
                    env={"VOICE_AGENT_MODELS": str(ROOT / "models")})
    app.start().wait_healthy()
    out = {}
    try:
        with sync_playwright() as pw:
            browser, page = open_page(pw, app.url, None, cpus=app_cpus())
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            for phase in ("idle", "microphone on"):
                if phase == "microphone on":
                    start_recording(page)
                before = browser_times(cdp)
                time.sleep(seconds)
                after = browser_times(cdp)
                out[phase] = {k: round((after[k] - before[k]) / seconds, 1) for k in after}
            browser.close()
    finally:
        app.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", action="append", default=[], help="another revision to measure")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    runs = {f"@{rev}": page_cost(rev, rev, args.seconds) for rev in args.rev}
    runs["this checkout"] = page_cost("this", "", args.seconds)
    command = "python -m bench.page_cost " + " ".join(sys.argv[1:])
    date = dt.date.today().isoformat()
    m = machine()
    lines = [f"Measured {date} on {describe(m)}; command: `{command}`. Browser main-thread "
             "time per second of wall time, ms.", "",
             "| checkout | idle: all tasks | idle: script | idle: style + layout | "
             "mic on: all tasks | mic on: script | mic on: style + layout |",
             "|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        cells = [r[p][k] for p in ("idle", "microphone on")
                 for k in ("browser_task_ms", "browser_script_ms", "browser_layout_ms")]
        lines.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    out = ROOT / "docs" / "bench"
    (out / "page_cost.json").write_text(json.dumps(
        {"command": command, "date": date, "machine": m, "runs": runs}, indent=1))
    (out / "page_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
