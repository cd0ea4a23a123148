"""The web server: the Gradio page + the audio channel (one WebSocket per page) + the
OpenAI Realtime endpoint (`/v1/realtime`, app/web/realtime.py) + `/metrics` for Prometheus.

Every route checks who is asking, wherever the request comes from: Gradio's own routes
by its login (`--auth`), the app's HTTP routes (`/metrics` too) by the same credentials
(HTTP Basic), the audio channel by a session id that only the server issues, to a page
behind the login or to a script with the credentials (app/web/hub.py), and the Realtime
endpoint by a bearer key of its own (`--realtime-key`); the export wants a session id and
the login.
Beyond `--max-sessions` live conversations a new one is refused (app/web/hub.py): a script
gets 503, a page the written and the spoken notice."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

from fastapi import Depends, FastAPI, HTTPException, WebSocket
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from prometheus_client import CONTENT_TYPE_LATEST

from app.config import AppConfig
from app.core.conversation import Conversation
from app.core.pipeline import Agent
from app.core.wire import audio_message
from app.messages import SpeechChunk
from app.metrics import to_csv, to_json
from app.stages.tts import TtsError
from app.web.hub import BUSY, RETRY_AFTER_S, Busy, SessionHub
from app.web.prometheus import AppMetrics
from app.web.realtime import serve_realtime
from app.web.transport import serve_socket
from app.web.ui import CSS, VoiceUi, build_blocks

log = logging.getLogger(__name__)
UNKNOWN_SESSION = "unknown session: reload the page (the app may have restarted)"


def basic_auth(auth: tuple[str, str] | None) -> Callable[..., None]:
    """The check of the app's own HTTP routes: with `--auth`, HTTP Basic credentials (they
    serve scripts; the page's audio channel carries a session id issued behind Gradio's
    login instead: a browser's WebSocket sends no Basic credentials)."""
    if auth is None:
        return lambda: None
    scheme = HTTPBasic(realm="voice agent")

    def check(given: HTTPBasicCredentials = Depends(scheme)) -> None:  # noqa: B008
        ok_user = secrets.compare_digest(given.username.encode(), auth[0].encode())
        ok_password = secrets.compare_digest(given.password.encode(), auth[1].encode())
        if not (ok_user and ok_password):
            raise HTTPException(401, "wrong credentials", {"WWW-Authenticate": "Basic"})

    return check


def create_app(agent: Agent, title: str = "Voice agent", notice: str = "") -> FastAPI:
    import gradio as gr

    cfg: AppConfig = agent.cfg
    hub = SessionHub(cfg.max_sessions)
    figures = AppMetrics(hub)
    conversation = Conversation(agent, on_final=figures.observe)
    ui = VoiceUi(conversation, hub, notice)
    app = FastAPI()
    login = Depends(basic_auth(cfg.auth))
    # said to pages beyond the limit: synthesised now, never while conversations run
    busy_audio = spoken_notice(agent) if cfg.max_sessions else None

    @app.websocket("/agent/ws/{sid}")
    async def audio_socket(ws: WebSocket, sid: str) -> None:
        """Microphone frames up, reply audio and player commands down (app/web/transport.py).
        The id is the credential: only ids the server issued are served (and the tickets
        of refused pages, with the busy notice)."""
        await ws.accept()
        if hub.redeem(sid):
            await refuse(ws, busy_audio)
            return
        try:
            session = hub.attach(sid)
        except Busy:
            await refuse(ws, busy_audio)
            return
        if session is None:
            await ws.send_json({"type": "error", "message": UNKNOWN_SESSION})
            await ws.close(code=4404, reason="unknown session")
            return
        try:
            await serve_socket(ws, session, conversation)
        finally:
            hub.detach(sid)

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        """The OpenAI Realtime protocol (app/web/realtime.py): its own bearer key
        (`--realtime-key`), a slot of `--max-sessions` like any conversation."""
        await serve_realtime(ws, hub, conversation, cfg)

    @app.post("/agent/session", dependencies=[login])
    async def new_session() -> Response:
        """A session for a script that talks to the audio channel as the page does; 503
        with the time to wait when every slot is taken."""
        try:
            return JSONResponse({"sid": hub.create(script=True).sid})
        except Busy:
            return JSONResponse({"error": "busy", "message": BUSY,
                                 "retry_after_s": RETRY_AFTER_S}, status_code=503,
                                headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.get("/metrics", dependencies=[login])
    async def metrics() -> Response:
        """Prometheus' text format (app/web/prometheus.py; docs/grafana-voice-agent.json)."""
        return Response(figures.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/agent/export/{sid}.{fmt}", dependencies=[login])
    async def export(sid: str, fmt: str) -> Response:
        """The session's per-turn records, for scripts that re-plot them."""
        session = hub.get(sid)
        if session is None or fmt not in ("json", "csv"):
            raise HTTPException(404, "unknown session or format")
        with session.lock:
            rows = list(session.metrics)
        body = to_json(rows) if fmt == "json" else to_csv(rows)
        return Response(body, media_type="application/json" if fmt == "json" else "text/csv",
                        headers={"Content-Disposition": f"attachment; filename=turns.{fmt}"})

    @app.get("/agent/health", dependencies=[login])
    async def health() -> dict:
        return {"ok": True, "sessions": len(hub), "live_sessions": hub.live,
                "max_sessions": cfg.max_sessions, "model": cfg.primary.model,
                "page_updates": ui.polls, "page_update_cpu_ms": round(ui.poll_cpu_s * 1000, 1)}

    demo = build_blocks(ui, title)
    demo.queue(default_concurrency_limit=None)
    app = gr.mount_gradio_app(app, demo, path="/", auth=cfg.auth, css=CSS,
                              max_file_size=f"{cfg.max_upload_mb:.0f}mb",
                              footer_links=["api", "gradio"])
    app.state.hub, app.state.ui = hub, ui
    return app


async def refuse(ws: WebSocket, audio: bytes | None) -> None:
    """A channel beyond the limit: the busy notice, written and spoken, then it closes."""
    await ws.send_json({"type": "busy", "message": BUSY, "retry_after_s": RETRY_AFTER_S})
    if audio is not None:
        await ws.send_bytes(audio)
        await ws.send_json({"type": "end", "turn": 0})  # the page's player plays it out
    await ws.close(code=4503, reason="busy")


def spoken_notice(agent: Agent) -> bytes | None:
    """The busy notice as one reply-audio message (turn 0); None, with a warning, when no
    voice could say it (pages then get the written notice alone)."""
    try:
        pcm, rate, engine, _ = agent.tts.synthesize(BUSY, "en")
    except TtsError as exc:
        log.warning("the busy notice is written only: TTS failed (%s)", exc)
        return None
    return audio_message(SpeechChunk(0, 0, pcm, rate, BUSY, engine, time.perf_counter()))


def serve(app: FastAPI, host: str, port: int, ready_message: str = "", ssl_certfile: str = "",
          ssl_keyfile: str = "") -> None:
    """Run the web server (HTTPS with a certificate); print `ready_message` once it accepts
    connections."""
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=3,
                                           ssl_certfile=ssl_certfile or None,
                                           ssl_keyfile=ssl_keyfile or None))

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started and ready_message:
            print(ready_message, flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run()
