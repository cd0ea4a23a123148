"""The turn's audio gate: its reply's audio goes to the page once nothing holds it.

Nothing is heard before the turn is committed and its words are known (published); after
that, audio flows straight through, unless the user's voice came back before any of it went
out (`voice_back`, which the turn-taking decides: `HoldForVoice`): then it waits until the
voice goes, or is dropped unheard (`drop_held`). The first audio also waits while the
turn-taking has not heard the microphone up to the moment it is ready (`mic_heard`): on a
busy machine frames come in late, in bursts, and the voice may be back in the ones still on
their way. `AudioGate` is a part of `Turn` (app/core/turn.py) and works on its fields.
"""

from __future__ import annotations

import time
from functools import partial

from app.messages import SpeechChunk

MIC_SLACK_S = 0.06
"""The microphone counts as heard "up to now" when the newest frame handled was captured
this recently: a little longer than the page's gaps between frames."""
MIC_IDLE_S = 1.0
"""No frame handled for this long: the microphone is off, the first audio waits for none."""


class AudioGate:
    """`Turn`'s methods that hold and send its audio."""

    def emit_audio(self, chunk: SpeechChunk) -> None:
        with self.session.lock:
            if self.cancel.is_set():
                return
            self.pieces[chunk.index] = chunk.text
            self.metrics.reply_audio_ms = round((self.metrics.reply_audio_ms or 0.0)
                                                + len(chunk.pcm) * 1000 / chunk.sample_rate, 1)
            if self.collect is not None:
                self.collect.append(chunk)
            hold = not self._published or self._voice_back or bool(self._held) \
                or self._mic_behind()
            if hold:
                self._held.append(chunk)
        if not hold:
            self._send(chunk)

    @property
    def audio_ready(self) -> bool:
        """Reply audio is synthesised and held (for the commit, or the user's voice)."""
        return bool(self._held)

    def voice_back(self, back: bool) -> None:
        """Whether the user's voice is back after the commit (app/core/conversation.py): while it
        is, and none of the reply has gone to the page, the reply's audio waits. If the
        voice becomes an utterance, the turn is dropped unheard (`drop_held`): the user went
        on after a pause the verdict took for the end. A click or a cough lets it go."""
        with self.session.lock:
            if back == self._voice_back or (back and self._to_page) or self.cancel.is_set():
                return
            self._voice_back = back
            if back:
                self.stamp("voice_back")
            else:
                self._release()

    def mic_heard(self, captured_s: float | None) -> None:
        """The turn-taking thread has handled the microphone up to a frame captured at
        `captured_s` (server time); None: the microphone stopped, no frame will come. Audio
        that waited for the frames to catch up goes once they have."""
        with self.session.lock:
            self._heard = None if captured_s is None else (captured_s, time.perf_counter())
            self._release()

    def recheck_mic(self) -> None:
        """No frame came with the item the turn-taking thread handled: audio that waited for
        the microphone goes once none has come for `MIC_IDLE_S`."""
        with self.session.lock:
            self._release()

    def _mic_behind(self) -> bool:
        """Under the lock, with audio to send and none sent yet: whether the turn-taking
        has not yet heard the microphone up to the moment the audio was ready (its newest
        frame captured more than `MIC_SLACK_S` before). It cannot know then whether the
        user's voice is back: the reply can be audible after the user went on, their frames
        still on their way. No frame handled for `MIC_IDLE_S`: no microphone to wait for."""
        if self._to_page or self._heard is None:
            return False
        captured, handled = self._heard
        now = time.perf_counter()
        if now - handled > MIC_IDLE_S:
            return False
        if self._mic_wait is None:
            if captured >= now - MIC_SLACK_S:
                return False
            self._mic_wait = now
            self.stamp("mic_behind", now)
        return captured < self._mic_wait - MIC_SLACK_S

    def _release(self) -> None:
        """Under the lock: send the audio (and the "end") that waited, once nothing holds it:
        the turn is published, the user's voice is not back, the microphone is heard."""
        if not (self._held or self._end_waits) or not self._published or self._voice_back \
                or self.cancel.is_set() or self._mic_behind():
            return
        held, self._held = self._held, []
        for chunk in held:  # under the lock: before an "end" the turn sends
            self._send(chunk)
        if self._end_waits:
            self._end_waits = False
            self._send_end()

    @property
    def unheard(self) -> bool:
        """Committed, and none of its reply has gone to the page yet."""
        return self._committed and not self._to_page and not self.cancel.is_set()

    @property
    def held_for_voice(self) -> bool:
        """Committed, and its reply waits for the user's voice to go (`voice_back`)."""
        return self._voice_back and self._committed and not self.cancel.is_set()

    def drop_held(self) -> None:
        """The voice that held the reply became an utterance: nothing of the reply is heard
        (its audio and its "end" are not sent), and the record says it was cancelled."""
        self.cancel.set()
        with self.session.lock:
            self._held.clear()
            self._end_waits = False
            self.metrics.cancelled = self._published

    def _send(self, chunk: SpeechChunk) -> None:
        on_sent = None
        self.sent.append(chunk)
        if self.session.outbox is not None:
            # stamped before the bytes go: the page's report of them comes back on the event
            # loop's thread, which on a busy machine can run before this one does again
            if "first_sent" not in self.stamps:
                self.stamp("first_sent")
                on_sent = partial(self.stamp, "socket_sent")  # on the event loop
            self._to_page = True
        self.session.send_audio(chunk, on_sent)
        if self._to_page:
            self.session.touch("Speaking...")  # the reply's text so far, with its voice

    def _send_end(self) -> None:
        """The reply is over: the page's player reports "done" once it played it all."""
        self._to_page = self._to_page or self.session.outbox is not None
        self.session.send_event({"type": "end", "turn": self.turn_id})

