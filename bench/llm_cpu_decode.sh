#!/usr/bin/env bash
# llm_cpu_decode.sh — GPT-2 decode speed of two kiln builds on the CPU, side by side, the way
# bench/RESULTS.md ("GPT-2 decode on the CPU") measures it on a shared machine: rounds that run the
# builds back to back (so drift in the machine's load hits both alike), each round taking, per build,
# the TPOT `kiln generate` prints with 2 threads and with 1, and the CPU time per token with 1 thread
# (`perf stat -e task-clock` of --max-tokens 136 minus --max-tokens 8, divided by 128: what a busy
# machine distorts least). Prints every round, then the medians and the best values.
#
#   BEFORE=/path/to/old/kiln bench/llm_cpu_decode.sh          # AFTER=build/kiln MODEL=models/kjv-gpt2 ROUNDS=10
set -euo pipefail

BEFORE=${BEFORE:?set BEFORE to the kiln binary to compare against}
AFTER=${AFTER:-build/kiln}
MODEL=${MODEL:-models/kjv-gpt2}
ROUNDS=${ROUNDS:-10}
command -v perf >/dev/null || { echo "llm_cpu_decode.sh: perf is needed (linux-perf)" >&2; exit 1; }

# TPOT in ms of one generation with $2 threads by kiln binary $1.
tpot() {
    KILN_NUM_THREADS=$2 "$1" generate "$MODEL" --prompt In_the_beginning --max-tokens 128 --temperature 0 \
        --seed 1 2>&1 >/dev/null | sed -n 's/.*TPOT \([0-9.]*\) ms.*/\1/p'
}
# task-clock ms of a 1-thread generation of $2 tokens by kiln binary $1.
task_ms() {
    KILN_NUM_THREADS=1 perf stat -x, -e task-clock "$1" generate "$MODEL" --prompt In_the_beginning \
        --max-tokens "$2" --temperature 0 --seed 1 2>&1 >/dev/null | awk -F, '/task-clock/ {print $1}'
}
cpu_per_token() { awk -v a="$(task_ms "$1" 8)" -v b="$(task_ms "$1" 136)" 'BEGIN {printf "%.3f", (b - a) / 128}'; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "round load | tpot2 before after | tpot1 before after | cpu1 before after"
for r in $(seq "$ROUNDS"); do
    line="$r $(cut -d' ' -f1 /proc/loadavg) $(tpot "$BEFORE" 2) $(tpot "$AFTER" 2) $(tpot "$BEFORE" 1) $(tpot "$AFTER" 1)"
    line="$line $(cpu_per_token "$BEFORE") $(cpu_per_token "$AFTER")"
    echo "$line" | tee -a "$out"
done
# median and best of column $1 of the rounds
stat() { cut -d' ' -f"$1" "$out" | sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f (%.2f)", m, v[1]}'; }
echo
echo "| measure | before: median (best) | after: median (best) |"
echo "|---|---:|---:|"
echo "| TPOT, 2 threads | $(stat 3) ms | $(stat 4) ms |"
echo "| TPOT, 1 thread | $(stat 5) ms | $(stat 6) ms |"
echo "| CPU time per token, 1 thread | $(stat 7) ms | $(stat 8) ms |"
