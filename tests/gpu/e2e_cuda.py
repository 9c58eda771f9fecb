"""End to end on the GPU: every PyTorch-exported test model (tests/data/torch/manifest.json) is built
with `kiln build --target cuda` in each precision, run with `kiln run` on fixed random inputs, and
compared with onnxruntime on the CPU. Runs on the GPU host (scripts/gpu-run calls it); needs numpy and
onnxruntime only.

usage: e2e_cuda.py [--kiln PATH] [--data DIR] [--precisions fp32,fp16,bf16] [--only NAME,...]
                   [--target cuda] [--json FILE] [--workdir DIR] [--dry-run]
(--target cpu --precisions fp32 checks this script itself on a machine without a GPU.)
Exit status: 0 when every model agrees in every precision, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Largest |kiln - onnxruntime| over the outputs, divided by the largest |onnxruntime| (per model and
# precision). float32: cuDNN/cuBLAS choose other algorithms and summation orders than the CPU (TF32
# must be off; it alone would give ~1e-3); float16 and bfloat16 round every activation to an 11-bit /
# 8-bit mantissa (unit roundoff 4.9e-4 / 3.9e-3) through 10-50 layers of these small test models.
# fp16 and bf16 are the bounds tests/unit/test_cuda_backend.c puts on the same models against kiln's CPU.
TOLERANCE = {"fp32": 5e-4, "fp16": 2e-2, "bf16": 5e-2}
SHAPES = [(2, 16), (1, 7)]  # (batch, sequence length), as in tests/e2e/test_torch_exports.py


def make_inputs(key, batch, seq, rng):
    """The inputs of the e2e test for one model (images 64x64; BERT pads the last sequence)."""
    if key.startswith("mobilenet"):
        return {"image": rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)}
    ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
    if key.startswith("bert"):
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2:] = 0
        return {"input_ids": ids, "attention_mask": mask}
    return {"input_ids": ids}


def first_error_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    err = [l for l in lines if "error" in l.lower()]
    return (err or lines or ["(no output)"])[0][:200]


def check_model(kiln, target, model, key, precision, workdir):
    """Builds and runs one model in one precision on every shape; returns a result dict."""
    res = {"model": key, "precision": precision, "status": "ok", "error": 0.0, "detail": "", "build_s": None}
    engine = os.path.join(workdir, f"{key}_{precision}.kiln")
    cmd = [kiln, "build", model, "-o", engine, "--target", target]
    if precision != "fp32":
        cmd.append("--" + precision)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    res["build_s"] = round(time.time() - t0, 2)
    if r.returncode != 0:
        res.update(status="FAIL", detail="build: " + first_error_line(r.stderr + r.stdout))
        return res
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for batch, seq in SHAPES:
        inputs = make_inputs(key, batch, seq, np.random.default_rng(batch * 100 + seq))
        out_dir = os.path.join(workdir, f"out_{key}_{precision}_{batch}x{seq}")
        args = [kiln, "run", engine, "--quiet", "--output-dir", out_dir]
        for name, arr in inputs.items():
            path = os.path.join(workdir, f"{key}_{name}_{batch}x{seq}.npy")
            np.save(path, arr)
            args += ["--input", f"{name}={path}"]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            res.update(status="FAIL", detail=f"run {batch}x{seq}: " + first_error_line(r.stderr + r.stdout))
            return res
        for out, ref in zip(sess.get_outputs(), sess.run(None, inputs)):
            got = np.load(os.path.join(out_dir, out.name.replace("/", "_") + ".npy"))
            if got.shape != ref.shape or got.dtype != ref.dtype:
                res.update(status="FAIL", detail=f"{out.name} {batch}x{seq}: got {got.dtype}{list(got.shape)}, "
                                                 f"want {ref.dtype}{list(ref.shape)}")
                return res
            if not np.all(np.isfinite(got)):
                res.update(status="FAIL", detail=f"{out.name} {batch}x{seq}: non-finite values")
                return res
            scale = max(float(np.max(np.abs(ref))), 1e-30) if ref.size else 1.0
            err = float(np.max(np.abs(got.astype(np.float64) - ref))) / scale if ref.size else 0.0
            res["error"] = max(res["error"], err)
    if res["error"] > TOLERANCE[precision]:
        res.update(status="FAIL", detail=f"error {res['error']:.3g} above {TOLERANCE[precision]:.0e}")
    return res


def print_table(results, out=sys.stdout):
    print("| model | precision | status | max err / max ref | tolerance | build s | detail |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for r in results:
        err = f"{r['error']:.2e}" if r["status"] == "ok" or r["error"] else "—"
        build = f"{r['build_s']:.1f}" if r["build_s"] is not None else "—"
        print(f"| {r['model']} | {r['precision']} | {r['status']} | {err} | {TOLERANCE[r['precision']]:.0e} | "
              f"{build} | {r['detail']} |", file=out)
    bad = sum(r["status"] != "ok" for r in results)
    print(f"\n{len(results)} model/precision pair(s), {bad} failed", file=out)


def fake_results(keys, precisions):
    """--dry-run: made-up results (no kiln, no onnxruntime) to check the table and the JSON."""
    rng = np.random.default_rng(0)
    out = []
    for k in keys:
        for p in precisions:
            err = float(rng.uniform(0.05, 0.5)) * TOLERANCE[p]
            r = {"model": k, "precision": p, "status": "ok", "error": err, "detail": "", "build_s": 1.5}
            if k == keys[-1] and p == precisions[-1]:
                r.update(status="FAIL", error=0.0, detail="build: kiln: error: (dry run) node Foo: unsupported")
            out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "dist/gpu/bin/kiln"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "torch"))
    ap.add_argument("--precisions", default="fp32,fp16,bf16")
    ap.add_argument("--only", default="", help="comma-separated manifest keys")
    ap.add_argument("--target", default="cuda", help="kiln build --target (default cuda)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="fake results, to check this script")
    a = ap.parse_args()
    precisions = [p for p in a.precisions.split(",") if p]
    for p in precisions:
        if p not in TOLERANCE:
            ap.error(f"unknown precision {p!r} (fp32, fp16, bf16)")
    manifest = json.load(open(os.path.join(a.data, "manifest.json")))["models"]
    keys = sorted(k for k, v in manifest.items() if "file" in v)
    if a.only:
        wanted = a.only.split(",")
        unknown = sorted(set(wanted) - set(keys))
        if unknown:
            ap.error(f"not in the manifest: {', '.join(unknown)} (have: {', '.join(keys)})")
        keys = [k for k in keys if k in wanted]
    if a.dry_run:
        results = fake_results(keys, precisions)
    else:
        results = []
        with tempfile.TemporaryDirectory(prefix="kiln-e2e-") as tmp:
            workdir = a.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            for k in keys:
                for p in precisions:
                    r = check_model(a.kiln, a.target, os.path.join(a.data, manifest[k]["file"]), k, p, workdir)
                    print(f"{r['status']:5} {k} {p} error {r['error']:.3g} {r['detail']}", flush=True)
                    results.append(r)
    print()
    print_table(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"target": a.target, "tolerance": TOLERANCE, "shapes": SHAPES, "results": results}, f, indent=1)
    return 1 if any(r["status"] != "ok" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
