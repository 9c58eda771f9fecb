"""CPU benchmark: kiln against onnxruntime, side by side, on larger versions of the e2e models
(tests/e2e/models.py). Each model is built once with `kiln build`; kiln is timed by
`kiln run ENGINE --iterations N --warmup W` (the engine's own per-run latency, measured inside the
process around kiln_context_run, no process start or file I/O), onnxruntime by timing
InferenceSession.run the same number of times after the same warm-up, both with 2 threads. Both
report the median. kiln's outputs are also checked against onnxruntime's (max|diff|/max|ref|).

The torchvision classifiers (SqueezeNet 1.1 at batch 2, ShuffleNetV2 x0.5, MobileNetV3-Small,
ResNet-18, EfficientNet-B0 at batch 1, 224x224) come from the graph skeletons in bench/torchvision/
(written by bench/export_torchvision.py), their weights refilled with seeded normal values of the
exported statistics, so no torch is needed here.

usage: bench_cpu.py [--kiln PATH] [--repeats N] [--warmup N] [--threads N]
                    [--only resnet,bert,gpt2,squeezenet1_1,...] [--write]   (--write also writes bench/RESULTS.md)
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import models  # noqa: E402

# (kind, description, builder kwargs, [(batch, seq)]) — CPU-friendly but realistic sizes
CONFIGS = [
    ("resnet", "ResNet-style, widths 32/64/128, 64x64", dict(widths=(32, 64, 128), image=64),
     [(1, None), (8, None)]),
    ("bert", "BERT-style, 4 layers, hidden 256, 4 heads", dict(hidden=256, heads=4, layers=4, vocab=1000,
                                                               max_pos=512), [(1, 128)]),
    ("gpt2", "GPT-2-style, 4 layers, hidden 256, 4 heads, vocab 1000",
     dict(hidden=256, heads=4, layers=4, vocab=1000, max_pos=256), [(1, 64)]),
]
# (name, description, batch): torchvision exports, graphs in bench/torchvision/
TORCHVISION = [
    ("squeezenet1_1", "torchvision SqueezeNet 1.1, 224x224", 2),
    ("shufflenet_v2_x0_5", "torchvision ShuffleNetV2 x0.5, 224x224", 1),
    ("mobilenet_v3_small", "torchvision MobileNetV3-Small, 224x224", 1),
    ("resnet18", "torchvision ResNet-18, 224x224", 1),
    ("efficientnet_b0", "torchvision EfficientNet-B0, 224x224", 1),
]
LATENCY_RE = re.compile(r"latency over (\d+) runs?: median ([0-9.]+) ms")


def torchvision_model(name):
    """The torchvision export `name` from bench/torchvision/: its skeleton graph with every emptied
    initializer refilled from a seeded normal distribution of the recorded mean and std."""
    import json
    from onnx import numpy_helper
    base = os.path.join(HERE, "torchvision", name)
    model = onnx.load(base + ".onnx")
    with open(base + ".json") as f:
        stats = json.load(f)
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        st = stats.get(init.name)
        if st:
            arr = rng.normal(st["mean"], st["std"], size=st["dims"]).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
    return model


def flop_count(model, feeds):
    """Multiply-add FLOPs (2 per MAC) of the model's Conv, MatMul and Gemm nodes for these inputs, from
    the real shapes of their inputs and outputs (read back from an onnxruntime run that exposes them)."""
    heavy = [n for n in model.graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    probe = sorted({n.input[0] for n in heavy} | {n.output[0] for n in heavy})
    m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(v) for v in probe if v not in shapes)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes.update({name: list(arr.shape) for name, arr in zip(names, sess.run(names, feeds))})
    flops = 0
    for n in heavy:
        out = int(np.prod(shapes[n.output[0]]))
        if n.op_type == "MatMul":
            flops += 2 * out * shapes[n.input[0]][-1]
        elif n.op_type == "Gemm":
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            flops += 2 * out * shapes[n.input[0]][0 if trans_a else 1]
        else:
            flops += 2 * out * int(np.prod(shapes[n.input[1]][1:]))
    return flops


def bench_kiln(kiln, engine, feeds, workdir, repeats, warmup, threads):
    """kiln's median latency in ms (from `kiln run --iterations`) and its outputs."""
    args = []
    for name, arr in feeds.items():
        path = os.path.join(workdir, f"in_{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    out_dir = os.path.join(workdir, "out")
    env = dict(os.environ, KILN_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    cmd = [kiln, "run", engine, *args, "--iterations", str(repeats), "--warmup", str(warmup), "--quiet",
           "--output-dir", out_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr}")
    match = LATENCY_RE.search(proc.stdout)
    if not match:
        raise RuntimeError(f"no latency line in kiln's output:\n{proc.stdout}")
    outs = {f[:-4]: np.load(os.path.join(out_dir, f)) for f in os.listdir(out_dir) if f.endswith(".npy")}
    return float(match.group(2)), outs


def bench_ort(model_path, feeds, repeats, warmup, threads):
    """onnxruntime's median latency in ms (all graph optimizations on, as deployed) and its outputs."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for _ in range(warmup):
        sess.run(names, feeds)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = sess.run(names, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), dict(zip(names, outs))


def max_rel_err(kiln_outs, ort_outs):
    """The largest max|kiln - ort| / max|ort| over the outputs (inf when an output is missing or
    has another shape)."""
    worst = 0.0
    for name, ref in ort_outs.items():
        got = kiln_outs.get(name)
        if got is None or got.shape != ref.shape:
            return float("inf")
        scale = float(np.max(np.abs(ref))) or 1.0
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref))) / scale)
    return worst


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run(args):
    rows = []
    configs = CONFIGS + [(name, desc, None, [(batch, None)]) for name, desc, batch in TORCHVISION]
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        for kind, desc, kwargs, shapes in configs:
            if args.only and kind not in args.only:
                continue
            model = torchvision_model(kind) if kwargs is None else models.BUILDERS[kind](**kwargs)
            kwargs = kwargs or {}
            model_path = os.path.join(tmp, f"{kind}.onnx")
            engine = os.path.join(tmp, f"{kind}.kiln")
            onnx.save(model, model_path)
            t0 = time.perf_counter()
            proc = subprocess.run([args.kiln, "build", model_path, "-o", engine], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"kiln build {kind} failed (exit {proc.returncode}):\n{proc.stderr}")
            build_s = time.perf_counter() - t0
            for batch, seq in shapes:
                if kind in models.BUILDERS:
                    feeds = models.make_inputs(kind, batch, seq, vocab=kwargs.get("vocab", 100),
                                               image=kwargs.get("image", 32))
                else:
                    feeds = {"image": np.random.default_rng(1).standard_normal((batch, 3, 224, 224), np.float32)}
                work = os.path.join(tmp, f"{kind}-{batch}-{seq}")
                os.makedirs(work)
                k_ms, k_out = bench_kiln(args.kiln, engine, feeds, work, args.repeats, args.warmup, args.threads)
                o_ms, o_out = bench_ort(model_path, feeds, args.repeats, args.warmup, args.threads)
                flops = flop_count(model, feeds)
                shape = f"batch {batch}" + (f", seq {seq}" if seq else "")
                rows.append((desc, shape, k_ms, o_ms, k_ms / o_ms, flops / (k_ms * 1e6), flops / (o_ms * 1e6),
                             max_rel_err(k_out, o_out), build_s))
                print(f"{desc} [{shape}]: kiln {k_ms:.3f} ms, onnxruntime {o_ms:.3f} ms", file=sys.stderr)
    return rows


def table(rows):
    lines = ["| model | shape | kiln ms | onnxruntime ms | ratio (kiln/ort) | kiln GFLOP/s | ort GFLOP/s "
             "| max rel err | kiln build s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for desc, shape, k, o, ratio, kg, og, err, build_s in rows:
        lines.append(f"| {desc} | {shape} | {k:.3f} | {o:.3f} | {ratio:.2f} | {kg:.1f} | {og:.1f} | {err:.1e} "
                     f"| {build_s:.2f} |")
    return "\n".join(lines)


def results_md(args, text):
    kiln_version = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    cmd = "python bench/bench_cpu.py " + " ".join(a for a in sys.argv[1:])
    return f"""{BEGIN}
# CPU benchmark results: kiln vs onnxruntime

- date: {datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}
- load average when the run ended (1/5/15 min): {" / ".join(f"{x:.2f}" for x in os.getloadavg())}
  (anything near or above the CPU count means other work shared the CPUs and the times are noisy)
- versions: {kiln_version}, onnxruntime {ort.__version__}, numpy {np.__version__}
- command: `{cmd}`
- settings: {args.threads} threads each (kiln: KILN_NUM_THREADS, its thread pool; onnxruntime: intra-op threads,
  sequential execution, all graph optimizations), {args.warmup} warm-up runs, median of {args.repeats} runs

kiln ms is the engine's latency per run measured inside `kiln run --iterations` (around
kiln_context_run: inputs already bound, no process start or file I/O); onnxruntime ms times
`InferenceSession.run` from Python (includes its small per-call binding overhead). ratio > 1 means kiln
is slower. GFLOP/s counts 2 FLOPs per multiply-add of the Conv/MatMul/Gemm nodes. max rel err is
max|kiln - ort| / max|ort| over the outputs.

{text}
{END}
"""


BEGIN, END = "<!-- bench_cpu.py: begin -->", "<!-- bench_cpu.py: end -->"


def write_results(section):
    """Replaces bench_cpu.py's section of bench/RESULTS.md (between its markers), keeping the sections
    other benchmarks wrote; the section goes first when the file has none yet."""
    path = os.path.join(HERE, "RESULTS.md")
    old = open(path).read() if os.path.exists(path) else ""
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + section.rstrip("\n") + old[old.index(END) + len(END):]
    else:
        new = section + ("\n" + old if old else "")
    with open(path, "w") as f:
        f.write(new)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=os.environ.get("KILN_BIN", os.path.join(REPO, "build", "kiln")),
                   help="the kiln binary (default: $KILN_BIN, else build/kiln)")
    p.add_argument("--repeats", type=int, default=50, help="timed runs per measurement (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    p.add_argument("--only", type=lambda s: s.split(","), default=None,
                   help="comma-separated subset of: " + ",".join([c[0] for c in CONFIGS] + [t[0] for t in TORCHVISION]))
    p.add_argument("--write", action="store_true", help="also write bench/RESULTS.md")
    args = p.parse_args()
    if not os.access(args.kiln, os.X_OK):
        p.error(f"kiln binary not found at {args.kiln} (build it, or pass --kiln / set KILN_BIN)")
    args.kiln = os.path.abspath(args.kiln)
    text = table(run(args))
    print(text)
    if args.write:
        print(f"wrote {write_results(results_md(args, text))}", file=sys.stderr)


if __name__ == "__main__":
    main()
