#!/bin/bash
# Issue 50: bench.capacity on a GPU host staged by `python -m build stage-gpu`, with the
# model server's own /metrics sampled throughout (bench.vllm_metrics), one setting of the
# server's flags at a time. The primary alone (no anchor), started once per setting and
# kept up (bench/h200_voice.sh servers): a call that names the flags already up reuses it.
#   bash bench/capacity_vllm.sh RES NAME "VLLM_FLAGS" [CAPACITY] [APP_EXTRA]
#     RES/NAME/   capacity.{json,md}, app.log, vllm_metrics.{json,md}, vllm_samples.json.gz,
#                 vllm-primary.log (bench/h200_voice.sh's and bench.vllm_metrics' files)
#   bash bench/capacity_vllm.sh start "VLLM_FLAGS" [SEQS]  # start that server, return at once
# The app's flags are the README's many-callers ones for 64 (APP_EXTRA: more), with the
# server's --max-num-seqs and the app's --max-sessions sized to the largest N of CAPACITY
# (a sweep to 96 is not refused at 64). Defaults: CAPACITY=64,64,1 (two points of 64
# callers, then one conversation), 5 clips a caller.
set -uo pipefail
server() {  # the primary with --max-num-seqs SEQS and these flags, unless it is already up
  local want="--max-num-seqs $SEQS $1"
  if [ "$(cat logs/capacity-vllm.flags 2>/dev/null)" = "$want" ] && [ -f logs/gpu-servers.pid ]
  then return 0; fi
  [ -f logs/gpu-servers.pid ] && bash bench/h200_voice.sh stop
  mv -f logs/vllm-primary.log "logs/vllm-primary.$(date +%s).log" 2>/dev/null
  echo "$want" >logs/capacity-vllm.flags
  ANCHOR=off VLLM_FLAGS="$want" bash bench/h200_voice.sh servers
}
CAPACITY=${4:-64,64,1}
SEQS=$(tr ',' '\n' <<<"$CAPACITY" | sort -n | tail -1)
[ "$SEQS" -ge 64 ] || SEQS=64
[ "$1" = start ] && SEQS=${3:-64}  # `start`: the server alone, for 64 callers unless told
mkdir -p logs
UNPACK_ONLY=1 bash bench/h200_voice.sh unpack || exit 1
if [ "$1" = start ]; then server "$2"; exit; fi
RES=$1 NAME=$2
server "$3" || exit 1
t0=$(date +%s)
DEADLINE=${DEADLINE:-$(( t0 + 3600 ))}
# until it answers; a server that exited (its pid file gone) or the deadline near: its log
until python3 -m bench.gpu_servers --wait --ready-timeout 10 2>/dev/null; do
  if ! kill -0 "$(cat logs/gpu-servers.pid 2>/dev/null)" 2>/dev/null \
      || [ "$(date +%s)" -ge $(( DEADLINE - 30 )) ]; then
    echo "server not up after $(( $(date +%s) - t0 )) s"; tail -25 logs/vllm-primary.log | cut -c1-300
    exit 1
  fi
done
echo "server up after waiting $(( $(date +%s) - t0 )) s"
grep -E "non-default args|KV cache size|Maximum concurrency|Capturing CUDA graphs|Graph capturing finished|init engine|torch.compile takes|async" \
  logs/vllm-primary.log | cut -c1-400 | tail -12
mkdir -p "$RES/$NAME"
# DEADLINE (epoch s, above): the run is stopped (SIGINT: the app is stopped, the points so far
# kept) in time for the call to end by then
left=$(( DEADLINE - $(date +%s) ))
ASR_DEVICE=cuda SERVERS=running CAPACITY=$CAPACITY APP_FLAGS="--tts-stand-in --max-sessions $SEQS \
--workers 8 --model-after-ms 96 ${5:-}" timeout -s INT $left python3 -m bench.vllm_metrics --url http://127.0.0.1:8000 \
  --out "$RES/$NAME" -- bash bench/h200_voice.sh "$RES/$NAME" 5 >"$RES/$NAME/run.log" 2>&1
echo "rc $? after $(( $(date +%s) - t0 )) s"
grep -E "sessions:|Error|Traceback" "$RES/$NAME/run.log" | tail -8
sed -n '3,7p;/^| sessions | start/,/^$/p;/^| sessions | cores/,/^$/p' "$RES/$NAME/capacity.md"
sed -n '3,10p;/^| window | prompt/,/^$/p;/^- /p' "$RES/$NAME/vllm_metrics.md"
