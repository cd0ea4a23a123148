"""The page: thin Gradio callbacks over the conversation; state per browser session."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import gradio as gr
import numpy as np
import soxr

from app.core.conversation import Conversation
from app.core.session import Session
from app.metrics import to_csv, to_json
from app.stages.audio import AudioInputError, load_upload, wav_bytes
from app.stages.vad import has_speech
from app.web.hub import BUSY, Busy, SessionHub
from app.web.views import TABLE_HEADERS, figures_html, medians_markdown, pictures, turns_table

N_OUTPUTS = 10  # chat, status, figures, medians, table, 5 pictures
VOICE_JS = (Path(__file__).parent / "static" / "voice.js").read_text()
CSS = """
.va-figures table {width: 100%; font-variant-numeric: tabular-nums}
.va-figures td.num {text-align: right; font-weight: 600}
.va-hidden {display: none !important}
.va-figures {overflow-x: auto}
.va-svg svg {display: block; max-width: 100%; height: auto}
#va-mic-btn {font-size: 1.1em; padding: 0.5em 1.2em; border-radius: 8px; cursor: pointer;
             border: 1px solid var(--border-color-primary);
             background: var(--button-primary-background-fill);
             color: var(--button-primary-text-color)}
#va-mic-state {margin-left: 0.8em; color: var(--body-text-color-subdued)}
"""
MIC_HTML = ("<div><button id='va-mic-btn' type='button'>🎙 Start talking</button>"
            "<span id='va-mic-state'>microphone off</span></div>")


class VoiceUi:
    def __init__(self, conversation: Conversation, hub: SessionHub, notice: str = "") -> None:
        self.conversation = conversation
        self.agent = conversation.agent
        self.hub = hub
        self.notice = notice
        """Shown above the figures: what is being compared, and any mismatch found."""
        self.poll_cpu_s = 0.0
        """CPU time the page's update loop has cost this process (docs/PERFORMANCE.md)."""
        self.polls = 0
        self._pages: dict[str, str] = {}
        """Gradio's id of each page (or API client) -> its session's id, until it closes."""

    # --- callbacks --------------------------------------------------------------------------
    def init(self, request: gr.Request) -> tuple[Session | None, str, str]:
        """A page opened (behind the login, if any): its session, the id its audio channel
        presents, the status. With every slot taken: no session, a ticket for the spoken
        notice instead of an id, and the written one."""
        try:
            session = self._create(request)
        except Busy:
            return None, self.hub.ticket(), f"**{BUSY}**"
        return session, session.sid, "**Ready.**"

    def close(self, request: gr.Request) -> None:
        """The page's tab closed (Gradio's unload): its slot is free, its turn stops."""
        sid = self._pages.pop(request.session_hash, None) if request.session_hash else None
        session = self.hub.get(sid) if sid else None
        if session is not None:
            self.hub.release(sid)
            self.conversation.barge_in(session)

    def _create(self, request: gr.Request) -> Session:
        """A live session for this page or API client (raises Busy)."""
        session = self.hub.create()
        if request.session_hash:
            self._pages[request.session_hash] = session.sid
        return session

    def _session(self, session: Session | None, request: gr.Request) -> Session:
        """The caller's session; an API client's first call makes one (a gr.Error when the
        agent is busy)."""
        if session is not None:
            return session
        try:
            return self._create(request)
        except Busy as exc:
            raise gr.Error(BUSY) from exc

    def on_text(self, text: str, session: Session | None,
                request: gr.Request) -> tuple[str, Session]:
        session = self._session(session, request)
        text = (text or "").strip()
        if not text:
            raise gr.Error("Type something first.")
        if len(text) > 2000:
            raise gr.Error("That message is too long (2,000 characters at most).")
        self.conversation.start_text(session, text)
        return "", session

    def voice_turn(self, audio_path: str | None, session: Session | None,
                   request: gr.Request):
        """One whole turn from an audio file: (transcript, reply, reply WAV, metrics)."""
        session = self._session(session, request)
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
        with session.lock:
            before = len(session.history)
        turn = self.conversation.run_now(session, "voice", audio=audio)
        with session.lock:
            added = [h["content"] for h in session.history[before:]]
        user, reply = (added + ["", ""])[:2]  # a failed turn adds nothing
        return user, reply, _write_wav(turn.collect or []), turn.metrics.to_dict(), session

    def poll(self, session: Session | None):
        """What changed since the page last fetched; unchanged outputs are skipped, so the
        browser re-renders only those (a streamed reply changes the chat, not the plots)."""
        t0 = time.thread_time()
        try:
            return self._poll(session)
        finally:
            self.poll_cpu_s += time.thread_time() - t0
            self.polls += 1

    def _poll(self, session: Session | None) -> list:
        if session is None or session.version == session.rendered:
            return [gr.skip()] * N_OUTPUTS
        with session.lock:
            session.rendered = session.version
            chat = [dict(c) for c in session.chat]
            # the figures take a turn's record once it is final, so the page redraws them
            # once per record, after the reply, not while the user speaks or waits for it
            rows = [r for r in session.metrics if r.final]
            status = session.status
        shown = [chat, f"**{status}**", figures_html(rows), medians_markdown(rows),
                 turns_table(rows), *pictures(rows)]
        return [_changed(session, str(i), value) for i, value in enumerate(shown)]

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


def _changed(session: Session, key: str, value: object) -> object:
    """`value` if it differs from what this page last got under `key`, else a skip."""
    if session.page_cache.get(key) == value:
        return gr.skip()
    session.page_cache[key] = value
    return value


def _write_wav(chunks: list) -> str | None:
    if not chunks:
        return None
    rate = chunks[0].sample_rate
    pcm = np.concatenate([c.pcm if c.sample_rate == rate else
                          soxr.resample(c.pcm, c.sample_rate, rate) for c in chunks])
    with tempfile.NamedTemporaryFile(suffix=".wav", delete=False, prefix="reply-") as f:
        f.write(wav_bytes(pcm, rate))
        return f.name


def build_blocks(ui: VoiceUi, title: str) -> gr.Blocks:
    with gr.Blocks(title=title) as demo:
        sid = gr.Textbox(visible=True, elem_classes=["va-hidden"], elem_id="va-sid")
        state = gr.State(None)
        gr.Markdown(f"## {title}\nPress **Start talking** and speak (the browser asks for the "
                    "microphone; its echo cancellation is on, so speakers work), type below, or "
                    "upload a recording. Figures update live.")
        with gr.Row():
            with gr.Column(scale=3):
                gr.HTML(MIC_HTML, elem_id="va-mic")
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
                plots = [gr.HTML(elem_id=f"va-plot-{key}", elem_classes=["va-svg"])
                         for key in ("ttft", "mstok", "v2v", "waterfall", "ab")]
                with gr.Row():
                    csv_btn = gr.DownloadButton("Export CSV", size="sm")
                    json_btn = gr.DownloadButton("Export JSON", size="sm")
        table = gr.Dataframe(headers=TABLE_HEADERS, label="Turns", interactive=False,
                             elem_id="va-turns", max_height=320)
        demo.load(ui.init, inputs=None, outputs=[state, sid, status], api_name=False).then(
            None, inputs=[sid], outputs=None, js=VOICE_JS)
        demo.unload(ui.close)
        text.submit(ui.on_text, [text, state], [text, state], concurrency_limit=None)
        send.click(ui.on_text, [text, state], [text, state], concurrency_limit=None,
                   api_name="text_turn")
        upload.upload(ui.voice_turn, [upload, state], [heard, said, reply_audio, turn_json, state],
                      api_name="voice_turn", concurrency_limit=None)
        # pressed by the page's script when the server says the session changed (wire.py)
        refresh = gr.Button("refresh", elem_id="va-refresh", elem_classes=["va-hidden"])
        refresh.click(ui.poll, [state], [chatbot, status, figures, medians, table, *plots],
                      show_progress="hidden", concurrency_limit=None, api_name=False,
                      trigger_mode="always_last")
        csv_btn.click(lambda s: ui.export(s, "csv"), [state], [csv_btn], api_name="export_csv")
        json_btn.click(lambda s: ui.export(s, "json"), [state], [json_btn],
                       api_name="export_json")
    return demo
