"""FP8 on the GPU against the CPU reference: the BERT-style encoder and the ResNet-style CNN
(tests/e2e/models.py) calibrated once (`kiln build --target cpu --fp8 --calib DIR --calib-cache FILE`),
then built from that cache for the target with `--fp8` and `--fp8 --fp16`, run on held-out inputs and
compared with the CPU FP8 engine:
  - the build logs "fp8: N layers in E4M3" and `kiln inspect` lists N F8MatMul layers (BERT 13, the
    CNN's Gemm head 1) — on a GPU below compute capability 8.9 the build must log instead that it has
    no FP8 tensor cores, and the engines then hold no F8MatMul (checked the same way);
  - the --fp8 --fp16 build (tuned, `kiln build`'s default level) times the CNN's F8MatMul's FP8 GEMM
    against its float16 one and logs the choice ("layer 'X': fp8 A ms vs fp16 B ms -> P", both timed;
    BERT's dynamic sequence length leaves its layers untuned), and no BERT build on a GPU with FP8
    tensor cores logs that cuBLASLt's FP8 GEMM is unavailable (its CUDA-core fallback ran; the CNN's
    10-wide head, which cuBLASLt refuses with a float16 D, is only noted);
  - against the CPU FP8 engine: cosine similarity >= 0.9999 (--fp8: the same E4M3 operands, only the
    float32 summation order differs) and >= 0.995 (--fp8 --fp16: A rounded to E4M3 from float16, the
    other layers in float16).

usage: fp8_cuda.py [--kiln PATH] [--target cuda] [--workdir DIR]
(--target cpu checks this script itself on a machine without a GPU.) Needs numpy and onnx. Exit
status 0 (all pass), 1 (a check failed), 77 (no GPU: the target build says so).
"""
import argparse
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from int8_cuda import NO_GPU, first_error_line, kiln_run, models, run_engine, similarity  # noqa: E402

LAYERS = {"resnet": 1, "bert": 13}
HELD_OUT = {"resnet": dict(batch=8, seq=None), "bert": dict(batch=4, seq=16)}
VS_CPU = {"fp8": 0.9999, "fp8+fp16": 0.995}
PATH_LINE = re.compile(r"layer '(.+)': fp8 ([0-9.]+ ms|not timed) vs fp16 ([0-9.]+ ms|not timed) -> (fp8|fp16)")


def f8_layers(kiln, engine):
    r = kiln_run(kiln, "inspect", engine)
    if r.returncode != 0:
        raise RuntimeError("inspect: " + first_error_line(r.stderr + r.stdout))
    return sum(1 for line in r.stdout.splitlines() if line.split()[1:2] == ["F8MatMul"])


def check_model(kiln, target, kind, workdir, failures):
    import onnx
    d = os.path.join(workdir, kind)
    os.makedirs(os.path.join(d, "calib"), exist_ok=True)
    model = os.path.join(d, f"{kind}.onnx")
    onnx.save(models.BUILDERS[kind](), model)
    for k in range(4):
        for name, arr in models.make_inputs(kind, 4, 16 if kind == "bert" else None, seed=300 + k).items():
            np.save(os.path.join(d, "calib", f"batch{k}.npy" if kind == "resnet" else f"{name}.{k}.npy"), arr)
    cache = os.path.join(d, "calib.cache")
    builds = {"cpu fp8": ["--target", "cpu", "--fp8", "--calib", os.path.join(d, "calib"), "--calib-cache", cache],
              "fp8": ["--target", target, "--fp8", "--calib-cache", cache, "--verbose"],
              "fp8+fp16": ["--target", target, "--fp8", "--fp16", "--calib-cache", cache, "--verbose"]}
    if target == "cpu":
        del builds["fp8+fp16"]
    feeds = models.make_inputs(kind, HELD_OUT[kind]["batch"], HELD_OUT[kind]["seq"], seed=999)
    outs = {}
    for build, args in builds.items():
        engine = os.path.join(d, build.replace(" ", "_").replace("+", "_") + ".kiln")
        r = kiln_run(kiln, "build", model, "-o", engine, *args)
        text = r.stderr + r.stdout
        if r.returncode != 0:
            if build != "cpu fp8" and any(s in text for s in NO_GPU):
                raise SystemExit(77)
            failures.append(f"{kind} {build}: build: {first_error_line(text)}")
            continue
        fallback = "has no FP8 tensor cores" in text
        want = 0 if fallback else LAYERS[kind]
        try:
            got = f8_layers(kiln, engine)
            outs[build] = run_engine(kiln, engine, feeds, os.path.join(d, build.replace(" ", "_")))
        except RuntimeError as e:
            failures.append(f"{kind} {build}: {e}")
            continue
        if got != want or (want and build != "cpu fp8" and f"fp8: {want} layers in E4M3" not in text):
            failures.append(f"{kind} {build}: {got} F8MatMul layers, expected {want}")
        refused = [line for line in text.splitlines() if "FP8 GEMM is unavailable" in line]
        if refused and not fallback and kind == "bert":
            failures.append(f"{kind} {build}: {refused[0]}")
        elif refused and not fallback:  # the CNN's 10-wide head: cuBLASLt refuses it with a 16-bit D (docs/quantization.md)
            print(f"note: {kind} {build}: {refused[0]}")
        row = f"{kind:6} {build:9} {got:2} F8MatMul" + (" (no FP8 tensor cores: float layers)" if fallback else "")
        if build == "fp8+fp16" and kind == "resnet" and not fallback:
            paths = PATH_LINE.findall(text)
            row += "  choice: " + (" ".join(f"{p[3]} ({p[1]} / {p[2]})" for p in paths) or "none logged")
            if len(paths) != LAYERS[kind] or any("not timed" in (p[1], p[2]) for p in paths):
                failures.append(f"{kind} {build}: fp8-vs-fp16 choices {paths}, expected {LAYERS[kind]} with both timed")
        if build != "cpu fp8" and "cpu fp8" in outs:
            worst = min(similarity(outs[build][n], outs["cpu fp8"][n])[0] for n in outs["cpu fp8"])
            row += f"  cosine vs cpu fp8 {worst:.6f}"
            if not fallback and worst < VS_CPU[build]:
                failures.append(f"{kind} {build}: cosine {worst:.6f} to the CPU FP8 engine (>= {VS_CPU[build]})")
        print(row, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "dist/gpu/bin/kiln"))
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="kiln-fp8-") as tmp:
        for kind in ("resnet", "bert"):
            check_model(a.kiln, a.target, kind, a.workdir or tmp, failures)
    for msg in failures:
        print("FAIL", msg)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
