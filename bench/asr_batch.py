"""N conversations' turns reaching the ASR at once: the app's batched worker against the
same worker one request at a time (`AsrConfig.batch` 1), same model, same clips.

  .venv/bin/python -m bench.asr_batch [--n 1,2,4,8] [--reps 5] [--device cpu|cuda]

For each N, N threads call `Asr.process` together with N different clips (the committed
English recordings, in turn), `--reps` times per setting, the settings alternating so
drift hits both. Figures per N and setting: the wait of the last request (the turn that
waits longest) and the median request, p50 over the reps, and the transcripts' agreement
with the one-at-a-time ones. Writes docs/bench/asr_batch_<device>.json and .md (command,
date, machine); prints the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import soundfile as sf

from app.language import words
from app.ops.machine import describe, machine
from app.ops.prepare import tiny_en_dir
from app.paths import ROOT
from app.stages.asr import Asr
from app.stages.asr_config import AsrConfig

CLIPS = ["en_capital.wav", "en_joke.wav", "en_weather.wav", "en_hello.wav"]


def together(asr: Asr, clips: list) -> tuple[float, float, list[str]]:
    """All `clips` asked at once: (ms until the last transcript, median ms, texts)."""
    def one(i: int) -> tuple[float, str]:
        t0 = time.perf_counter()
        text = asr.process(i, clips[i]).text
        return (time.perf_counter() - t0) * 1000, text

    with ThreadPoolExecutor(len(clips)) as pool:
        out = list(pool.map(one, range(len(clips))))
    ms = [m for m, _ in out]
    return max(ms), statistics.median(ms), [t for _, t in out]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default="1,2,4,8", help="comma-separated numbers of requests")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = p.parse_args()
    ns = [int(x) for x in args.n.split(",") if x.strip()]
    model = tiny_en_dir()
    compute = "float16" if args.device == "cuda" else "int8"
    settings = {f"batched ({AsrConfig.batch})": AsrConfig.batch, "one at a time": 1}
    asrs = {}
    for name, batch in settings.items():
        asrs[name] = Asr(AsrConfig(model=model, language="en", device=args.device,
                                   compute_type=compute, batch=batch))
        asrs[name].setup()
    audio = [sf.read(ROOT / "assets" / c, dtype="float32")[0] for c in CLIPS]
    alone = [asrs["one at a time"].process(0, a).text for a in audio]
    rows = []
    for n in ns:
        clips = [audio[i % len(audio)] for i in range(n)]
        want = [words(alone[i % len(audio)]) for i in range(n)]
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in settings}
        same = {k: 0 for k in settings}
        for rep in range(args.reps + 1):  # the first rep warms up, dropped
            for name, asr in asrs.items():
                last, med, texts = together(asr, clips)
                if rep:
                    runs[name].append((last, med))
                    same[name] += sum(words(t) == w for t, w in zip(texts, want, strict=True))
        for name in settings:
            rows.append({"n": n, "setting": name,
                         "last_ms": round(statistics.median(r[0] for r in runs[name]), 1),
                         "median_ms": round(statistics.median(r[1] for r in runs[name]), 1),
                         "same_words": f"{same[name]} of {n * args.reps}"})
    m = machine()
    date = dt.date.today().isoformat()
    command = "python -m bench.asr_batch " + " ".join(sys.argv[1:])
    lines = [f"Measured {date} on {describe(m)}; Whisper tiny.en {compute} on the "
             f"{args.device}; command: `{command}`.", "",
             "| N at once | setting | last transcript, ms (p50 of reps) | median request, ms "
             "| same words as alone |", "|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['setting']} | {r['last_ms']} | {r['median_ms']} | "
              f"{r['same_words']} |" for r in rows]
    ratios = []
    for n in ns:
        a, b = (next(r for r in rows if r["n"] == n and r["setting"] == k) for k in settings)
        ratios.append(f"N={n}: {a['last_ms'] / b['last_ms']:.2f}")
    lines += ["", "Last transcript, batched / one at a time: " + "; ".join(ratios)]
    out = ROOT / "docs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"asr_batch_{args.device}.json").write_text(json.dumps(
        {"command": command, "date": date, "machine": m, "rows": rows}, indent=1))
    (out / f"asr_batch_{args.device}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
