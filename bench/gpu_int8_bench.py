"""INT8 / FP8 against FP16 on the GPU: BERT-base (seq 128, batch 32 and 64) and ResNet-50 (224x224,
batch 256 and batch 1), exported from PyTorch with random weights and a dynamic batch, each measured with
`kiln bench MODEL.onnx --target cuda --shapes ... --sweep precision=fp32,fp16,int8,fp8 --calib DIR`
(one engine per precision; int8 is `--int8` over fp16, fp8 `--fp8` over fp16) and printed in one
table with the accuracy of each row against the fp32 row on the same inputs (max error / max|fp32|,
the least cosine similarity, ResNet's top-1 agreement) and the speed-up over fp16. The sweep's
engines are untuned (the library API's default); three more rows, "fp16 tuned", "int8 tuned" and
"fp8 tuned", are engines from `kiln build --fp16` / `--int8 --fp16` / `--fp8 --fp16` (tuning level 2,
a profile at the benchmark's shape, so each QMatMul's and QConv's int8 kernel is timed against its
float16 one and the faster kept; a tuned row is built only when --precisions names its precision)
measured with `kiln bench ENGINE.kiln`. FP8 (kiln.F8MatMul: E4M3
MatMul / Gemm layers on cuBLASLt's FP8 GEMM) covers BERT's weight GEMMs and ResNet's head only.

Targets (issue #15): BERT INT8 and FP8 >= 1.6x FP16 items/s; ResNet-50 INT8 b256 >= 60,000 img/s
(FP16 is about 35,000) and b1 <= 0.25 ms. Calibration: 4 batches of 8 random inputs (BERT: token ids; ResNet: normal
images), the same for every row; random weights and inputs make the accuracy columns a check of the
arithmetic, not of a trained model's task accuracy.

--profile also runs each tuned engine once more with `kiln bench ENGINE --profile` and prints its
"Profile by op" table (layer times summed per op type: where the time of the fp16, int8 and fp8
engines goes), the whole per-layer profile kept in WORKDIR/KEY_LABEL.profile.txt.

usage: gpu_int8_bench.py [--kiln PATH] [--only bert_b32,bert_b64,resnet50_b256,resnet50_b1] [--duration S]
                         [--precisions fp32,fp16,int8,fp8] [--workdir DIR] [--json FILE] [--profile]
Needs torch, torchvision, transformers, onnx (export) and a kiln built with the cuda backend.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

WORKLOADS = {  # key: (model, batch, seq)
    "bert_b32": ("bert", 32, 128),
    "bert_b64": ("bert", 64, 128),
    "resnet50_b256": ("resnet50", 256, None),
    "resnet50_b1": ("resnet50", 1, None),
}
CALIB_BATCHES, CALIB_BATCH = 4, 8


def export(model, path):
    """Exports BERT-base (input_ids [batch, 128] -> last_hidden_state) or ResNet-50 (image -> logits)
    with random weights (seed 0) and a dynamic batch dimension; returns the input name."""
    import torch
    torch.manual_seed(0)
    if model == "resnet50":
        import torchvision
        m, name, example = torchvision.models.resnet50().eval(), "image", torch.randn(2, 3, 224, 224)
        out = "logits"
    else:
        from transformers import BertConfig, BertModel

        class Bert(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = BertModel(BertConfig(attn_implementation="eager"))

            def forward(self, input_ids):
                return self.m(input_ids=input_ids).last_hidden_state
        m, name, example, out = Bert().eval(), "input_ids", torch.randint(0, 30000, (2, 128)), "hidden"
    with torch.no_grad():
        torch.onnx.export(m, (example,), path, input_names=[name], output_names=[out], opset_version=17,
                          dynamic_axes={name: {0: "batch"}, out: {0: "batch"}}, dynamo=False)
    return name


def write_calibration(model, name, directory):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(4242)
    for k in range(CALIB_BATCHES):
        if model == "resnet50":
            arr = rng.standard_normal((CALIB_BATCH, 3, 224, 224)).astype(np.float32)
        else:
            arr = rng.integers(0, 30000, (CALIB_BATCH, 128)).astype(np.int64)
        np.save(os.path.join(directory, f"{name}.{k}.npy"), arr)


def sweep(kiln, onnx_path, name, batch, seq, calib, precisions, duration, json_path):
    shape = f"{batch}x128" if seq else f"{batch}x3x224x224"
    cmd = [kiln, "bench", onnx_path, "--target", "cuda", "--shapes", f"{name}:{shape}", "--sweep",
           "precision=" + ",".join(precisions), "--calib", calib, "--duration", str(duration), "--export-json", json_path]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise RuntimeError(f"kiln bench exited with {r.returncode}")
    with open(json_path) as f:
        return json.load(f)["sweep"]["rows"]


def print_profile(kiln, engine, name, shape, label, work, key):
    """Runs `kiln bench ENGINE --profile`, keeps its output beside the engine and prints the "Profile
    by op" section under label."""
    r = subprocess.run([kiln, "bench", engine, "--shapes", f"{name}:{shape}", "--duration", "1", "--profile"],
                       capture_output=True, text=True, errors="replace")
    with open(os.path.join(work, f"{key}_{label.replace(' ', '_')}.profile.txt"), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        print(f"{label}: kiln bench --profile exited with {r.returncode}: {r.stderr[-300:]}", flush=True)
        return
    lines = r.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("=== Profile by op")), None)
    if start is None:
        print(f"{label}: no 'Profile by op' section in kiln bench's output", flush=True)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("===")), len(lines))
    print(f"--- {key} {label}: " + "\n".join(lines[start:end]), flush=True)


def tuned_rows(kiln, onnx_path, name, batch, seq, calib, duration, work, key, precisions, profile=False):
    """The "fp16 tuned", "int8 tuned" and "fp8 tuned" rows of the precisions asked for: engines from
    kiln build with a profile at the shape (the build's int8-vs-fp16 choices, each QMatMul's
    fused-or-exact requantization and the fp8 line are echoed); with profile, each engine's layer
    times summed per op (print_profile)."""
    shape = f"{batch}x128" if seq else f"{batch}x3x224x224"
    rows = []
    for label, extra in (("fp16 tuned", ["--fp16"]), ("int8 tuned", ["--int8", "--fp16", "--calib", calib]),
                         ("fp8 tuned", ["--fp8", "--fp16", "--calib", calib])):
        if label.split()[0] not in precisions:
            continue
        engine = os.path.join(work, f"{key}_{label.replace(' ', '_')}.kiln")
        cmd = [kiln, "build", onnx_path, "-o", engine, "--target", "cuda", *extra, "--profile",
               f"{name}:{shape},{shape},{shape}", "--verbose"]
        print("$", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        echo = ("vs fp16", "fp8:", "requantization fused", "int32 GEMM and kiln's epilogue")
        sys.stdout.write("".join(l + "\n" for l in r.stderr.splitlines() if any(e in l for e in echo)))
        row = {"precision": label, "status": "ok" if r.returncode == 0 else "failed", "error": r.stderr[-300:]}
        if r.returncode == 0:
            out = os.path.join(work, f"{key}_{label.replace(' ', '_')}.json")
            b = subprocess.run([kiln, "bench", engine, "--shapes", f"{name}:{shape}", "--duration", str(duration),
                                "--export-json", out], capture_output=True, text=True, errors="replace")
            if b.returncode != 0:
                row.update(status="failed", error=b.stderr[-300:])
            else:
                res = json.load(open(out))["results"]
                lat = res.get("latency_ms") or {}
                row.update(items_per_s=res.get("items_per_s"), p50_ms=lat.get("median"), p99_ms=lat.get("p99"))
                if profile:
                    print_profile(kiln, engine, name, shape, label, work, key)
        rows.append(row)
    return rows


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "dist/gpu/bin/kiln"))
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--precisions", default="fp32,fp16,int8,fp8")
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--workdir", help="scratch directory for exports, calibration data and JSON")
    ap.add_argument("--json", help="also write every row here")
    ap.add_argument("--profile", action="store_true", help="print each tuned engine's layer times summed per op")
    a = ap.parse_args()
    keys = [k for k in a.only.split(",") if k]
    unknown = [k for k in keys if k not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)} (have: {', '.join(WORKLOADS)})")
    precisions = [p for p in a.precisions.split(",") if p]
    table, exported = [], {}
    with tempfile.TemporaryDirectory(prefix="kiln-int8-bench-") as tmp:
        work = a.workdir or tmp
        os.makedirs(work, exist_ok=True)
        for key in keys:
            model, batch, seq = WORKLOADS[key]
            if model not in exported:
                path = os.path.join(work, f"{model}.onnx")
                name = export(model, path)
                write_calibration(model, name, os.path.join(work, f"{model}_calib"))
                exported[model] = (path, name)
            path, name = exported[model]
            rows = sweep(a.kiln, path, name, batch, seq, os.path.join(work, f"{model}_calib"), precisions, a.duration,
                         os.path.join(work, f"{key}.json"))
            rows += tuned_rows(a.kiln, path, name, batch, seq, os.path.join(work, f"{model}_calib"), a.duration, work,
                               key, precisions, a.profile)
            for r in rows:
                base = "fp16 tuned" if r["precision"].endswith("tuned") else "fp16"
                fp16 = next((q.get("items_per_s") for q in rows if q["precision"] == base and q["status"] == "ok"), None)
                r["workload"] = key
                r["vs_fp16"] = r["items_per_s"] / fp16 if fp16 and r.get("items_per_s") else None
                table.append(r)
    print("\n| workload | precision | status | items/s | p50 ms | p99 ms | vs fp16 | max err / max fp32 | cosine | top-1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        top1 = f"{r['top1_agree']}/{r['top1_rows']}" if r.get("top1_rows") else "—"
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')}"[:80]
        print(f"| {r['workload']} | {r['precision']} | {status} | {fmt(r.get('items_per_s'), '.0f')} | "
              f"{fmt(r.get('p50_ms'), '.3f')} | {fmt(r.get('p99_ms'), '.3f')} | {fmt(r.get('vs_fp16'), '.2f')} | "
              f"{fmt(r.get('max_rel_err'), '.3g')} | {fmt(r.get('cosine'), '.5f')} | {top1} |")
    print("\ntargets: BERT int8 and fp8 >= 1.60x fp16; ResNet-50 int8 b256 >= 60000 img/s, b1 p50 <= 0.25 ms "
          "(a tuned row is compared with fp16 tuned)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
