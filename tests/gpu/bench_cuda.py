"""`kiln bench` on the GPU, next to the number bench/gpu_bench.py reports: for ResNet-50 (b1, b256) and
BERT-base seq 128 (b1, b32) — or with --quick ResNet-18 and a 2-layer BERT — exported exactly as
gpu_bench.py exports them (its functions, imported from beside this file) and built with
`kiln build --target cuda --fp16`, it measures
  - the GPU's ceilings once (`kiln bench --ceilings --target cuda`),
  - `kiln run --no-transfers` median latency (gpu_bench.py's kiln number),
  - `kiln bench --no-transfers` (median GPU compute and host latency, qps, items/s, the diagnosis),
  - for batch-1 models also `--graph off` (the launch overhead CUDA graphs remove),
  - for every model `--profile` (the per-layer table, which must be timed on the device),
and prints one table with the agreement ratio bench compute / run latency. Runs on the GPU host
(scripts/gpu-run kbench); exits 77 (skipped) without a GPU, 1 when a kiln command fails or the two
measurements disagree by more than 1.5x, else 0.

usage: bench_cuda.py [--kiln PATH] [--quick] [--gpt2-xl-4] [--only KEYS] [--duration S] [--workdir DIR] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench  # noqa: E402  (beside this file in the bundle's scripts/, in bench/ in the repository)


def kiln_bench(kiln, engine, out_json, duration, *extra):
    """Runs kiln bench; returns its JSON document (raises with kiln's message on failure)."""
    cmd = [kiln, "bench", engine, "--duration", str(duration), "--warmup", "300", "--iterations", "20",
           "--export-json", out_json, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=gpu_bench.kiln_env(kiln))
    print(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}", flush=True)
    if r.returncode != 0:
        raise RuntimeError("kiln bench: " + gpu_bench.short(r.stderr + r.stdout))
    with open(out_json) as f:
        return json.load(f)


def measure(w, a, workdir):
    """One workload: export, build, kiln run, kiln bench (and its A/B runs for batch 1)."""
    res = {"key": w.key, "batch": w.batch}
    export_model, _, inames, onames, dynamo = gpu_bench.build_models(w.group)
    feeds = gpu_bench.make_inputs(w, inames, np.random.default_rng(1))
    onnx_path, engine = os.path.join(workdir, f"{w.key}.onnx"), os.path.join(workdir, f"{w.key}.kiln")
    try:
        gpu_bench.export_onnx(export_model, feeds, inames, onames, dynamo, onnx_path)
        res["build_s"] = gpu_bench.kiln_build(a.kiln, onnx_path, engine)
        res["run_ms"], _ = gpu_bench.kiln_run(a.kiln, engine, feeds, onames, workdir, 50, 10)
        doc = kiln_bench(a.kiln, engine, os.path.join(workdir, f"{w.key}.json"), a.duration, "--no-transfers")
        r = doc["results"]
        res.update(compute_ms=r["compute_ms"]["median"], latency_ms=r["latency_ms"]["median"], p99_ms=r["latency_ms"]["p99"],
                   qps=r["qps"], items_per_s=r["items_per_s"], bound=doc["diagnosis"]["bound"],
                   achieved_tflops=doc["roofline"]["achieved_tflops"], gpu=doc["environment"]["gpu"])
        res["agreement"] = res["compute_ms"] / res["run_ms"]
        if w.batch == 1:
            off = kiln_bench(a.kiln, engine, os.path.join(workdir, f"{w.key}_nograph.json"), 1, "--no-transfers", "--graph", "off")
            res["graph_off_compute_ms"] = off["results"]["compute_ms"]["median"]
        prof = kiln_bench(a.kiln, engine, os.path.join(workdir, f"{w.key}_profile.json"), 1, "--profile")
        timed = [layer for layer in prof["layers"] if layer["time_ms"] is not None]
        res["profiled_layers"] = len(timed)
        res["h2d_ms"] = prof["results"]["h2d_ms"]["median"] if prof["results"]["h2d_ms"] else None
        if not timed:
            raise RuntimeError("kiln bench --profile timed no layer on the GPU")
    finally:
        for f in os.listdir(workdir):  # engines and exports are large: keep the disk free
            if f.startswith(w.key) and not f.endswith(".json"):
                os.remove(os.path.join(workdir, f))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "dist/gpu/bin/kiln"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--gpt2-xl-4", action="store_true",
                    help="also GPT-2 XL's widths with 4 of its 48 layers (prefill 128): its per-layer profile")
    ap.add_argument("--workdir")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no GPU")
    except Exception as e:  # noqa: BLE001 - any reason means: not a GPU host
        print(f"bench_cuda: skipped: no GPU ({e})")
        return 77
    rows = gpu_bench.workloads(a.quick, False)
    if a.gpt2_xl_4:
        rows.append(gpu_bench.Workload("gpt2xl4_prefill", "gpt2-xl-4", "GPT-2 XL widths, 4 layers, prefill 128 b1", 1, 128,
                                       "latency", "tok/s", "-", lambda k, c: None))
    if a.only:
        rows = [w for w in rows if w.key in a.only.split(",")]
    results, failed = [], False
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cuda-") as tmp:
        workdir = a.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        ceil = os.path.join(workdir, "ceilings.json")
        r = subprocess.run([a.kiln, "bench", "--ceilings", "--target", "cuda", "--ceilings-file", ceil],
                           capture_output=True, text=True, env=gpu_bench.kiln_env(a.kiln))
        print(r.stdout + r.stderr, flush=True)
        failed |= r.returncode != 0
        os.environ["XDG_CACHE_HOME"] = workdir  # later runs read ceilings from $XDG_CACHE_HOME/kiln/
        os.makedirs(os.path.join(workdir, "kiln"), exist_ok=True)
        if os.path.exists(ceil):
            os.replace(ceil, os.path.join(workdir, "kiln", "ceilings.json"))
        for w in rows:
            try:
                res = measure(w, a, workdir)
            except Exception as e:  # noqa: BLE001 - report and go on
                res = {"key": w.key, "error": gpu_bench.short(e)}
                failed = True
            if "agreement" in res and not 1 / 1.5 <= res["agreement"] <= 1.5:
                res["error"] = f"kiln bench compute {res['compute_ms']:.4f} ms vs kiln run {res['run_ms']:.4f} ms"
                failed = True
            results.append(res)
            print(f"# {w.key}: {json.dumps(res)}", flush=True)
    print("\nkiln bench on the GPU (fp16, --no-transfers) against kiln run (gpu_bench.py's number)")
    print("| workload | kiln run ms | bench compute ms | ratio | bench latency ms | p99 ms | items/s | graphs off ms | bound | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        def f(k, fmt="{:.4f}"):
            return fmt.format(r[k]) if r.get(k) is not None else "-"
        print(f"| {r['key']} | {f('run_ms')} | {f('compute_ms')} | {f('agreement', '{:.2f}')} | {f('latency_ms')} | "
              f"{f('p99_ms')} | {f('items_per_s', '{:,.0f}')} | {f('graph_off_compute_ms')} | {r.get('bound', '-')} | "
              f"{r.get('error', '')} |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
