"""The web server: Gradio page + the audio channel (SSE out, playback reports in)."""

from __future__ import annotations

import asyncio
import json
import logging
import queue

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from app.config import AppConfig
from app.hub import SessionHub
from app.metrics import to_csv, to_json
from app.pipeline import Agent
from app.ui import CSS, VoiceUi, build_blocks

log = logging.getLogger(__name__)
HEARTBEAT_S = 15.0


def create_app(agent: Agent, title: str = "Voice agent", notice: str = "") -> FastAPI:
    import gradio as gr

    cfg: AppConfig = agent.cfg
    hub = SessionHub()
    ui = VoiceUi(agent, hub, notice)
    app = FastAPI()

    @app.get("/agent/audio/{sid}")
    async def audio_events(sid: str, request: Request) -> StreamingResponse:
        session = None
        for _ in range(100):  # the page opens this before its session is registered
            if (session := hub.get(sid)) is not None:
                break
            await asyncio.sleep(0.05)
        if session is None:
            raise HTTPException(404, "unknown session")

        async def events():  # noqa: ANN202
            session.listeners += 1
            idle = 0.0
            try:
                yield ": connected\n\n"
                while not await request.is_disconnected():
                    try:
                        event = session.audio.get_nowait()
                    except queue.Empty:
                        await asyncio.sleep(0.01)
                        idle += 0.01
                        if idle >= HEARTBEAT_S:
                            idle = 0.0
                            yield ": ping\n\n"
                        continue
                    session.on_written(event)
                    yield f"data: {json.dumps(event)}\n\n"
            finally:
                session.listeners -= 1

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/agent/played")
    async def played(request: Request) -> dict:
        try:
            body = await request.json()
            sid, turn, delay = str(body["sid"]), int(body["turn"]), float(body["delay_ms"])
        except (ValueError, KeyError, TypeError) as exc:
            raise HTTPException(400, "expected {sid, turn, delay_ms}") from exc
        session = hub.get(sid)
        if session is None:
            raise HTTPException(404, "unknown session")
        row = session.on_played(turn, delay)
        return {"ok": row is not None}

    @app.get("/agent/export/{sid}.{fmt}")
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

    @app.get("/agent/health")
    async def health() -> dict:
        return {"ok": True, "sessions": len(hub), "model": cfg.primary.model}

    demo = build_blocks(ui, title)
    demo.queue(default_concurrency_limit=None)
    app = gr.mount_gradio_app(app, demo, path="/", auth=cfg.auth, css=CSS,
                              max_file_size=f"{cfg.max_upload_mb:.0f}mb",
                              footer_links=["api", "gradio"])
    app.state.hub, app.state.ui = hub, ui
    return app


def serve(app: FastAPI, host: str, port: int, ready_message: str = "") -> None:
    """Run the web server; print `ready_message` once it accepts connections."""
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=3))

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started and ready_message:
            print(ready_message, flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run()
