# GPU image: vLLM's official OpenAI server image + the voice agent, which starts the primary
# (and, with --anchor-checkpoint, the anchor) vLLM server with the model card's flags.
#   docker build -t lowlat-voice-agent .
#   docker run --gpus all -p 7860:7860 -e VOICE_AGENT_AUTH=me:secret \
#     -v ~/.cache/huggingface:/root/.cache/huggingface lowlat-voice-agent \
#     --anchor-checkpoint <an experts-only INT4 checkpoint>
# Not built by CI: the project's machines have no Docker engine.
FROM vllm/vllm-openai:v0.24.0

RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng haproxy \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/voice-agent
# The app has its own environment: its pins (gradio, fastapi) must not move vLLM's.
COPY requirements/app.txt requirements/app.txt
RUN python3 -m venv /opt/app-venv \
 && /opt/app-venv/bin/pip install --no-cache-dir -r requirements/app.txt
COPY app app
COPY persona persona
RUN /opt/app-venv/bin/python -m app.ops.prepare whisper

EXPOSE 7860
# Listening on 0.0.0.0 requires credentials: pass VOICE_AGENT_AUTH=user:password.
ENTRYPOINT ["/opt/app-venv/bin/python", "-m", "app", "--launch", "--host", "0.0.0.0", \
            "--vllm-python", "python3"]
