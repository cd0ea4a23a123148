"""Voice-to-voice at the client: the OpenAI Realtime endpoint (through the openai SDK)
against the page's socket (`app.web.client.VoiceClient`), in one run of one app, alternated.

  python -m bench.realtime_v2v --turns 12 [--out DIR] [-- APP FLAGS]   # default: --demo

Both clients speak the same questions (the recorded clips in assets/ and questions spoken
by piper, as `bench.voice_turns`) at the pace of speech, 20 ms frames, in turn: each
question once to each channel, the order swapped every other question. Voice-to-voice is
the client's own figure on both: from when the frame holding the clip's last voiced sample
(above -40 dBFS) went out to when the reply's first audio arrived (the first
`response.output_audio.delta`; the first reply chunk on the page's socket). The app's own
records (`v2v_ms` by source) are kept beside them. Writes DIR/realtime_v2v.json and .md;
the ratio is the Realtime median over the page socket's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from app.metrics import percentile
from app.ops.launch import ROOT, AppServer
from app.ops.machine import describe, machine
from app.web.client import LEAD_S, VoiceClient
from bench.realtime_caller import Caller, now_ms
from bench.voice_turns import clips, speech_end_s

KEY = "bench-realtime-key"
GAP_S = 3.0
"""Quiet between turns: the A/B anchor's request for the last turn runs then, not over
the next turn (the other channel's)."""


async def run(app: AppServer, turns: int) -> tuple[list[dict], dict[str, str]]:
    from openai import AsyncOpenAI

    said = clips()
    records: list[dict] = []
    client = AsyncOpenAI(base_url=app.url + "v1", api_key=KEY)
    async with client.realtime.connect(model="agent") as conn:
        caller = Caller(conn)
        created = await caller.wait(lambda: caller.first("session.created"), 30)
        page = VoiceClient(app.url).open()
        try:
            for i in range(turns):
                text, x = said[i % len(said)]
                order = ["page", "realtime"] if i % 2 == 0 else ["realtime", "page"]
                for channel in order:
                    if channel == "page":
                        reply = await asyncio.to_thread(page.say, x, 120.0)
                        last = reply.stream_start_ms + (LEAD_S + speech_end_s(x)) * 1000
                        v2v = reply.first_audio_ms - last
                    else:
                        since = now_ms()
                        last = await caller.say(x, until=lambda t=since: caller.completed(t),
                                                timeout_s=120)
                        v2v = caller.first_audio(caller.completed(since)[-1].id) - last
                    records.append({"turn": i + 1, "channel": channel, "said": text,
                                    "v2v_ms": round(v2v, 1)})
                    print(f"turn {i + 1} {channel:8s} {v2v:7.0f} ms  {text!r}", flush=True)
                    await asyncio.sleep(GAP_S)
        finally:
            page.close()
            await caller.close()
    sids = {"realtime": created[1].session.id, "page": page.sid}
    return records, sids


def app_records(app: AppServer, sids: dict[str, str]) -> dict[str, list[dict]]:
    return {channel: [r for r in httpx.get(f"{app.url}agent/export/{sid}.json",
                                           timeout=30).json() if r["endpoint"] == "primary"]
            for channel, sid in sids.items()}


def summarize(records: list[dict], rows: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for channel in ("realtime", "page"):
        v = [r["v2v_ms"] for r in records if r["channel"] == channel]
        app_v = [r["v2v_ms"] for r in rows[channel] if r.get("v2v_ms") is not None
                 and not r.get("error")]
        out[channel] = {"turns": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90),
                        "app_p50": percentile(app_v, 50) if app_v else None,
                        "sources": sorted({r["source"] for r in rows[channel]})}
    out["ratio_p50"] = round(out["realtime"]["p50"] / out["page"]["p50"], 3)
    pairs = [(a["v2v_ms"], b["v2v_ms"]) for a in records for b in records
             if a["turn"] == b["turn"] and a["channel"] == "realtime" and b["channel"] == "page"]
    out["paired_diff_p50_ms"] = round(statistics.median(a - b for a, b in pairs), 1)
    return out


def markdown(s: dict, records: list[dict], command: str, date: str, cpu: str,
             commit: str) -> str:
    lines = [f"# Voice-to-voice at the client: Realtime endpoint against the page's socket "
             f"({date})", "", f"`{command}`", "", f"Machine: {cpu}. Commit: {commit}.", "",
             "| channel | turns | p50 ms | p90 ms | app's record p50 ms | source |",
             "|---|---|---|---|---|---|"]
    for channel in ("realtime", "page"):
        c = s[channel]
        lines.append(f"| {channel} | {c['turns']} | {c['p50']} | {c['p90']} | {c['app_p50']} "
                     f"| {', '.join(c['sources'])} |")
    lines += ["", f"Ratio of medians, Realtime / page socket: **{s['ratio_p50']}**; median of "
              f"the paired differences (same question): {s['paired_diff_p50_ms']} ms.", "",
              "| turn | channel | v2v ms | said |", "|---|---|---|---|"]
    lines += [f"| {r['turn']} | {r['channel']} | {r['v2v_ms']} | {r['said']} |"
              for r in records]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "realtime_v2v")
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--start-timeout", type=float, default=900)
    ap.add_argument("app_args", nargs=argparse.REMAINDER, help="-- then the app's flags")
    args = ap.parse_args()
    app_args = [a for a in args.app_args if a != "--"] or ["--demo"]
    args.out.mkdir(parents=True, exist_ok=True)
    app = AppServer([*app_args, "--realtime-key", KEY], log_path=args.out / "app.log").start()
    try:
        t0 = time.monotonic()
        app.wait_healthy(timeout_s=args.start_timeout)
        print(f"app up in {time.monotonic() - t0:.0f} s", flush=True)
        records, sids = asyncio.run(run(app, args.turns))
        time.sleep(3.0)  # the anchor's measurement of the last turn
        rows = app_records(app, sids)
    finally:
        app.stop()
    summary = summarize(records, rows)
    command = "python -m bench.realtime_v2v " + " ".join(sys.argv[1:])
    date, m = str(dt.date.today()), machine()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    (args.out / "realtime_v2v.json").write_text(json.dumps(
        {"date": date, "command": command, "commit": commit, "machine": m,
         "summary": summary, "turns": records, "rows": rows}, indent=1, ensure_ascii=False))
    text = markdown(summary, records, command, date, describe(m), commit)
    (args.out / "realtime_v2v.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
