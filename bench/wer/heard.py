"""Run: .venv/bin/python -m bench.wer.heard DIR (a minute or two).

What the app heard live against what was said: DIR is an app's `--keep-audio` folder from a
voice-to-voice run (`python -m bench.voice_to_voice --setting "NAME=... --keep-audio DIR"`).
Each kept turn's audio is matched to the benchmark clip it came from (cross-correlation
against every question in every voice), and then:
- how alike they are: the normalised correlation of the kept audio with the clip at its
  best offset (the page's echo canceller, noise suppression and gain control reshape the
  waveform, so a whole clean capture does not reach 1; a dropped block lowers it);
- the live transcript (heard.tsv) against the demo's ASR on the kept audio again, and on
  the clip's own samples over the same span: if the kept audio reads as live and the clip
  reads right, the capture changed what Whisper heard; if both read wrong, Whisper mishears
  the voice.
"""

import argparse
import statistics
from pathlib import Path

import numpy as np
import soundfile as sf

from app.stages.asr import Asr
from bench.voice_to_voice import wer
from bench.wer import DEMO, questions, record


def locate(heard: np.ndarray, clip: np.ndarray) -> tuple[float, np.ndarray]:
    """The best normalised correlation of `heard` inside `clip` padded with silence, and
    the clip's samples over that span (as long as `heard`)."""
    pad = np.concatenate([np.zeros(len(heard)), clip, np.zeros(len(heard))])
    n = 1 << int(np.ceil(np.log2(len(pad) + len(heard))))
    c = np.fft.irfft(np.fft.rfft(pad, n) * np.conj(np.fft.rfft(heard, n)), n)[: len(pad)]
    at = int(np.argmax(c))
    seg = pad[at: at + len(heard)]
    norm = float(np.linalg.norm(seg) * np.linalg.norm(heard)) or 1.0
    return float(c[at]) / norm, seg.astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("folder", type=Path, help="an app's --keep-audio folder")
    args = p.parse_args()
    said = [(f"{q} ({v})", q, x / 0.7) for v, q, x in questions()]  # the synthesised level
    asr = Asr(DEMO)
    asr.setup()
    rows, lines, skipped = [], [], []
    for line in (args.folder / "heard.tsv").read_text(encoding="utf-8").splitlines():
        name, _, _, live = line.split("\t")
        heard, _ = sf.read(args.folder / name, dtype="float32")
        score, same, which = max(((*locate(heard, x), i) for i, (_, _, x) in enumerate(said)),
                                 key=lambda r: r[0])
        label, question, clip = said[which]
        if score < 0.3 or len(heard) < 0.6 * len(clip):  # a fragment: a speculative start
            skipped.append(f"not matched: {name} {live!r} (correlation {score:.2f}, "
                           f"{len(heard) / len(clip):.2f} of {label})")
            continue
        again = asr.process(0, heard).text
        source = asr.process(0, same).text
        rows.append({"live": wer(question, live)[0], "again": wer(question, again)[0],
                     "source": wer(question, source)[0], "words": wer(question, "")[1],
                     "corr": score})
        if rows[-1]["live"] or rows[-1]["source"]:
            lines.append(f"{label}: live {live!r}; kept again {again!r}; the clip over the "
                         f"same span {source!r}; correlation {score:.2f}")
    words = sum(r["words"] for r in rows)
    results = {
        "turns matched to a clip": len(rows),
        "WER live (heard.tsv)": round(sum(r["live"] for r in rows) / words, 3),
        "WER of the kept audio read again": round(sum(r["again"] for r in rows) / words, 3),
        "WER of the clip's own samples over the same span": round(
            sum(r["source"] for r in rows) / words, 3),
        "kept audio against the clip, correlation (min / median)": " / ".join(
            f"{v:.2f}" for v in (min(r["corr"] for r in rows),
                                 statistics.median(r["corr"] for r in rows))),
        "turns kept, not matched to a whole clip": len(skipped),
    }
    record("heard", results, lines + skipped)


if __name__ == "__main__":
    main()
