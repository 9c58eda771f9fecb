"""Single-thread CPU time per inference, kiln against onnxruntime: what a shared, busy machine
distorts least (bench/RESULTS.md's CPU tables). kiln: the user + system time of `kiln run ENGINE
--iterations 45` minus that of `--iterations 5`, divided by 40 (engine load and process start
cancel out), with KILN_NUM_THREADS=1; onnxruntime: time.process_time() around 40
InferenceSession.run calls after 3 warm-up runs, one intra-op thread. Each round runs every kiln
binary given (e.g. a "before" build and a "now" build) and onnxruntime back to back; the medians
over the rounds are printed as a Markdown table. Models are bench_cpu.py's (the ResNet-style
model at batch 1 and 8, the BERT- and GPT-2-style models, the torchvision classifiers).

usage: bench_cpu_time.py --kiln PATH[,PATH...] [--only resnet18,squeezenet1_1,resnet_b1,bert_s128,gpt2_s64,...] [--rounds N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402
from bench_cpu import models  # noqa: E402


def cases():
    """(name, description, model builder, feeds) for every model bench_cpu.py measures."""
    out = []
    kw = dict(bench_cpu.CONFIGS[0][2])
    for batch in (1, 8):
        feeds = models.make_inputs("resnet", batch, None, vocab=100, image=kw["image"])
        out.append((f"resnet_b{batch}", f"ResNet-style 32/64/128, 64x64, batch {batch}",
                    lambda: models.BUILDERS["resnet"](**kw), feeds))
    for kind, desc, kwargs, shapes in bench_cpu.CONFIGS[1:]:  # the transformers
        for batch, seq in shapes:
            feeds = models.make_inputs(kind, batch, seq, vocab=kwargs["vocab"])
            out.append((f"{kind}_s{seq}", f"{desc}, batch {batch}, sequence {seq}",
                        lambda kind=kind, kwargs=kwargs: models.BUILDERS[kind](**kwargs), feeds))
    for name, desc, batch in bench_cpu.TORCHVISION:
        feeds = {"image": np.random.default_rng(1).standard_normal((batch, 3, 224, 224), np.float32)}
        out.append((name, f"{desc}, batch {batch}", lambda name=name: bench_cpu.torchvision_model(name), feeds))
    return out


def kiln_cpu_seconds(kiln, engine, inputs, iterations):
    """User + system CPU seconds of one `kiln run` process."""
    env = dict(os.environ, KILN_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    args = [kiln, "run", engine, "--iterations", str(iterations), "--warmup", "0", "--quiet"]
    for name, path in inputs.items():
        args += ["--input", f"{name}={path}"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.read().decode()}")
    return usage.ru_utime + usage.ru_stime


def ort_cpu_ms(session, feeds, runs=40):
    for _ in range(3):
        session.run(None, feeds)
    t0 = time.process_time()
    for _ in range(runs):
        session.run(None, feeds)
    return (time.process_time() - t0) / runs * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True, help="kiln binaries, comma-separated")
    ap.add_argument("--only", default="", help="model names, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    kilns, only = args.kiln.split(","), set(filter(None, args.only.split(",")))
    head = "| model | " + " | ".join(f"kiln {i}, CPU ms" for i in range(len(kilns))) + " | onnxruntime, CPU ms | "
    head += " | ".join(f"kiln {i} / onnxruntime" for i in range(len(kilns))) + " |"
    print(head)
    print("|---|" + "---:|" * (2 * len(kilns) + 1))
    with tempfile.TemporaryDirectory(prefix="kiln-cputime-") as tmp:
        for name, desc, build, feeds in cases():
            if only and name not in only:
                continue
            model_path = os.path.join(tmp, f"{name}.onnx")
            onnx.save(build(), model_path)
            inputs = {}
            for key, arr in feeds.items():
                inputs[key] = os.path.join(tmp, f"{name}_{key}.npy")
                np.save(inputs[key], arr)
            engines = []
            for i, kiln in enumerate(kilns):
                engines.append(os.path.join(tmp, f"{name}_{i}.kiln"))
                subprocess.run([kiln, "build", model_path, "-o", engines[-1]], check=True, capture_output=True)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
            kiln_ms, ort_ms = [[] for _ in kilns], []
            for _ in range(args.rounds):
                for i, kiln in enumerate(kilns):
                    long = kiln_cpu_seconds(kiln, engines[i], inputs, 45)
                    short = kiln_cpu_seconds(kiln, engines[i], inputs, 5)
                    kiln_ms[i].append((long - short) / 40 * 1e3)
                ort_ms.append(ort_cpu_ms(session, feeds))
            k = [statistics.median(v) for v in kiln_ms]
            o = statistics.median(ort_ms)
            print(f"| {desc} | " + " | ".join(f"{v:.2f}" for v in k) + f" | {o:.2f} | " +
                  " | ".join(f"{v / o:.2f}" for v in k) + " |", flush=True)
    print(f"load average at the end (1/5/15 min): {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
