"""What a Realtime client hears and is told (app/web/realtime.py): the counterpart, for the
OpenAI Realtime protocol, of the page's `Outbox` (app/core/wire.py) and player
(app/web/static/voice.js). The core sends it what it sends a page: reply audio, the player's
commands (pause, resume, stop, end) and notices that the session changed. Here they become
the protocol's events; and since a Realtime client reports nothing of what it played, the
player's reports are made here from what was sent:

- Reply audio goes out paced as it plays: a delta whenever the client holds less than
  `LEAD_S` not yet played, so what was sent is what was heard, give or take `LEAD_S`.
  "audible" is reported as the first delta goes, "done" when the last one has played out.
- pause: the protocol has none, so the deltas stop; the client plays out what it holds,
  and "paused" is reported at that moment. resume: the deltas go on.
- stop: the response is cancelled (`response.done`) and its item truncated to what had
  played (`conversation.item.truncated`); "stopped" reports the same shares.

The user's side: `input_audio_buffer.speech_started` when the core pauses or stops a reply
for the user's voice, or when an utterance begins while no reply plays (the core's
`Session.talking`, as it applies the frame); `speech_stopped` when it ends; the committed
item and its transcript when the core publishes the turn.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable

from app.messages import MicBytes, MicFrame, PlayerReport, SpeechChunk
from app.web.realtime_audio import Format, InputFrames, encode_reply
from app.web.realtime_protocol import Ids, assistant_item, usage, user_item
from app.web.realtime_reply import DELTA_S, LEAD_S, Phase, Reply, Speech
from app.web.transport import FrameDecoder


class RealtimeOut:
    """One Realtime connection's replies: the session's outbox (methods called from any
    thread put their work on the event loop; the rest runs there)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, session, conversation,
                 config: Callable[[], object]) -> None:  # config: -> SessionConfig
        self.loop, self.session, self.conversation = loop, session, conversation
        self.config = config
        self.queue: asyncio.Queue = asyncio.Queue()
        """Text frames for the socket: (json, called as its write begins or None)."""
        self.ids = Ids()
        self.frames = InputFrames()
        self.listener = None  # app.core.conversation.Listener, set once opened
        self.replies: dict[str, Reply] = {}
        self.speech = Speech.QUIET
        self.speech_item = ""
        self.last_item: str | None = None
        self._decoder = FrameDecoder()
        self._timer: asyncio.TimerHandle | None = None
        self._scan_due = self.closed = False

    # --- what the core calls (any thread) -------------------------------------------------
    def changed(self) -> None:
        self.loop.call_soon_threadsafe(self._scan_soon)

    def hold_renders(self, at_most_s: float = 0.0) -> None:
        """The page's renders: a Realtime client fetches nothing."""

    def send_audio(self, chunk: SpeechChunk, on_sent=None) -> None:
        """On the TTS thread: encoded here, off the event loop."""
        fmt = self.config().output_format
        data = b"" if self.config().text_only else encode_reply(chunk.pcm, chunk.sample_rate,
                                                                 fmt)
        self.loop.call_soon_threadsafe(self._audio, chunk.turn_id, chunk.index, chunk.text,
                                       data, fmt, on_sent)

    def send_json(self, event: dict) -> None:
        self.loop.call_soon_threadsafe(self._core, event)

    def decode(self, msg: MicBytes) -> MicFrame:
        """The Listener's decoder (the turns thread): the page's."""
        return self._decoder.decode(msg)

    def talking(self, on: bool, began_ms: float, silence_ms: float) -> None:
        """The core's word that the user's voice began or ended (the turns thread)."""
        self.loop.call_soon_threadsafe(self._on_talking, on, began_ms, silence_ms)

    # --- to the client ---------------------------------------------------------------------
    def emit(self, kind: str, on_write=None, **fields) -> None:
        event = {"type": kind, "event_id": self.ids("event"), **fields}
        self.queue.put_nowait((json.dumps(event, ensure_ascii=False), on_write))

    @staticmethod
    def now_ms() -> float:
        """The conversation's clock, for reports as for the frames' capture times
        (`InputClock`): the server's."""
        return time.perf_counter() * 1000.0

    def _report(self, kind: str, turn_id: int, t_ms: float, **fields) -> None:
        if self.listener is not None and turn_id:
            self.listener.put(PlayerReport(kind, turn_id, t_ms, **fields))

    # --- responses ---------------------------------------------------------------------------
    @property
    def active(self) -> Reply | None:
        return next((r for r in self.replies.values() if r.phase is not Phase.OVER), None)

    def by_turn(self, turn_id: int) -> Reply | None:
        return next((r for r in self.replies.values() if r.turn_id == turn_id), None)

    def open_reply(self, user_items: list[tuple[str, str]] | None = None, turn_id: int = 0
                   ) -> Reply:
        """A new response: created, with its (empty) assistant item."""
        r = Reply(self.ids("resp"), self.ids("item"), turn_id, user_items=user_items or [])
        self.replies[r.response_id] = r
        self.emit("response.created", response=self._response(r, "in_progress"))
        self.emit("response.output_item.added", response_id=r.response_id, output_index=0,
                  item=assistant_item(r.item_id, "in_progress", None, self.config().text_only))
        self.emit("conversation.item.added", previous_item_id=self.last_item,
                  item=assistant_item(r.item_id, "in_progress", None, self.config().text_only))
        self.last_item = r.item_id
        part = {"type": "text", "text": ""} if self.config().text_only \
            else {"type": "audio", "transcript": ""}
        self.emit("response.content_part.added", response_id=r.response_id, output_index=0,
                  item_id=r.item_id, content_index=0, part=part)
        return r

    def _response(self, r: Reply, status: str, details: dict | None = None) -> dict:
        c = self.config()
        out = {"object": "realtime.response", "id": r.response_id, "status": status,
               "status_details": details, "conversation_id": f"conv_{self.session.sid[:12]}",
               "output_modalities": ["text"] if c.text_only else ["audio"],
               "audio": {"output": {"format": c.output_format.to_json(), "voice": c.voice}},
               "max_output_tokens": "inf", "metadata": None, "output": [], "usage": None}
        if status != "in_progress":
            out["output"] = [assistant_item(r.item_id, "completed" if status == "completed"
                                            else "incomplete", r.words, c.text_only)]
            m = self._metrics(r)
            out["usage"] = usage(*(None, None, None) if m is None else
                                 (m.prompt_tokens, m.reply_tokens, m.cached_tokens))
        return out

    def _metrics(self, r: Reply):
        turn = self._turns().get(r.turn_id)
        return None if turn is None else turn.metrics

    def finish(self, r: Reply, status: str, details: dict | None = None) -> None:
        """The response is over: its closing events, in the protocol's order."""
        if r.phase is Phase.OVER:
            return
        r.phase = Phase.OVER
        r.queue.clear()
        c, ids = self.config(), {"response_id": r.response_id, "item_id": r.item_id,
                                 "output_index": 0, "content_index": 0}
        if c.text_only:
            self.emit("response.output_text.done", text=r.words, **ids)
            part = {"type": "text", "text": r.words}
        else:
            self.emit("response.output_audio.done", **ids)
            self.emit("response.output_audio_transcript.done", transcript=r.words, **ids)
            part = {"type": "audio", "transcript": r.words}
        self.emit("response.content_part.done", part=part, **ids)
        item = assistant_item(r.item_id, "completed" if status == "completed" else "incomplete",
                              r.words, c.text_only)
        self.emit("response.output_item.done", response_id=r.response_id, output_index=0,
                  item=item)
        self.emit("conversation.item.done", previous_item_id=None, item=item)
        self.emit("response.done", response=self._response(r, status, details))
        self.loop.call_soon(self._pump)  # a reply after it may play now

    def stopped(self, r: Reply, cause_ms: float | None = None) -> None:
        """The reply stops where it is: reported as the page's player does, then the
        response is cancelled and its item truncated to what had played."""
        if r.phase is Phase.OVER:
            return
        played = r.played_ms(time.perf_counter())
        if r.sent_ms:
            self._report("stopped", r.turn_id, self.now_ms(), heard=r.heard(played),
                         cause_ms=cause_ms, gap_ms=r.gap_ms, gaps=r.gaps)
        self.finish(r, "cancelled", {"type": "cancelled", "reason": r.reason})
        if r.sent_ms:
            r.truncated_ms = played
            self.emit("conversation.item.truncated", item_id=r.item_id, content_index=0,
                      audio_end_ms=int(played))

    # --- what the core sent, on the loop -----------------------------------------------------
    def _audio(self, turn_id: int, index: int, text: str, data: bytes, fmt: Format,
               on_sent) -> None:
        r = self.by_turn(turn_id) or self._adopt(turn_id)
        if r is None or r.phase is Phase.OVER:
            return  # a stopped reply's audio still under way: dropped, as the page does
        r.texts[index], r.pieces[index] = text, fmt.ms(len(data))
        if r.on_sent is None and on_sent is not None and not r.sent_ms:
            r.on_sent = on_sent
        if self.config().text_only:
            r.told.append(index)
            self.emit("response.output_text.delta", response_id=r.response_id, item_id=r.item_id,
                      output_index=0, content_index=0, delta=text + " ")
            return
        r.queue.append([index, data, fmt])
        if r.phase is Phase.WAITING:
            r.phase = Phase.PLAYING
        self._pump()

    def _core(self, event: dict) -> None:
        kind, turn_id = event.get("type"), int(event.get("turn") or 0)
        if kind == "error":
            self.emit("error", error={"type": "invalid_request_error", "code": "invalid_audio",
                                      "message": str(event.get("message")), "param": None,
                                      "event_id": None})
            return
        if kind not in ("pause", "resume", "stop", "end"):
            return
        r = self.by_turn(turn_id) or self._adopt(turn_id)
        now = time.perf_counter()
        voice = event.get("cause_ms") is not None  # the user's voice, not a typed turn
        began = self.conversation.floor(self.session).state.began_ms
        if kind == "pause":
            if voice:
                self._speech_started(began)
            if r is not None and r.phase is Phase.PLAYING:
                r.phase = Phase.PAUSED
            silent = max(now, r.until if r is not None else now)
            # reported once the client's held audio has played out: then it is silent
            self.loop.call_later(silent - now, lambda: self._report(
                "paused", turn_id, silent * 1000.0, cause_ms=event.get("cause_ms")))
        elif kind == "resume" and r is not None and r.phase is Phase.PAUSED:
            r.phase = Phase.PLAYING
            self._pump()
        elif kind == "stop":
            if voice:
                self._speech_started(began)
            if r is not None:  # none: nothing of it went out, no report is waited for
                self.stopped(r, event.get("cause_ms"))
        elif kind == "end" and r is not None and r.phase is not Phase.OVER:
            r.ended = True
            if r.phase is Phase.WAITING or self.config().text_only:
                self._played_out(r)
            else:
                self._pump()

    def _played_out(self, r: Reply) -> None:
        self._report("done", r.turn_id, self.now_ms(), heard=r.heard(r.sent_ms),
                     gap_ms=r.gap_ms, gaps=r.gaps)
        m = self._metrics(r)
        failed = m is not None and m.error_stage in ("asr", "llm")
        self.finish(r, "failed" if failed else "completed",
                    {"type": "failed", "error": {"type": "server_error", "code": m.error_stage,
                                                 "message": m.error}} if failed else None)

    # --- pacing ------------------------------------------------------------------------------
    def _pump(self) -> None:
        """Send what the playing reply's client may hold; finish it once played out."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.closed:
            return  # no client: nothing plays
        r = next((r for r in self.replies.values()
                  if r.phase in (Phase.PLAYING, Phase.PAUSED)), None)
        if r is None or r.phase is Phase.PAUSED:
            return
        now = time.perf_counter()
        while r.queue and r.until - now < LEAD_S:
            self._delta(r, now)
        if r.queue:
            self._timer = self.loop.call_later(r.until - LEAD_S - now, self._pump)
        elif r.ended and now >= r.until:
            self._played_out(r)
        elif r.ended:
            self._timer = self.loop.call_later(r.until - now, self._pump)

    def _delta(self, r: Reply, now: float) -> None:
        head = r.queue[0]
        index, data, fmt = head
        n = max(fmt.width, int(DELTA_S * fmt.rate) * fmt.width)
        part, head[1] = data[:n], data[n:]
        if not head[1]:
            r.queue.popleft()
        ids = {"response_id": r.response_id, "item_id": r.item_id, "output_index": 0,
               "content_index": 0}
        if index not in r.told:  # the words with the first of their voice
            r.told.append(index)
            self.emit("response.output_audio_transcript.delta", delta=r.texts[index] + " ",
                      **ids)
        first = not r.sent_ms
        on_write = r.on_sent if first else None
        self.emit("response.output_audio.delta", on_write=on_write,
                  delta=base64.b64encode(part).decode(), **ids)
        if first:
            t = self.now_ms()
            self._report("audible", r.turn_id, t, received_ms=t)
        elif r.until < now:  # the client ran dry: silence inside the reply
            r.gap_ms += (now - r.until) * 1000.0
            r.gaps += 1
        r.until = max(now, r.until) + fmt.ms(len(part)) / 1000.0
        r.sent_ms += fmt.ms(len(part))

    # --- the core's turns ----------------------------------------------------------------------
    def _turns(self) -> dict:
        seat = self.conversation.floor(self.session)
        with self.session.lock:
            return dict(seat.turns)

    def _scan_soon(self) -> None:
        if not self._scan_due:
            self._scan_due = True
            self.loop.call_soon(self.scan)

    def scan(self) -> None:
        """The session changed: turns published, and replies that ended with no end."""
        self._scan_due = False
        for turn_id, turn in sorted(self._turns().items()):
            r = self.by_turn(turn_id)
            if r is None and turn.published:
                r = self._adopt(turn_id)
            if r is None:
                continue
            if turn.metrics.continued_in and not r.withdrawn:
                r.withdrawn = True  # its words are answered again with the rest
                for item in [i for i, _ in r.user_items] + [r.item_id]:
                    self.emit("conversation.item.deleted", item_id=item)
            if r.phase is Phase.WAITING:
                if turn.cancel.is_set() and not turn.published:
                    self.finish(r, "cancelled", {"type": "cancelled", "reason": r.reason})
                elif turn.metrics.final:  # the chain is over and sent nothing to play
                    self._played_out(r)

    def _adopt(self, turn_id: int) -> Reply | None:
        """A published turn the client has not heard of: its response (a voice turn's, with
        the user's committed item; or the one a response.create opened)."""
        turn = self._turns().get(turn_id)
        if turn is None or not turn.published:
            return None
        typed = turn.metrics.source.endswith("text") or self.config().turn_detection is None
        waiting = next((r for r in self.replies.values()
                        if r.turn_id == 0 and r.phase is not Phase.OVER), None)
        if typed and waiting is not None:
            waiting.turn_id = turn_id
            audio = [i for i, kind in waiting.user_items if kind == "input_audio"]
            for item in audio:  # committed by hand: the words the turn heard, on the last
                words = (turn.user_text or "") if item == audio[-1] else ""
                self._transcript(item, words, turn.metrics.utterance_ms)
            return waiting
        if typed:  # its response was cancelled before the turn began: it plays as one
            return self.open_reply([], turn_id)
        item = self._commit_speech(turn)
        return self.open_reply([(item, "input_audio")], turn_id)

    def _commit_speech(self, turn) -> str:
        """A voice turn the core committed: the user's item, as server VAD tells it."""
        last = turn.last_voiced_ms or self.now_ms()
        if self.speech is Speech.QUIET:
            self._speech_started(last - (turn.metrics.utterance_ms or 0.0))
        if self.speech is Speech.SPEAKING:
            self._speech_stopped(last)
        item, self.speech = self.speech_item, Speech.QUIET
        self.emit("input_audio_buffer.committed", item_id=item, previous_item_id=self.last_item)
        self.emit("conversation.item.added", previous_item_id=self.last_item,
                  item=user_item(item, "input_audio", None))
        self.last_item = item
        self._transcript(item, turn.user_text or "", turn.metrics.utterance_ms)
        return item

    def _transcript(self, item: str, words: str, utterance_ms: float | None) -> None:
        if self.config().transcription is not None:
            ids = {"item_id": item, "content_index": 0}
            self.emit("conversation.item.input_audio_transcription.delta", delta=words, **ids)
            self.emit("conversation.item.input_audio_transcription.completed",
                      transcript=words, usage={"type": "duration",
                                               "seconds": round((utterance_ms or 0) / 1000, 3)},
                      **ids)
        self.emit("conversation.item.done", previous_item_id=None,
                  item=user_item(item, "input_audio", words))

    # --- the user's speech ---------------------------------------------------------------------
    def _on_talking(self, talking: bool, began_ms: float, silence_ms: float) -> None:
        playing = any(r.phase in (Phase.PLAYING, Phase.PAUSED) for r in self.replies.values())
        if talking and playing and self.speech is Speech.STOPPED:
            self.speech = Speech.QUIET  # a new utterance, told of if it pauses the reply
        elif talking and self.speech is not Speech.SPEAKING and not playing:
            self._speech_started(began_ms)
        elif not talking and self.speech is Speech.SPEAKING:
            self._speech_stopped(self.frames.clock.end_ms - silence_ms)

    def _speech_started(self, at_ms: float) -> None:
        if self.speech is Speech.SPEAKING:
            return
        self.speech, self.speech_item = Speech.SPEAKING, self.ids("item")
        self.emit("input_audio_buffer.speech_started", item_id=self.speech_item,
                  audio_start_ms=self.frames.clock.position(at_ms))

    def _speech_stopped(self, at_ms: float) -> None:
        self.speech = Speech.STOPPED
        self.emit("input_audio_buffer.speech_stopped", item_id=self.speech_item,
                  audio_end_ms=self.frames.clock.position(at_ms))

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
