#!/usr/bin/env bash
# prefix_cache_ttft.sh — issue 16 §5's target on the GPU host (under 60 s): the TTFT of a request whose
# 2,000-token system prompt is cached drops >= 5x. `kiln bench --llm` on a Llama-3-8B-shaped random
# model (bf16), batch 1, prompts of 2,048 tokens whose first 2,000 are one shared system prompt (the
# warm-up caches it), 8 generated tokens; once with prefix caching (the default) and once with
# --no-prefix-cache. Prints both TTFTs (p50), their ratio and whether it meets 5x; keeps both JSONs.
#
#   OUT=/tmp/out bench/prefix_cache_ttft.sh      # from the repository root, the bundle in dist/gpu
#   TARGET=cpu SHAPE=tiny-llama INPUT=1000 PREFIX=960 KILN=build/kiln bench/prefix_cache_ttft.sh  # CPU check
set -u

R=$(pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$R/dist/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K=${KILN:-$R/dist/gpu/bin/kiln}
TARGET=${TARGET:-cuda}
SHAPE=${SHAPE:-llama3-8b}
INPUT=${INPUT:-2048}
PREFIX=${PREFIX:-2000}
ITER=${ITER:-5}

run() { # $1: label, then extra flags
  local label=$1
  shift
  "$K" bench --llm --random "$SHAPE" --target "$TARGET" --batch 1 --input-len "$INPUT" --prefix-len "$PREFIX" \
    --output-len 8 --iterations "$ITER" --warmup 1 --export-json "$O/prefix_$label.json" "$@" >"$O/prefix_$label.log" 2>&1 ||
    { echo "kiln bench --llm ($label) failed:"; tail -5 "$O/prefix_$label.log"; exit 1; }
  grep -E "^prefix cache:|^TTFT:" "$O/prefix_$label.log" | sed "s/^/  $label: /"
}

echo "== $SHAPE on $TARGET: $INPUT-token prompts, the first $PREFIX shared =="
run cached
run uncached --no-prefix-cache
python3 - "$O/prefix_cached.json" "$O/prefix_uncached.json" <<'PY'
import json, sys
c, u = (json.load(open(p))["results"][0] for p in sys.argv[1:3])
tc, tu = c["ttft_ms"]["median"], u["ttft_ms"]["median"]
print(f"TTFT p50: cached {tc:.3f} ms, uncached {tu:.3f} ms: {tu / tc:.1f}x (target >= 5x: {'met' if tu >= 5 * tc else 'NOT met'})")
print(f"prefix cache hits: {c['prefix_cache_hits']} of {c['prefix_cache_queries']} prompt tokens")
PY
