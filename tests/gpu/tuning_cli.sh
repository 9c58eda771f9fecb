#!/usr/bin/env bash
# tuning_cli.sh — `kiln build --tuning-level / --timing-cache` and `kiln inspect` on the GPU host: the
# sample CNN built twice for cuda fp16 with one timing cache (the second build must print "0 tactics
# timed"), its engine's tactics listed by inspect, the build times of levels 0 and 2 printed, and an
# out-of-range level refused as a usage error (exit 2).
# usage: tuning_cli.sh KILN DATA_DIR   (DATA_DIR laid out like the repository: models/...)
set -uo pipefail
kiln=${1:?usage: tuning_cli.sh KILN DATA_DIR}
data=${2:?usage: tuning_cli.sh KILN DATA_DIR}
work=$(mktemp -d /tmp/kiln-tuning-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
model="$data/models/sample_cnn.onnx"
common=(--target cuda --fp16 --profile image:1x3x32x32,4x3x32x32,8x3x32x32)
fail() { echo "FAIL: $*"; exit 1; }

"$kiln" build "$model" "${common[@]}" --tuning-level 0 -o "$work/l0.kiln" >"$work/l0.txt" 2>&1 || fail "level 0 build: $(cat "$work/l0.txt")"
"$kiln" build "$model" "${common[@]}" --timing-cache "$work/tc.bin" --verbose -o "$work/a.kiln" >"$work/a.txt" 2>&1 ||
  fail "level 2 build: $(tail -5 "$work/a.txt")"
"$kiln" build "$model" "${common[@]}" --timing-cache "$work/tc.bin" -o "$work/b.kiln" >"$work/b.txt" 2>&1 ||
  fail "second level 2 build: $(cat "$work/b.txt")"
grep -h '^built\|^tuning' "$work/l0.txt" "$work/a.txt" "$work/b.txt"
grep 'tuned node' "$work/a.txt" | head -5
grep -q 'timing cache: 0 hits, [1-9][0-9]* misses, [1-9][0-9]* tactics timed' "$work/a.txt" || fail "the cold build timed nothing"
grep -Eq 'timing cache: [1-9][0-9]* hits, [0-9]+ misses, 0 tactics timed' "$work/b.txt" || fail "the warm build timed tactics"
"$kiln" inspect "$work/b.kiln" >"$work/inspect.txt" 2>&1 || fail "inspect: $(cat "$work/inspect.txt")"
grep -A4 '^tactics:' "$work/inspect.txt"
grep -Eq '^  .*: (cublasLt algo|cudnn) ' "$work/inspect.txt" || fail "inspect lists no tactic"
grep -q 'tuning-level 2' "$work/inspect.txt" || fail "inspect's build options lack --tuning-level 2"
"$kiln" run "$work/b.kiln" >/dev/null 2>&1 || fail "kiln run of the tuned engine"
"$kiln" build "$model" --target cuda --tuning-level 4 -o "$work/x.kiln" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--tuning-level 4 is not a usage error"
echo "tuning_cli: ok"
