"""Is the speech heard over a reply the reply itself, coming back through the speakers? Told
by its sound, against the audio the agent sent.

The words alone cannot always tell: the ASR bends an echo's words ("Keep your home cozy"
read as "Take your home closing") and then they no longer match the reply's text. The sound
does not depend on that reading. A loudspeaker and a room change the level and the colour
of the reply and delay it, but each frequency band's loudness still rises and falls with
the reply's syllables; a person talking over it does not follow them.

So both are cut into bands of log energy, each band's track of the heard audio is compared
with the same band of the reply at every delay (normalised cross-correlation, computed for
all delays at once by FFT), and the best delay's mean over the bands is the match: near 1
for an echo, low for a voice of its own, in between where a voice speaks over an echo.
"""

from __future__ import annotations

import numpy as np

from app.messages import RATE, SpeechChunk
from app.stages.audio import resample

FRAME = RATE // 40  # a frame of speech
HOP = RATE // 100
EDGES_HZ = np.geomspace(150, 4000, 17)  # 16 bands where speech has its energy
FLOOR = 1e-2
"""Quiet: energy this far under the loudest frame's band counts as the floor. Only the
syllables' peaks are compared: a room's tail and its noise fill the quiet between them."""
MIN_SPREAD = 0.05
"""A band whose log energy varies less than this (standard deviation) is flat."""
MIN_FRAMES = 30
"""Heard or sent audio shorter than this (in hops) is too short to tell."""
ECHO_MATCH = 0.7
"""At or above this match the heard audio is the reply's echo. Set above what voices over
an echo as loud as themselves reached, so that the user's words are not taken for the echo
(a command word still stops the agent: `app.stages.interruption.verdict`); a faint echo
below it is left to its words (`bench/echo_match.py` draws the echoes', the
voices' and the mixtures' matches; docs/PERFORMANCE.md)."""


def bands(x: np.ndarray) -> np.ndarray:
    """Log energy per band, frame by frame: (frames, bands)."""
    x = np.asarray(x, dtype=np.float32)
    if len(x) < FRAME:
        return np.zeros((0, len(EDGES_HZ) - 1), np.float32)
    n = 1 + (len(x) - FRAME) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(x, FRAME)[::HOP][:n]
    power = np.abs(np.fft.rfft(frames * np.hanning(FRAME).astype(np.float32), axis=1)) ** 2
    bins = np.fft.rfftfreq(FRAME, 1 / RATE)
    index = np.searchsorted(EDGES_HZ, bins) - 1
    out = np.stack([power[:, index == b].sum(axis=1) for b in range(len(EDGES_HZ) - 1)],
                   axis=1)
    # a floor some way under the loudest: digital silence between pieces and a room's quiet
    # are both "quiet", not a gulf that outweighs every syllable
    return np.log(out + out.max() * FLOOR + 1e-12).astype(np.float32)


def sent_audio(chunks: list[SpeechChunk]) -> np.ndarray:
    """The chunks a reply sent, one after another, as one 16 kHz track."""
    if not chunks:
        return np.zeros(0, np.float32)
    return np.concatenate([resample(c.pcm.astype(np.float32) / 32768, c.sample_rate)
                           for c in chunks])


def echo_match(heard: np.ndarray, spoken: np.ndarray) -> float:
    """How well `heard` (16 kHz) follows some stretch of `spoken` (16 kHz, what the agent
    sent), at the best delay: the mean over bands of the normalised cross-correlation of
    their log energies, from -1 to 1; 0 where either is too short to tell."""
    if len(spoken) < MIN_FRAMES * HOP:
        return 0.0
    # the heard audio may begin before the reply did, or end after it (the speech detector
    # keeps a little audio from before the voice, and the echo comes late): quiet either side
    pad = np.zeros(RATE, np.float32)
    h, s = bands(heard), bands(np.concatenate([pad, spoken, pad]))
    if len(h) > len(s):  # longer than the whole reply and its quiet: the newest of it
        h = h[len(h) - len(s):]
    n = len(h)
    if n < MIN_FRAMES:
        return 0.0
    h = h - h.mean(axis=0)
    h_norm = np.sqrt((h ** 2).sum(axis=0))
    # for each delay d and band b: sum_t h[t, b] * s[t + d, b], for every d at once
    size = 1 << int(np.ceil(np.log2(len(s) + n)))
    cross = np.fft.irfft(np.fft.rfft(s, size, axis=0) * np.conj(np.fft.rfft(h, size, axis=0)),
                         size, axis=0)[:len(s) - n + 1]
    # each window of s: its own spread about its own mean (h sums to zero, so the mean
    # drops out of the product above)
    c1 = np.vstack([np.zeros((1, s.shape[1])), np.cumsum(s, axis=0, dtype=np.float64)])
    c2 = np.vstack([np.zeros((1, s.shape[1])), np.cumsum(s.astype(np.float64) ** 2, axis=0)])
    total, squares = c1[n:] - c1[:-n], c2[n:] - c2[:-n]
    s_norm = np.sqrt(np.maximum(squares - total ** 2 / n, 0))
    # a band that stays at the floor through the window (the quiet around the reply, or a
    # band the voice leaves empty) tells nothing, rather than a ratio of two rounding
    # errors: the mean is over the other bands, where they are at least half
    flat = np.sqrt(n) * MIN_SPREAD
    ok = (s_norm > flat) & (h_norm > flat)
    ncc = np.where(ok, cross / np.where(ok, h_norm * s_norm, 1.0), 0.0)
    bands_ok = ok.sum(axis=1)
    mean = np.where(2 * bands_ok >= ok.shape[1], ncc.sum(axis=1) / np.maximum(bands_ok, 1), 0)
    return float(np.clip(mean.max(), -1.0, 1.0))
