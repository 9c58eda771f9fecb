#!/usr/bin/env bash
# llm_serve_sweep.sh — the LLM serving benchmark, run ON the GPU host from the repository root with the
# bundle at dist/gpu (scripts/gpu-test), in under 420 s for Llama-3-8B:
#   1. a Llama-3-8B-shaped random bf16 checkpoint (bench/make_llm_checkpoint.py, drawn on the GPU),
#      written as version 1 of model "llama" of a kiln serve repository;
#   2. a cold process to its first token (`kiln generate --target cuda --max-tokens 1`): wall time and
#      host RSS against the weights file (targets: <= 8 s, <= 1 GB above the file);
#   3. `kiln bench --llm --saturate` on the same checkpoint: 384 requests of 128 in / 128 out, 256 in
#      flight (scripts/gpu-run's llm stage runs the same on --random weights);
#   4. `kiln serve --repo` with that model (256 sequences, 8192 tokens a step, as the bench) and a
#      `kiln load` open-loop sweep of streaming completions (128 in / 128 out, eos ignored, greedy as the
#      bench: temperature 0; OpenAI's default of 1 would sample) over
#      $RATES, with the SLO p99 TTFT <= 500 ms;
#   5. the comparison (the server's best output tok/s against the bench's), the TTFT / TPOT / goodput
#      curve and the capacity answer (bench/llm_sweep_report.py summary);
#   6. with time left, the cold start again with the checkpoint evicted from the page cache.
# Output in $OUT (default /tmp/kiln-llm-sweep): job.log (everything, the summary last), summary.json,
# bench_llm.json, sweep.json / sweep.csv / sweep.html, serve.log, cold_*.json.
# Settings (environment): SHAPE (llama3-8b; tiny-llama with TARGET=cpu checks the flags on a CPU
# machine), TARGET (cuda), RATES (req/s per step, default 8,16,32,48,64,80,96,112), STEP_S (measured
# seconds per step, 8), WARMUP_S (per step, 4: longer than one 128-token stream, so that the window sees
# steady completions), KILN_BIN (default dist/gpu/bin/kiln), WORK (/tmp/kiln-llm-sweep-work), PORT
# (8124), BUDGET_S (400: the disk-cold start is skipped when it would not fit).
set -u
cd "$(dirname "$0")/.." || exit 2
R=$(pwd)
O=${OUT:-/tmp/kiln-llm-sweep}
mkdir -p "$O"
export LD_LIBRARY_PATH="$R/dist/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_SOURCE_DIR=$R PYTHONUNBUFFERED=1
K=${KILN_BIN:-$R/dist/gpu/bin/kiln}
SHAPE=${SHAPE:-llama3-8b} TARGET=${TARGET:-cuda} RATES=${RATES:-8,16,32,48,64,80,96,112}
STEP_S=${STEP_S:-8} WARMUP_S=${WARMUP_S:-4} PORT=${PORT:-8124} BUDGET_S=${BUDGET_S:-400}
W=${WORK:-/tmp/kiln-llm-sweep-work}
REPO=$W/repo
CK=$REPO/llama/1
REPORT=$R/bench/llm_sweep_report.py
T0=$(date +%s)
: >"$O/job.log"
log() { echo "== [$(($(date +%s) - T0)) s] $*" | tee -a "$O/job.log"; }
run() { "$@" 2>&1 | tee -a "$O/job.log"; return "${PIPESTATUS[0]}"; }

[ -x "$K" ] || { log "no kiln at $K (carry dist/gpu, or set KILN_BIN)"; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv >>"$O/job.log" 2>&1

log "checkpoint: $SHAPE bf16 random weights -> $CK"
rm -rf "$W"
mkdir -p "$CK"
run timeout 200 python3 "$R/bench/make_llm_checkpoint.py" "$CK" --shape "$SHAPE" --dtype bf16 || { log "checkpoint failed"; exit 1; }
echo "{\"target\":\"$TARGET\",\"max_seqs\":256,\"max_batched_tokens\":8192,\"max_context\":1024}" >"$REPO/llama/config.json"

log "cold process to first token (page cache warm: the checkpoint was just written)"
run timeout 90 python3 "$REPORT" timed --json "$O/cold_warm.json" --weights "$CK/model.safetensors" -- \
  "$K" generate "$CK" --target "$TARGET" --prompt "the of and" --max-tokens 1 --temperature 0

log "kiln bench --llm --saturate (384 requests of 128 in / 128 out, 256 in flight)"
run timeout 120 "$K" bench --llm "$CK" --target "$TARGET" --saturate --input-len 128 --output-len 128 \
  --requests 384 --concurrency 256 --export-json "$O/bench_llm.json" | grep -vE "^(TTFT|TPOT|E2E|methods)"

log "kiln serve --repo $REPO on port $PORT"
"$K" serve --repo "$REPO" --port "$PORT" >"$O/serve.log" 2>&1 &
SP=$!
for i in $(seq 1 240); do
  curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && break
  kill -0 $SP 2>/dev/null || break
  sleep 0.5
done
if curl -sf "localhost:$PORT/v1/models" >>"$O/job.log"; then
  echo >>"$O/job.log"
  log "ready after ~$((i / 2)) s; kiln load sweep rate=$RATES (${WARMUP_S} s warm-up + ${STEP_S} s per step)"
  run timeout 300 "$K" load "http://127.0.0.1:$PORT" --api openai-completions --model llama --stream \
    --input-len 128 --output-len 128 --ignore-eos --extra '{"temperature":0}' --sweep "rate=$RATES" --duration "${STEP_S}s" \
    --warmup "${WARMUP_S}s" --connections 1024 --timeout 120s --slo ttft=500ms --goodput 99 \
    --stop-when "ttft_p99>20s,errors>5%" --scrape --json "$O/sweep.json" --csv "$O/sweep.csv" \
    --report "$O/sweep.html" -q | sed -n '/^---- sweep/,$p'
  curl -s "localhost:$PORT/metrics" | grep -E "^kiln_(num_preemptions_total|kv_cache_blocks_total|batch_size_count)" >>"$O/job.log"
else
  log "the server did not come up"
  tail -20 "$O/serve.log" | tee -a "$O/job.log"
fi
kill -TERM $SP 2>/dev/null
wait $SP
log "serve exit $?"

if (($(date +%s) - T0 < BUDGET_S - 60)); then
  log "cold process to first token, the checkpoint evicted from the page cache (reads the disk)"
  run timeout 60 python3 "$REPORT" timed --evict --json "$O/cold_disk.json" --weights "$CK/model.safetensors" -- \
    "$K" generate "$CK" --target "$TARGET" --prompt "the of and" --max-tokens 1 --temperature 0
else
  log "no time left for the disk-cold start"
fi

log "summary"
run python3 "$REPORT" summary --out "$O"
rm -rf "$W"
log "done"
