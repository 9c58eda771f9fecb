#!/usr/bin/env bash
# tuning_cli.sh — `kiln build --tuning-level / --timing-cache` and `kiln inspect` on the GPU host: the
# sample CNN built twice for cuda fp16 with one timing cache (the second build must print "0 tactics
# timed"), its engine's tactics listed by inspect, the build times of levels 0 and 2 printed, and an
# out-of-range level refused as a usage error (exit 2); then mixed precision on cuda: an fp16 build with
# `--layer-precision 'op:Gemm:fp32' --layer-precision 'block2*:bf16'` must list those layers in that
# precision in `kiln inspect`, and `kiln compare` must find it within the fp16 tolerances (and with
# --per-layer, compare the unfused fp16 graph layer by layer).
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
grep -Eq 'timing cache: ([0-9]+) hits \(\1 same as an earlier layer\), [1-9][0-9]* misses, [1-9][0-9]* tactics timed' \
  "$work/a.txt" || fail "the cold build timed nothing"
grep -Eq 'timing cache: [1-9][0-9]* hits \(0 same as an earlier layer\), [0-9]+ misses, 0 tactics timed' "$work/b.txt" ||
  fail "the warm build timed tactics"
grep -q 'tuning level 2: up to 8 candidates a layer, up to 10 timed runs each; budget 2500 ms for the build' "$work/a.txt" ||
  fail "--verbose does not state the tuning budget"
"$kiln" build "$model" --target cuda --tuning-budget-ms 0 -o "$work/x.kiln" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--tuning-budget-ms 0 is not a usage error"
"$kiln" inspect "$work/b.kiln" >"$work/inspect.txt" 2>&1 || fail "inspect: $(cat "$work/inspect.txt")"
grep -A4 '^tactics:' "$work/inspect.txt"
grep -Eq '^  .*: (cublasLt algo|cudnn) ' "$work/inspect.txt" || fail "inspect lists no tactic"
grep -q 'tuning-level 2' "$work/inspect.txt" || fail "inspect's build options lack --tuning-level 2"
"$kiln" run "$work/b.kiln" >/dev/null 2>&1 || fail "kiln run of the tuned engine"
"$kiln" build "$model" --target cuda --tuning-level 4 -o "$work/x.kiln" >/dev/null 2>&1
[ $? -eq 2 ] || fail "--tuning-level 4 is not a usage error"
"$kiln" build "$model" --target cuda --fp16 --layer-precision 'op:Gemm:fp32' --layer-precision 'block2*:bf16' \
  -o "$work/mixed.kiln" >"$work/mixed.txt" 2>&1 || fail "mixed-precision build: $(tail -5 "$work/mixed.txt")"
"$kiln" inspect "$work/mixed.kiln" >"$work/mixed_inspect.txt" 2>&1 || fail "inspect mixed: $(cat "$work/mixed_inspect.txt")"
grep -E '^precision|overridden' "$work/mixed_inspect.txt" | head -12
grep -E '^ +fp32 +[^ ]+ \(Gemm\)' "$work/mixed_inspect.txt" >/dev/null || fail "inspect shows no fp32 Gemm in the mixed engine"
grep -E '^ +bf16 +block2' "$work/mixed_inspect.txt" >/dev/null || fail "inspect shows no bf16 block2 layer in the mixed engine"
"$kiln" compare "$model" "$work/mixed.kiln" >"$work/cmp.txt" 2>&1 || fail "compare of the mixed engine: $(cat "$work/cmp.txt")"
tail -4 "$work/cmp.txt"
"$kiln" compare "$model" --target cuda --fp16 --per-layer >"$work/cmp_layers.txt" 2>&1 ||
  fail "compare --per-layer (cuda fp16): $(tail -8 "$work/cmp_layers.txt")"
tail -3 "$work/cmp_layers.txt"
echo "tuning_cli: ok"
