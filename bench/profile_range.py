#!/usr/bin/env python3
"""A dynamic-shape engine (one optimization profile over a range) against static engines (each built for
one shape), timed with `kiln bench` at those shapes: what a profile range costs (scripts/gpu-run's
profile stage).

For a BERT-style ONNX model with symbolic [batch, seq] inputs (default tests/data/torch/
bert_torchscript.onnx: input_ids and attention_mask, int64, 2 layers, hidden 32, 64 positions):
  dynamic  kiln build MODEL --profile NAME:MIN,OPT,MAX for every input (default 1x1,1x32,8x64)
  static   kiln build MODEL --profile NAME:SHAPE (the shape fixed) for each --shapes entry
both with --target T (and --fp16 on cuda, a shared --timing-cache), then
  kiln bench ENGINE --shapes NAME:SHAPE,... --duration 1 --warmup 200 --export-json
and a table of shape, dynamic p50, static p50 (median latency, ms) and dynamic / static.
Exit 1 when a build or bench fails (or a shape lies outside the range), else 0.

usage: profile_range.py [--kiln BIN] [--model X.onnx] [--target cuda|cpu] [--precision fp32|fp16|bf16]
                        [--range 1x1,1x32,8x64] [--shapes 1x8,1x32,4x32,8x64] [--duration 1] [--warmup 200]
                        [--tuning-level N] [--workdir DIR] [--json FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def find(explicit, env, candidates):
    for p in [explicit, os.environ.get(env)] + candidates:
        if p and os.path.exists(p):
            return os.path.abspath(p)
    return None


def input_names(model, fallback):
    try:
        import onnx
        m = onnx.load(model, load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        return [i.name for i in m.graph.input if i.name not in inits]
    except Exception:  # no onnx here: the BERT exports' names
        return fallback


def run(cmd, timeout=120):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{(p.stdout + p.stderr).strip()[-1500:]}")
    return time.time() - t0


def dims(s):
    return [int(x) for x in s.split("x")]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.environ.get("KILN_SOURCE_DIR") or os.getcwd()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln")
    ap.add_argument("--model")
    ap.add_argument("--target", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--precision", help="fp32, fp16 or bf16 (default fp16 on cuda, fp32 on cpu)")
    ap.add_argument("--range", default="1x1,1x32,8x64", help="the dynamic profile MIN,OPT,MAX (every input)")
    ap.add_argument("--shapes", default="1x8,1x32,4x32,8x64", help="static engines' shapes, benched on both")
    ap.add_argument("--duration", default="1")
    ap.add_argument("--warmup", default="200")
    ap.add_argument("--tuning-level", default="1", help="cuda builds (the same for every engine)")
    ap.add_argument("--workdir")
    ap.add_argument("--json")
    a = ap.parse_args()

    kiln = find(a.kiln, "KILN_BIN", [os.path.join(here, "../bin/kiln")]
                + [os.path.join(root, p) for p in ("dist/gpu/bin/kiln", "build/kiln")])
    model = find(a.model, "KILN_PROFILE_MODEL",
                 [os.path.join(here, "../data/tests/data/torch/bert_torchscript.onnx")]
                 + [os.path.join(root, p) for p in ("dist/gpu/data/tests/data/torch/bert_torchscript.onnx",
                                                     "tests/data/torch/bert_torchscript.onnx")])
    if not kiln or not model:
        print(f"profile_range: kiln ({kiln}) or the model ({model}) not found", file=sys.stderr)
        return 1
    prec = a.precision or ("fp16" if a.target == "cuda" else "fp32")
    names = input_names(model, ["input_ids", "attention_mask"])
    lo, opt, hi = (dims(s) for s in a.range.split(","))
    shapes = a.shapes.split(",")
    for s in shapes:
        d = dims(s)
        if len(d) != len(lo) or any(x < l or x > h for x, l, h in zip(d, lo, hi)):
            print(f"profile_range: shape {s} lies outside the range {a.range}", file=sys.stderr)
            return 1
    work = a.workdir or tempfile.mkdtemp(prefix="kiln-profile-range.")
    os.makedirs(work, exist_ok=True)
    common = ["--target", a.target]
    if prec != "fp32":
        common.append(f"--{prec}")
    if a.target == "cuda":
        common += ["--tuning-level", a.tuning_level, "--timing-cache", os.path.join(work, "timing.cache")]
    print(f"profile_range: {model} (inputs {', '.join(names)}), kiln {kiln}, --target {a.target} {prec}, "
          f"range {a.range}, shapes {a.shapes}, bench --duration {a.duration} --warmup {a.warmup}", flush=True)

    def build(out, spec):
        prof = sum((["--profile", f"{n}:{spec}"] for n in names), [])
        return run([kiln, "build", model, "-o", out, *prof, *common])

    def bench(engine, shape, tag):
        js = os.path.join(work, f"{tag}.json")
        run([kiln, "bench", engine, "--shapes", ",".join(f"{n}:{shape}" for n in names), "--duration", a.duration,
             "--warmup", a.warmup, "--export-json", js])
        with open(js) as f:
            r = json.load(f)["results"]
        return r["latency_ms"]["median"], (r.get("compute_ms") or {}).get("median"), r["queries"]

    t_start = time.time()
    rows, failed = [], []
    dyn = os.path.join(work, "dynamic.kiln")
    try:
        dyn_build = build(dyn, a.range)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: the dynamic engine: {e}")
        return 1
    for s in shapes:
        row = {"shape": s}
        try:
            st = os.path.join(work, f"static_{s}.kiln")
            row["static_build_s"] = build(st, s)
            row["dyn_p50"], row["dyn_compute"], row["dyn_n"] = bench(dyn, s, f"dyn_{s}")
            row["static_p50"], row["static_compute"], row["static_n"] = bench(st, s, f"static_{s}")
            row["ratio"] = row["dyn_p50"] / row["static_p50"]
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failed.append(f"{s}: {e}")
        rows.append(row)
        print(f"  {s}: {row}", flush=True)

    print(f"\nDynamic profile vs static engines ({os.path.basename(model)}, --target {a.target} {prec}; dynamic "
          f"engine built in {dyn_build:.1f} s over {a.range}; p50 = median latency of `kiln bench`, ms)")
    print("| shape | dynamic p50 ms | static p50 ms | dynamic / static | queries (dyn, static) |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "ratio" in r:
            print(f"| {r['shape']} | {r['dyn_p50']:.4f} | {r['static_p50']:.4f} | {r['ratio']:.2f} |"
                  f" {r['dyn_n']}, {r['static_n']} |")
        else:
            print(f"| {r['shape']} | - | - | FAIL | - |")
    print(f"({time.time() - t_start:.1f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": model, "target": a.target, "precision": prec, "range": a.range,
                       "dynamic_build_s": dyn_build, "rows": rows}, f, indent=1)
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print("\nFAIL:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
