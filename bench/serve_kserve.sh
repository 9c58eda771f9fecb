#!/usr/bin/env bash
# serve_kserve.sh — kiln serve's tensor path against kiln bench for the same engine, in one run on the
# GPU host (under 300 s): ResNet-50 fp16 (dynamic batch, profile 1..256) through `kiln bench` with
# transfers (1 and 2 streams, the serving batch and 256) and through `kiln serve` + `kiln load`
# (KServe binary, 8 images a request, several concurrencies and --threads values), each twice: the
# engine with float32 I/O and the same engine built with `--io-format fp16` (float16 on the wire,
# half the bytes), then a tiny model's p50 through the server next to its bench latency (the
# server's added latency). After each load step the server's stage histograms
# (kiln_request_stage_duration_seconds: receive, parse, queue, input, compute, output) are scraped
# and their means over the step printed (where a request's time went), with the runs bound where their
# requests' bytes landed (kiln_batch_direct_runs_total) and the landing misses. Prints a ratio table (serving
# img/s / bench img/s of the same engine; issue #14 asks >= 0.95) and keeps every log and JSON.
#
#   OUT=/tmp/out bench/serve_kserve.sh        # from the repository root, the bundle in dist/gpu
#   QUICK=1 TARGET=cpu KILN=build/kiln bench/serve_kserve.sh   # a check of the script on a CPU machine:
#                                             # sample_cnn stands in for ResNet-50, short runs
set -u

R=$(pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$R/dist/gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_SOURCE_DIR="$R"
K=${KILN:-$R/dist/gpu/bin/kiln}
TARGET=${TARGET:-cuda}
QUICK=${QUICK:-0}
PORT=${PORT:-8123}
BUDGET_S=${BUDGET_S:-280}           # load runs that would end past this are skipped
CONN_MEM=${CONN_MEM:-}              # kiln serve's connection_memory_bytes (default: the server's, 256 KiB)
W=$(mktemp -d)
SP=""
cleanup() {
  if [ -n "$SP" ]; then kill -TERM "$SP" 2>/dev/null && wait "$SP"; fi
  rm -rf "$W"
}
trap cleanup EXIT
log() { echo "== $(date -u +%H:%M:%S) +$SECONDS s: $*" | tee -a "$O/serve_kserve.log"; }
[ -x "$K" ] || { echo "kiln binary '$K' not found (bundle at dist/gpu, or set KILN)" >&2; exit 1; }

if [ "$QUICK" = 1 ]; then
  IN=image ROW=3x32x32 MAXB=64 INSTANCES=1 DUR=2 TINY_DUR=2
  LOADS=${LOADS:-"8:1 16:2"}
  LOADS16=${LOADS16:-"16:2"}
  cp models/sample_cnn.onnx "$W/model.onnx"
  BUILD_ARGS=(--target "$TARGET")
else
  IN=input ROW=3x224x224 MAXB=${MAXB:-128} INSTANCES=${INSTANCES:-2} DUR=5 TINY_DUR=5
  LOADS=${LOADS:-"32:1 64:4 128:4 128:8 256:8"}   # concurrency:threads of kiln load, float32 I/O
  LOADS16=${LOADS16:-"64:4 128:8 256:8"}           # the same for the float16-I/O engine
  log "export resnet50 (torchvision, random weights)"
  timeout 120 python3 - "$W/model.onnx" >> "$O/serve_kserve.log" 2>&1 <<'PY'
import sys, torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], input_names=["input"], output_names=["output"],
                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17, dynamo=False)
PY
  BUILD_ARGS=(--target "$TARGET" --fp16 --profile "input:1x$ROW,${MAXB}x$ROW,256x$ROW")
fi
log "build (${BUILD_ARGS[*]})"
timeout 150 "$K" build "$W/model.onnx" "${BUILD_ARGS[@]}" -o "$W/model.kiln" >> "$O/serve_kserve.log" 2>&1 \
  || { log "build failed"; exit 1; }
log "build --io-format fp16"
timeout 150 "$K" build "$W/model.onnx" "${BUILD_ARGS[@]}" --io-format fp16 -o "$W/model16.kiln" >> "$O/serve_kserve.log" 2>&1 \
  || { log "build --io-format fp16 failed"; exit 1; }

BENCHES=()
for v in "" 16; do
  for b in 256 "$MAXB"; do
    for s in 1 2; do
      [ -n "$v" ] && [ "$b" != 256 ] && continue   # float16 I/O: the reference batch only
      log "kiln bench model$v.kiln --batch $b --streams $s"
      timeout 60 "$K" bench "$W/model$v.kiln" --batch "$b" --streams "$s" --duration "$DUR" \
        --export-json "$O/bench${v}_b${b}_s$s.json" > "$O/bench${v}_b${b}_s$s.txt" 2>&1
      grep -E "^Throughput|^H2D|^Compute" "$O/bench${v}_b${b}_s$s.txt" | tee -a "$O/serve_kserve.log"
      BENCHES+=("bench${v}_b${b}_s$s.json")
    done
  done
done

log "serve: model max_batch $MAXB, $INSTANCES instance(s); tiny: sample_cnn unbatched"
mkdir -p "$W/repo/model/1" "$W/repo/model16/1" "$W/repo/tiny/1"
cp "$W/model.kiln" "$W/repo/model/1/model.kiln"
cp "$W/model16.kiln" "$W/repo/model16/1/model.kiln"
# landing memory for 16 batches: the bodies of 256 requests of 8 images in flight land without a miss
for m in model model16; do
  cat > "$W/repo/$m/config.json" <<EOF
{"target":"$TARGET","max_batch":$MAXB,"preferred_batch_sizes":[$MAXB],"instances":$INSTANCES,"max_queue":4096,"max_queue_delay_us":2000,"landing_batches":16}
EOF
done
timeout 60 "$K" build models/sample_cnn.onnx --target "$TARGET" -o "$W/repo/tiny/1/model.kiln" >> "$O/serve_kserve.log" 2>&1
echo "{\"target\":\"$TARGET\",\"max_batch\":0}" > "$W/repo/tiny/config.json"
echo "{${CONN_MEM:+\"connection_memory_bytes\": $CONN_MEM}}" > "$W/server.json"
"$K" serve --repo "$W/repo" --port "$PORT" --config "$W/server.json" > "$O/serve.log" 2>&1 &
SP=$!
for i in $(seq 1 240); do curl -sf "localhost:$PORT/v2/health/ready" > /dev/null && break; sleep 0.5; done
log "ready after ~$((i / 2)) s (warm-up of every batch size on every context)"
for m in model model16; do curl -s "localhost:$PORT/v2/models/$m" >> "$O/serve_kserve.log"; echo >> "$O/serve_kserve.log"; done

# The mean of each stage of model $3's requests between two /metrics scrapes ($1 before, $2 after).
stages() {
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
def read(path):
    out = {}
    for line in open(path):
        m = re.match(r'kiln_request_stage_duration_seconds_(sum|count)\{model="([^"]*)",version="[^"]*",stage="(\w+)"\} (\S+)', line)
        if m and m.group(2) == sys.argv[3]:
            out[(m.group(3), m.group(1))] = float(m.group(4))
        m = re.match(r'(kiln_batch_size_count|kiln_batch_direct_runs_total|kiln_landing_misses_total)\{model="([^"]*)",version="[^"]*"\} (\S+)', line)
        if m and m.group(2) == sys.argv[3]:
            out[m.group(1)] = float(m.group(3))
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
d = lambda k: b.get(k, 0) - a.get(k, 0)
names = ["receive", "parse", "queue", "input", "compute", "output"]
n = d(("receive", "count"))
if not n:
    print("   stages: no request of the step ran")
    sys.exit()
means = [d((s, "sum")) / n * 1e3 for s in names]
print(f"   stages over {n:.0f} requests (warm-up included), mean ms: " + ", ".join(f"{s} {v:.3f}" for s, v in zip(names, means))
      + f" (total {sum(means):.3f})")
print(f"   runs {d('kiln_batch_size_count'):.0f}, of them {d('kiln_batch_direct_runs_total'):.0f} bound where their"
      f" requests landed (no copy); {d('kiln_landing_misses_total'):.0f} requests found the landing memory full")
PY
}

LOADED=()
for v in "" 16; do
  list=$LOADS; [ -n "$v" ] && list=$LOADS16
  for ct in $list; do
    c=${ct%:*} t=${ct#*:}
    if [ $((SECONDS + DUR + 12)) -gt "$BUDGET_S" ]; then log "skipped model$v concurrency $c threads $t: time budget"; continue; fi
    log "kiln load kserve binary model$v 8x$ROW, concurrency $c, threads $t"
    curl -s "localhost:$PORT/metrics" > "$W/before.txt"
    timeout $((DUR + 30)) "$K" load "http://127.0.0.1:$PORT" --api kserve --model "model$v" --shape "$IN=8x$ROW" --binary \
      --concurrency "$c" --threads "$t" --duration "${DUR}s" --warmup 1s --scrape -q --json "$O/load${v}_c${c}_t$t.json" \
      > "$O/load${v}_c${c}_t$t.txt" 2>&1
    grep -E "^(requests|rate|  e2e|errors)" "$O/load${v}_c${c}_t$t.txt" | tee -a "$O/serve_kserve.log"
    curl -s "localhost:$PORT/metrics" > "$W/after.txt"
    stages "$W/before.txt" "$W/after.txt" "model$v" | tee -a "$O/serve_kserve.log"
    LOADED+=("load${v}_c${c}_t$t.json")
  done
done
curl -s "localhost:$PORT/metrics" > "$O/metrics.txt"

log "tiny model: kiln load kserve binary, concurrency 1"
timeout $((TINY_DUR + 30)) "$K" load "http://127.0.0.1:$PORT" --api kserve --model tiny --binary --concurrency 1 \
  --duration "${TINY_DUR}s" -q --json "$O/load_tiny.json" > "$O/load_tiny.txt" 2>&1
log "tiny model: kiln bench (same engine, batch 1, with transfers)"
timeout 30 "$K" bench "$W/repo/tiny/1/model.kiln" --duration 3 --export-json "$O/bench_tiny.json" > "$O/bench_tiny.txt" 2>&1
kill -TERM "$SP"; wait "$SP"; log "serve exit $?"; SP=""

python3 - "$O" "${BENCHES[*]}" "${LOADED[*]}" <<'PY' | tee "$O/serve_kserve_table.md"
import json, os, sys
out, benches, loads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def read(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return None
IO = {"": "fp32 I/O", "16": "fp16 I/O"}  # the variant: the digits after bench / load in a file's name
variant = lambda name: "16" if name[4:7] == "16_" or name[5:8] == "16_" else ""
bench = {}
for name in benches:
    d = read(name)
    if d:
        c = d["config"]
        bench[(variant(name), c["batch"], c["streams"])] = d["results"]["items_per_s"]
print("| kiln bench (transfers) | img/s |\n|---|---:|")
for (v, b, s), ips in sorted(bench.items()):
    print(f"| {IO[v]}, batch {b}, {s} stream{'s' if s > 1 else ''} | {ips:,.0f} |")
print("\n| kiln serve + kiln load (KServe binary, 8 images/request) | req/s | img/s | p50 ms | p99 ms | failed | GPU util % |"
      " / bench b256 1 stream | / bench b256 2 streams |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
best = {}
for name in loads:
    d = read(name)
    if not d:
        print(f"| {name} | (no result) |"); continue
    v = variant(name)
    ref1, ref2 = bench.get((v, 256, 1)), bench.get((v, 256, 2))
    s = d["steps"][0]
    img = s["completed_rate"] * 8
    best[v] = max(best.get(v, 0), img)
    e2e = s["latency_ms"]["e2e"]
    ratio = lambda ref: f"{img / ref:.3f}" if ref else "-"
    util = [m["mean"] for m in s.get("server_metrics") or []]
    util = f"{sum(util) / len(util):.0f}" if util else "-"
    print(f"| {IO[v]}, concurrency {s['concurrency']}, --threads {d['config']['threads']} | {s['completed_rate']:,.1f} |"
          f" {img:,.0f} | {e2e['p50']:.2f} | {e2e['p99']:.2f} | {s['failed']} | {util} | {ratio(ref1)} | {ratio(ref2)} |")
print()
for v, img in sorted(best.items()):
    ref1, ref2 = bench.get((v, 256, 1)), bench.get((v, 256, 2))
    if ref1:
        print(f"{IO[v]}: best serving {img:,.0f} img/s = {img / ref1:.3f} of its kiln bench b256 (1 stream)"
              + (f", {img / ref2:.3f} of 2 streams" if ref2 else "") + "; target >= 0.95")
for v in IO:
    series = {}
    try:
        for line in open(os.path.join(out, "metrics.txt")):
            if line.startswith("kiln_") and f'model="model{v}"' in line and "stage=" not in line:
                name, value = line.rsplit(" ", 1)
                series[name.split("{")[0]] = float(value)
    except OSError:
        pass
    runs, reqs = series.get("kiln_batch_size_count", 0), series.get("kiln_queue_duration_seconds_count", 0)
    if runs and reqs:
        print(f"server, {IO[v]}, over every load run: {runs:.0f} runs of {series['kiln_batch_size_sum'] / runs:.1f} images"
              f" on average; a request waited {series['kiln_queue_duration_seconds_sum'] / reqs * 1e3:.2f} ms in the"
              f" queue and {series['kiln_compute_duration_seconds_sum'] / reqs * 1e3:.2f} ms from its run's start to its"
              " outputs (mean)")
tiny, tb = read("load_tiny.json"), read("bench_tiny.json")
if tiny and tb:
    p50 = tiny["steps"][0]["latency_ms"]["e2e"]["p50"]
    med = tb["results"]["latency_ms"]["median"]
    print(f"tiny model: kiln serve p50 {p50 * 1e3:.0f} us, kiln bench median {med * 1e3:.0f} us:"
          f" the server adds {(p50 - med) * 1e3:.0f} us (target <= 100 us)")
PY
log "done in $SECONDS s"
