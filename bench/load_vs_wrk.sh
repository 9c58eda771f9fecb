#!/usr/bin/env bash
# load_vs_wrk.sh — generator capacity of `kiln load` next to Debian's `wrk`, side by side on this
# machine: both drive the same trivial endpoint (bench/http_responder.c, a single-threaded epoll
# server answering "200 ok") closed-loop with the same number of connections, one client thread, and
# the same measured duration; kiln load records its full latency histograms while doing so, once
# with its native HTTP/1.1 transport (the default for http://) and once through libcurl
# (--transport curl). Trials alternate (wrk, kiln native, kiln curl, wrk, ...) so that drift in the
# machine's load hits all alike; the medians and the ratios to wrk are printed as a Markdown table
# (for bench/RESULTS.md).
#
#   bench/load_vs_wrk.sh                      # KILN=build/kiln CONNS="1 16 64" DURATION=5 TRIALS=3
#   KILN=build-x/kiln CONNS="32" bench/load_vs_wrk.sh
set -euo pipefail

KILN=${KILN:-build/kiln}
CONNS=${CONNS:-"1 16 64"}
DURATION=${DURATION:-5}
TRIALS=${TRIALS:-3}
PORT=${PORT:-18099}
CC=${CC:-cc}

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
[ -x "$KILN" ] || { echo "kiln binary '$KILN' not found: build it, or set KILN=path/to/kiln" >&2; exit 1; }
WORK=$(mktemp -d)
RESPONDER_PID=""
cleanup() {
  if [ -n "$RESPONDER_PID" ]; then kill "$RESPONDER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$CC" -O2 -o "$WORK/http_responder" "$(dirname "$0")/http_responder.c"
"$WORK/http_responder" "$PORT" 2>/dev/null &
RESPONDER_PID=$!
sleep 0.3
URL="http://127.0.0.1:$PORT/"

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs));" \
     "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $DURATION s measured per trial (kiln: after a 1 s warm-up), median of $TRIALS trials, one client thread, closed loop"
echo
echo "| connections | wrk req/s | kiln load req/s (native) | kiln / wrk | kiln load req/s (libcurl) | libcurl / wrk | kiln p50 / p99 (native) |"
echo "|---:|---:|---:|---:|---:|---:|---|"
# kiln_trial TRANSPORT CONNS: one kiln load run; appends "rate p50 p99" to $WORK/TRANSPORT.txt
kiln_trial() {
  "$KILN" load "$URL" --transport "$1" --concurrency "$2" --duration "$DURATION" --warmup 1 -q \
    --json "$WORK/kiln.json" > /dev/null
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["steps"][0]; l=s["latency_ms"]["e2e"]
print(s["completed_rate"], l["p50"], l["p99"])' "$WORK/kiln.json" >> "$WORK/$1.txt"
}
for c in $CONNS; do
  : > "$WORK/wrk.txt"
  : > "$WORK/native.txt"
  : > "$WORK/curl.txt"
  for t in $(seq "$TRIALS"); do
    wrk -t1 -c"$c" -d"${DURATION}s" "$URL" | awk '/^Requests\/sec:/ {print $2}' >> "$WORK/wrk.txt"
    kiln_trial native "$c"
    kiln_trial curl "$c"
  done
  w=$(median < "$WORK/wrk.txt")
  k=$(cut -d' ' -f1 "$WORK/native.txt" | median)
  kc=$(cut -d' ' -f1 "$WORK/curl.txt" | median)
  p50=$(cut -d' ' -f2 "$WORK/native.txt" | median)
  p99=$(cut -d' ' -f3 "$WORK/native.txt" | median)
  awk -v c="$c" -v w="$w" -v k="$k" -v kc="$kc" -v p50="$p50" -v p99="$p99" \
    'BEGIN {printf "| %d | %.0f | %.0f | %.2f | %.0f | %.2f | %.3f / %.3f ms |\n", c, w, k, k / w, kc, kc / w, p50, p99}'
done
echo
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
