"""INT8 on the GPU end to end: the ResNet-style CNN and the BERT-style encoder of tests/e2e/models.py,
calibrated once (`kiln build --target cpu --int8 --calib DIR --calib-cache FILE`: 4 batches of 4, the
seeds of tests/e2e/test_int8_build.py), then built from that cache for the target with `--int8` and
with `--int8 --fp16`, run on held-out inputs and compared with the CPU INT8 engine (the integer
kernels' oracle: same thresholds, same integer layers) and with the float32 model in onnxruntime.

Asserted per model and build (exit 1 when one fails):
  - `kiln inspect` of the target engine lists the integer layers the CPU engine has (ResNet: 6 QConv,
    1 QMatMul; BERT: 13 QMatMul), so nothing fell back to float;
  - against the CPU INT8 engine: cosine similarity >= 0.9999 and max error <= 2% of max|cpu int8|
    (--int8; an activation one quantization unit off where float32 sums round differently), >= 0.999
    and <= 5% (--int8 --fp16: the float layers in float16);
  - against fp32 (onnxruntime): the bounds of tests/e2e/test_int8_build.py (ResNet cosine >= 0.9995,
    max error <= 5%, top-1 >= 7 of 8; BERT cosine >= 0.998, max error <= 20%), looser by the 16-bit
    rounding for --int8 --fp16 (ResNet cosine >= 0.999, BERT >= 0.995);
  - the --int8 --fp16 build (tuned, `kiln build`'s default level) times each of the ResNet's QConv and
    QMatMul layers' int8 kernel against its float16 one and logs the choice ("layer 'X': int8 A ms vs fp16 B ms -> P");
    both sides are always timed, so a "not timed" side fails; a QConv with a float32 or bfloat16
    residual input, which only the int8 kernel runs, logs that it has no float16 path instead; the table shows every such
    choice (BERT's dynamic sequence length leaves its layers untuned).

usage: int8_cuda.py [--kiln PATH] [--target cuda] [--workdir DIR] [--json FILE]
(--target cpu checks this script itself on a machine without a GPU; the --fp16 builds are skipped
there.) Needs numpy, onnx and onnxruntime. Exit status 0 (all pass), 1 (a check failed), 77 (no GPU:
the target build says so).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import models  # noqa: E402  (tests/e2e/models.py)

LAYERS = {"resnet": {"QConv": 6, "QMatMul": 1}, "bert": {"QMatMul": 13}}
HELD_OUT = {"resnet": dict(batch=8, seq=None), "bert": dict(batch=4, seq=16)}
VS_CPU = {"int8": {"cosine": 0.9999, "max_rel": 0.02}, "int8+fp16": {"cosine": 0.999, "max_rel": 0.05}}
VS_FP32 = {("resnet", "int8"): {"cosine": 0.9995, "max_rel": 0.05}, ("bert", "int8"): {"cosine": 0.998, "max_rel": 0.20},
           ("resnet", "int8+fp16"): {"cosine": 0.999, "max_rel": 0.05},
           ("bert", "int8+fp16"): {"cosine": 0.995, "max_rel": 0.20}}
NO_F16_LINE = re.compile(r"'(.+)': no float16 path to time against int8")
PATH_LINE = re.compile(r"layer '(.+)': int8 ([0-9.]+ ms|not timed) vs fp16 ([0-9.]+ ms|not timed) -> (int8|fp16)")
NO_GPU = ("no CUDA device", "no GPU", "cudaErrorNoDevice", "CUDA driver")


def kiln_run(kiln, *args):
    return subprocess.run([kiln, *map(str, args)], capture_output=True, text=True, errors="replace")


def first_error_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    err = [l for l in lines if "error" in l.lower()]
    return (err or lines or ["(no output)"])[0][:240]


def run_engine(kiln, engine, feeds, workdir):
    """The engine's outputs on feeds: {name: array}."""
    os.makedirs(workdir, exist_ok=True)
    args = ["run", engine, "--quiet", "--output-dir", os.path.join(workdir, "out")]
    for name, arr in feeds.items():
        path = os.path.join(workdir, f"{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    r = kiln_run(kiln, *args)
    if r.returncode != 0:
        raise RuntimeError("run: " + first_error_line(r.stderr + r.stdout))
    out = os.path.join(workdir, "out")
    return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}


def layer_counts(kiln, engine):
    r = kiln_run(kiln, "inspect", engine)
    if r.returncode != 0:
        raise RuntimeError("inspect: " + first_error_line(r.stderr + r.stdout))
    counts = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) > 1 and f[1] in ("QConv", "QMatMul"):
            counts[f[1]] = counts.get(f[1], 0) + 1
    return counts


def similarity(got, ref):
    g, r = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    cosine = float(g @ r / (np.linalg.norm(g) * np.linalg.norm(r) + 1e-300))
    max_rel = float(np.abs(g - r).max() / max(np.abs(r).max(), 1e-30))
    return cosine, max_rel


def check(kind, build, got, ref, bounds, against, failures, row):
    """Compares every output of got with ref; records the worst and any bound broken."""
    for name, r in ref.items():
        cos, rel = similarity(got[name.replace("/", "_")], r)
        row[f"cosine_vs_{against}"] = min(row.get(f"cosine_vs_{against}", 1.0), cos)
        row[f"max_rel_vs_{against}"] = max(row.get(f"max_rel_vs_{against}", 0.0), rel)
        if cos < bounds["cosine"] or rel > bounds["max_rel"]:
            failures.append(f"{kind} {build} vs {against}, {name}: cosine {cos:.6f} (>= {bounds['cosine']}), "
                            f"max error {rel:.3g} (<= {bounds['max_rel']})")


def check_model(kiln, target, kind, workdir, failures):
    """Calibrates kind on the CPU, builds and runs its engines; returns the table rows."""
    import onnx
    import onnxruntime as ort
    d = os.path.join(workdir, kind)
    os.makedirs(os.path.join(d, "calib"), exist_ok=True)
    model = os.path.join(d, f"{kind}.onnx")
    onnx.save(models.BUILDERS[kind](), model)
    for k in range(4):
        for name, arr in models.make_inputs(kind, 4, 16 if kind == "bert" else None, seed=300 + k).items():
            np.save(os.path.join(d, "calib", f"batch{k}.npy" if kind == "resnet" else f"{name}.{k}.npy"), arr)
    cache = os.path.join(d, "calib.cache")
    engines = {"cpu int8": ["--target", "cpu", "--int8", "--calib", os.path.join(d, "calib"), "--calib-cache", cache],
               "int8": ["--target", target, "--int8", "--calib-cache", cache]}
    if target != "cpu":
        engines["int8+fp16"] = ["--target", target, "--int8", "--fp16", "--calib-cache", cache, "--verbose"]
    feeds = models.make_inputs(kind, HELD_OUT[kind]["batch"], HELD_OUT[kind]["seq"], seed=999)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    fp32 = dict(zip(names, sess.run(names, feeds)))
    outs, rows = {}, []
    for build, args in engines.items():  # the CPU build first: it writes the cache the others read
        engine = os.path.join(d, build.replace(" ", "_").replace("+", "_") + ".kiln")
        r = kiln_run(kiln, "build", model, "-o", engine, *args)
        if r.returncode != 0:
            text = r.stderr + r.stdout
            if build != "cpu int8" and any(s in text for s in NO_GPU):
                raise SystemExit(77)
            failures.append(f"{kind} {build}: build: {first_error_line(text)}")
            continue
        try:
            counts = layer_counts(kiln, engine)
            outs[build] = run_engine(kiln, engine, feeds, os.path.join(d, build.replace(" ", "_")))
        except RuntimeError as e:
            failures.append(f"{kind} {build}: {e}")
            continue
        row = {"model": kind, "build": build, "layers": counts}
        if build == "int8+fp16":
            paths = PATH_LINE.findall(r.stderr)
            row["paths"] = " ".join(f"{p[3]} ({p[1]} / {p[2]})" for p in paths) or "untuned"
            untimed = [p[0] for p in paths if "not timed" in (p[1], p[2])]
            if untimed:
                failures.append(f"{kind} {build}: int8-vs-fp16 choice with a side not timed: {', '.join(untimed)}")
            expected = sum(LAYERS[kind].values())  # every QConv and QMatMul
            int8_only = NO_F16_LINE.findall(r.stderr)
            if kind == "resnet" and len(paths) + len(int8_only) != expected:
                failures.append(f"{kind} {build}: {len(paths)} int8-vs-fp16 choices and {len(int8_only)} int8-only "
                                f"layers logged, expected {expected} in all")
        if counts != LAYERS[kind]:
            failures.append(f"{kind} {build}: integer layers {counts}, expected {LAYERS[kind]}")
        if build != "cpu int8" and "cpu int8" in outs:
            check(kind, build, outs[build], outs["cpu int8"], VS_CPU[build], "cpu_int8", failures, row)
        check(kind, build, outs[build], fp32, VS_FP32[(kind, "int8" if build == "cpu int8" else build)], "fp32",
              failures, row)
        if kind == "resnet":
            row["top1"] = int((outs[build]["output"].argmax(1) == fp32["output"].argmax(1)).sum())
            if row["top1"] < 7:
                failures.append(f"{kind} {build}: top-1 agrees with fp32 on {row['top1']} of 8 images")
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "dist/gpu/bin/kiln"))
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    failures, rows = [], []
    with tempfile.TemporaryDirectory(prefix="kiln-int8-") as tmp:
        workdir = a.workdir or tmp
        for kind in ("resnet", "bert"):
            rows += check_model(a.kiln, a.target, kind, workdir, failures)
    print("| model | build | integer layers | cosine vs cpu int8 | max err vs cpu int8 | cosine vs fp32 | "
          "max err vs fp32 | top-1 | int8/fp16 choice (int8 / fp16) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = lambda k, fmt: format(r[k], fmt) if k in r else "—"
        layers = ", ".join(f"{v} {k}" for k, v in sorted(r["layers"].items()))
        print(f"| {r['model']} | {r['build']} | {layers} | {f('cosine_vs_cpu_int8', '.6f')} | "
              f"{f('max_rel_vs_cpu_int8', '.3g')} | {f('cosine_vs_fp32', '.6f')} | {f('max_rel_vs_fp32', '.3g')} | "
              f"{f('top1', 'd')} | {r.get('paths', '—')} |")
    for msg in failures:
        print("FAIL", msg)
    print(f"\n{len(rows)} engine(s) checked, {len(failures)} failure(s)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"target": a.target, "rows": rows, "failures": failures}, fh, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
