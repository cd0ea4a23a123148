"""The page: thin Gradio callbacks over the pipeline; state per browser session."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import gradio as gr
import numpy as np

from app.audio import AudioInputError, load_upload, resample, to_mono_float, wav_bytes
from app.hub import SessionHub
from app.metrics import TurnMetrics, to_csv, to_json
from app.pipeline import Agent, TurnInput
from app.session import Session, TurnHandle
from app.vad import StreamingVad, has_speech
from app.views import (
    ENDPOINT_COLORS,
    TABLE_HEADERS,
    figures_html,
    medians_markdown,
    plot_frame,
    turns_table,
)

PLAYER_JS = (Path(__file__).parent / "static" / "player.js").read_text()
CSS = """
.va-figures table {width: 100%; font-variant-numeric: tabular-nums}
.va-figures td.num {text-align: right; font-weight: 600}
.va-hidden {display: none !important}
"""


class VoiceUi:
    def __init__(self, agent: Agent, hub: SessionHub, notice: str = "") -> None:
        self.agent = agent
        self.hub = hub
        self.notice = notice
        """Shown above the figures: what is being compared, and any mismatch found."""

    # --- turns ----------------------------------------------------------------------------
    def start_turn(self, session: Session, turn: TurnInput) -> TurnHandle:
        """Run a turn in the background (the page polls for its progress)."""
        self.barge_in(session)
        handle = TurnHandle(turn.turn_id, threading.Event())
        handle.thread = threading.Thread(target=self._run, args=(session, turn, handle),
                                         daemon=True, name=f"turn-{turn.turn_id}")
        with session.lock:
            session.current = handle
        handle.thread.start()
        return handle

    def _run(self, session: Session, turn: TurnInput, handle: TurnHandle,
             collect: list | None = None) -> TurnMetrics:
        def sink(chunk, first):  # noqa: ANN001 - SpeechChunk, bool
            if collect is not None:
                collect.append(chunk)
            if session.listeners:
                session.send_audio(chunk, first, turn.speech_end)

        try:
            return self.agent.run_turn(session, turn, sink, handle.cancel)
        finally:
            with session.lock:
                if session.current is handle:
                    session.current = None

    def barge_in(self, session: Session) -> None:
        """The user speaks: cut the reply being generated and the audio being played."""
        with session.lock:
            current = session.current
        if current is not None:
            current.cancel.set()
            if current.thread is not None:
                current.thread.join(timeout=5)
        if session.listeners:
            session.stop_audio(current.turn_id if current else 0)

    # --- callbacks --------------------------------------------------------------------------
    def init(self, sid: str) -> Session:
        return self.hub.register(sid)

    def on_mic(self, chunk: tuple[int, np.ndarray] | None, session: Session | None) -> None:
        if chunk is None or session is None:
            return
        now = time.perf_counter()
        rate, data = chunk
        if data is None or len(data) == 0:
            return
        x = resample(to_mono_float(data), rate)
        if session.vad is None:
            session.vad = StreamingVad(self.agent.cfg.vad)
        for event in session.vad.feed(x, now):
            if event.kind == "speech_start":
                self.barge_in(session)
                session.touch("Listening...")
            elif event.kind == "utterance":
                self.start_turn(session, TurnInput(session.new_turn_id(), "voice",
                                                   audio=event.audio,
                                                   speech_end=event.speech_end))

    def on_mic_stop(self, session: Session | None) -> None:
        if session is not None and session.vad is not None:
            session.vad.reset()

    def on_text(self, text: str, session: Session | None) -> tuple[str, Session]:
        session = session or self.hub.register("")
        text = (text or "").strip()
        if not text:
            raise gr.Error("Type something first.")
        if len(text) > 2000:
            raise gr.Error("That message is too long (2,000 characters at most).")
        self.start_turn(session, TurnInput(session.new_turn_id(), "text", text=text,
                                           speech_end=time.perf_counter()))
        return "", session

    def voice_turn(self, audio_path: str | None, session: Session | None):  # noqa: ANN201
        """One whole turn from an audio file: (transcript, reply, reply WAV, metrics)."""
        session = session or self.hub.register("")
        cfg = self.agent.cfg
        if not audio_path:
            raise gr.Error("No audio received.")
        try:
            audio = load_upload(audio_path, cfg.vad.max_utterance_s, cfg.max_upload_mb)
            if not has_speech(audio, cfg.vad.threshold):
                raise AudioInputError("No speech found in the recording (silence or noise).")
        except AudioInputError as exc:
            session.touch(f"Input rejected: {exc}")
            raise gr.Error(str(exc)) from exc
        turn = TurnInput(session.new_turn_id(), "voice", audio=audio,
                         speech_end=time.perf_counter())
        self.barge_in(session)
        handle = TurnHandle(turn.turn_id, threading.Event())
        with session.lock:
            session.current = handle
        chunks: list = []
        with session.lock:
            before = len(session.history)
        m = self._run(session, turn, handle, collect=chunks)
        with session.lock:
            added = [h["content"] for h in session.history[before:]]
        user, reply = (added + ["", ""])[:2]  # a failed turn adds nothing
        return user, reply, _write_wav(chunks), m.to_dict(), session

    def poll(self, session: Session | None):  # noqa: ANN201
        if session is None or session.version == session.rendered:
            return [gr.skip()] * 7
        with session.lock:
            session.rendered = session.version
            chat = [dict(c) for c in session.chat]
            rows = list(session.metrics)
            status = session.status
        return (chat, f"**{status}**", figures_html(rows), medians_markdown(rows),
                turns_table(rows), plot_frame(rows, "ttft_ms"), plot_frame(rows, "ms_per_token"))

    def export(self, session: Session | None, fmt: str) -> str:
        """The session's records as a file a script can re-plot (API keys are not in them)."""
        if session is None:
            raise gr.Error("Nothing to export yet.")
        with session.lock:
            rows = list(session.metrics)
        body = to_json(rows) if fmt == "json" else to_csv(rows)
        with tempfile.NamedTemporaryFile("w", suffix=f".{fmt}", prefix="turns-", delete=False,
                                         encoding="utf-8") as f:
            f.write(body)
            return f.name


def _write_wav(chunks: list) -> str | None:
    if not chunks:
        return None
    rate = chunks[0].sample_rate
    pcm = np.concatenate([c.pcm if c.sample_rate == rate else
                          (resample(c.pcm.astype(np.float32) / 32768, c.sample_rate, rate)
                           * 32767).astype(np.int16) for c in chunks])
    with tempfile.NamedTemporaryFile(suffix=".wav", delete=False, prefix="reply-") as f:
        f.write(wav_bytes(pcm, rate))
        return f.name


def build_blocks(ui: VoiceUi, title: str) -> gr.Blocks:
    with gr.Blocks(title=title) as demo:
        sid = gr.Textbox(visible=True, elem_classes=["va-hidden"], elem_id="va-sid")
        state = gr.State(None)
        gr.Markdown(f"## {title}\nSpeak into the microphone (click once on the page to allow "
                    "audio), type below, or upload a recording. Figures update live.")
        with gr.Row():
            with gr.Column(scale=3):
                mic = gr.Audio(sources=["microphone"], streaming=True, label="Microphone",
                               type="numpy")
                status = gr.Markdown("**Ready.**", elem_id="va-status")
                chatbot = gr.Chatbot(label="Conversation", height=360, elem_id="va-chat")
                with gr.Row():
                    text = gr.Textbox(placeholder="...or type here and press Enter",
                                      show_label=False, scale=5, elem_id="va-text")
                    send = gr.Button("Send", scale=1)
                with gr.Accordion("Upload a recording", open=False):
                    upload = gr.Audio(sources=["upload"], type="filepath", label="Audio file")
                    heard = gr.Textbox(label="Transcript", interactive=False)
                    said = gr.Textbox(label="Reply", interactive=False)
                    reply_audio = gr.Audio(label="Reply audio", type="filepath",
                                           interactive=False)
                    turn_json = gr.JSON(label="Turn metrics")
            with gr.Column(scale=2):
                gr.Markdown(ui.notice, elem_id="va-notice")
                figures = gr.HTML(figures_html([]), label="Latency", elem_id="va-figures")
                medians = gr.Markdown(medians_markdown([]), elem_id="va-medians")
                # a color map makes the series categorical from the first, empty frame
                plots = [gr.LinePlot(None, x="turn", y="value", color="endpoint",
                                     color_map=ENDPOINT_COLORS, title=title_, height=220,
                                     y_title=unit, elem_id=f"va-plot-{key}")
                         for key, title_, unit in (("ttft", "TTFT per turn", "ms"),
                                                   ("mstok", "ms/token per turn", "ms"))]
                with gr.Row():
                    csv_btn = gr.DownloadButton("Export CSV", size="sm")
                    json_btn = gr.DownloadButton("Export JSON", size="sm")
        table = gr.Dataframe(headers=TABLE_HEADERS, label="Turns", interactive=False,
                             elem_id="va-turns")
        demo.load(ui.init, inputs=[sid], outputs=[state], js=PLAYER_JS)
        mic.stream(ui.on_mic, inputs=[mic, state], outputs=None, stream_every=0.25,
                   time_limit=3600, concurrency_limit=None, show_progress="hidden")
        mic.stop_recording(ui.on_mic_stop, inputs=[state], outputs=None)
        text.submit(ui.on_text, [text, state], [text, state], concurrency_limit=None)
        send.click(ui.on_text, [text, state], [text, state], concurrency_limit=None,
                   api_name="text_turn")
        upload.upload(ui.voice_turn, [upload, state], [heard, said, reply_audio, turn_json, state],
                      api_name="voice_turn", concurrency_limit=None)
        timer = gr.Timer(0.25)
        timer.tick(ui.poll, [state], [chatbot, status, figures, medians, table, *plots],
                   show_progress="hidden", concurrency_limit=None, api_name=False)
        csv_btn.click(lambda s: ui.export(s, "csv"), [state], [csv_btn], api_name="export_csv")
        json_btn.click(lambda s: ui.export(s, "json"), [state], [json_btn],
                       api_name="export_json")
    return demo
