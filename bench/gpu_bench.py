"""GPU benchmark: kiln against PyTorch eager and torch.compile(mode="reduce-overhead"), side by side in
one run on one GPU, FP16, random weights:
  ResNet-50 224x224 (batch 1 latency, batch 256 throughput), BERT-base seq 128 (batch 1, batch 32),
  and with --gpt2-xl GPT-2 XL prefill of 128 tokens at batch 1 (its ONNX export is 6 GB and takes
  minutes, so it is optional). --quick runs small models instead (ResNet-18, a 2-layer BERT and GPT-2),
  in seconds, to check the whole pipeline.

Each model is built in PyTorch with random weights (seed 0), exported to ONNX in float32 with static
shapes (TorchScript exporter for ResNet and BERT, the dynamo exporter for GPT-2: the approach of
../shared/anchors/export_onnx.py, written out here because only the repository travels to the GPU host)
and compiled with `kiln build --target cuda --fp16`.
  - kiln is timed by `kiln run ENGINE --input ... --iterations N --warmup W --no-transfers`: the
    median latency of kiln_context_run inside one process with the inputs already on the GPU (as
    PyTorch's are) and no copy back (trtexec's --noDataTransfers); the "host copies" column gives what
    PyTorch measures for copying the same bytes, i.e. what a run with transfers adds.
  - PyTorch (fp16 model on the GPU, inputs already there, channels_last for ResNet, SDPA attention)
    is timed with CUDA events around the call: median of N after W warm-up calls; torch.compile gets
    3 untimed calls first (compilation, CUDA graph capture).
  - Correctness: kiln's output and PyTorch's fp16 output are compared with the float32 PyTorch model
    (TF32 off) on the same input: max|out - ref| / max|ref|.
Targets (the CUDA issue): ResNet-50 b1 <= 0.40 ms, b256 >= 35,000 img/s; BERT b1 <= 0.60 ms,
b32 >= 18,000 seq/s; GPT-2 XL prefill faster than torch.compile. A failing step (export, build, run,
compile) is reported in its cell and the run goes on.

env: KILN_BUILD_ARGS, extra `kiln build` arguments (e.g. --verbose, whose stage times are printed)
usage: gpu_bench.py [--kiln PATH] [--quick] [--gpt2-xl] [--only KEYS] [--impls eager,compile,kiln]
                    [--repeats N] [--warmup N] [--workdir DIR] [--json FILE] [--dry-run]
  --only: comma-separated workload keys (resnet50_b1, resnet50_b256, bert_b1, bert_b32, gpt2xl_prefill;
  quick: resnet18_b1, resnet18_b8, bert_tiny_b1, bert_tiny_b8, gpt2_tiny_prefill)
  --dry-run: no torch, no kiln: made-up numbers, to check the arguments, the table and the JSON.
"""
import argparse
import copy
import datetime
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LATENCY_RE = re.compile(r"latency over (\d+) runs?: median ([0-9.]+) ms")


class Workload:
    """One row of the table: a model group (exported once per batch size), a batch, a metric and a target."""

    def __init__(self, key, group, title, batch, seq, kind, unit, target_text, target):
        self.key, self.group, self.title, self.batch, self.seq = key, group, title, batch, seq
        self.kind = kind  # "latency" (ms) or "throughput" (unit per second)
        self.unit = unit
        self.target_text = target_text
        self.target = target  # (kiln_ms, compile_ms or None) -> True/False/None


def workloads(quick, gpt2_xl):
    W = Workload
    if quick:
        return [
            W("resnet18_b1", "resnet18", "ResNet-18 b1 latency", 1, None, "latency", "img/s", "—", None),
            W("resnet18_b8", "resnet18", "ResNet-18 b8 throughput", 8, None, "throughput", "img/s", "—", None),
            W("bert_tiny_b1", "bert-tiny", "BERT 2x128 seq 128 b1 latency", 1, 128, "latency", "seq/s", "—", None),
            W("bert_tiny_b8", "bert-tiny", "BERT 2x128 seq 128 b8 throughput", 8, 128, "throughput", "seq/s", "—", None),
            W("gpt2_tiny_prefill", "gpt2-tiny", "GPT-2 2x128 prefill 32 b1", 1, 32, "latency", "tok/s",
              "< torch.compile", lambda k, c: None if c is None else k < c),
        ]
    rows = [
        W("resnet50_b1", "resnet50", "ResNet-50 b1 latency", 1, None, "latency", "img/s", "≤ 0.40 ms",
          lambda k, c: k <= 0.40),
        W("resnet50_b256", "resnet50", "ResNet-50 b256 throughput", 256, None, "throughput", "img/s",
          "≥ 35,000 img/s", lambda k, c: 256e3 / k >= 35000),
        W("bert_b1", "bert-base", "BERT-base seq 128 b1 latency", 1, 128, "latency", "seq/s", "≤ 0.60 ms",
          lambda k, c: k <= 0.60),
        W("bert_b32", "bert-base", "BERT-base seq 128 b32 throughput", 32, 128, "throughput", "seq/s",
          "≥ 18,000 seq/s", lambda k, c: 32e3 / k >= 18000),
    ]
    if gpt2_xl:
        rows.append(W("gpt2xl_prefill", "gpt2-xl", "GPT-2 XL prefill 128 b1", 1, 128, "latency", "tok/s",
                      "< torch.compile", lambda k, c: None if c is None else k < c))
    return rows


# ------------------------------------------------------------------------------------ models (torch)

def build_models(group):
    """(export model fp32, timing model fp32 with the same weights, input names, output names, dynamo?).
    Export uses eager attention (what the exporters handle); timing uses PyTorch's fastest (SDPA)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if group in ("resnet50", "resnet18"):
        import torchvision
        m = getattr(torchvision.models, group)().eval()
        return m, copy.deepcopy(m), ["image"], ["logits"], False
    if group.startswith("bert"):
        from transformers import BertConfig, BertModel
        size = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512) \
            if group == "bert-tiny" else {}

        class Bert(nn.Module):
            def __init__(s, attn):
                super().__init__()
                s.m = BertModel(BertConfig(attn_implementation=attn, **size))

            def forward(s, input_ids):
                return s.m(input_ids=input_ids).last_hidden_state
        export, timed = Bert("eager").eval(), Bert("sdpa").eval()
        timed.load_state_dict(export.state_dict())
        return export, timed, ["input_ids"], ["hidden"], False
    from transformers import GPT2Config, GPT2LMHeadModel
    L, d, h = {"gpt2-tiny": (2, 128, 2), "gpt2-xl": (48, 1600, 25), "gpt2-xl-4": (4, 1600, 25)}[group]

    class Logits(nn.Module):
        def __init__(s, attn):
            super().__init__()
            s.m = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=d, n_head=h, attn_implementation=attn))

        def forward(s, input_ids):
            return s.m(input_ids=input_ids, use_cache=False).logits
    export, timed = Logits("eager").eval(), Logits("sdpa").eval()
    timed.load_state_dict(export.state_dict())
    return export, timed, ["input_ids"], ["logits"], True


def make_inputs(w, names, rng):
    if w.seq is None:
        return {names[0]: rng.standard_normal((w.batch, 3, 224, 224)).astype(np.float32)}
    vocab = 30000 if w.group.startswith("bert") else 50257
    return {names[0]: rng.integers(0, vocab, (w.batch, w.seq)).astype(np.int64)}


def export_onnx(model, feeds, inames, onames, dynamo, path):
    """Exports model (fp32, CPU) with static shapes; the dynamo exporter writes weights as external data."""
    import torch
    args = tuple(torch.from_numpy(a) for a in feeds.values())
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(model, args, path, input_names=inames, output_names=onames, opset_version=18,
                              dynamo=True, external_data=True)
        else:
            torch.onnx.export(model, args, path, input_names=inames, output_names=onames, opset_version=17,
                              dynamo=False)


def cuda_time(fn, repeats, warmup):
    """Median milliseconds of fn() by CUDA events, after warm-up calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"output shape {list(got.shape)}, expected {list(ref.shape)}")
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


def short(e):
    text = str(e).strip().splitlines()
    text = [l for l in text if l.strip()]
    err = [l for l in text if "error" in l.lower()]
    return ((err or text or [type(e).__name__])[0]).replace("|", "/")[:120]


# ------------------------------------------------------------------------------------ kiln

def kiln_env(kiln):
    """The environment for kiln: a bundle's lib/ (beside its bin/) goes on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(kiln))), "lib")
    if os.path.isdir(lib):
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def kiln_build(kiln, onnx_path, engine, timing_cache=None):
    """Builds engine from onnx_path (cuda, fp16, default tuning; with timing_cache, through that
    timing-cache file); returns the wall seconds."""
    t0 = time.time()
    cache = ["--timing-cache", timing_cache] if timing_cache else []
    extra = os.environ.get("KILN_BUILD_ARGS", "").split()  # e.g. --verbose: the build's stage times
    r = subprocess.run([kiln, "build", onnx_path, "-o", engine, "--target", "cuda", "--fp16", *cache, *extra],
                       capture_output=True, text=True, env=kiln_env(kiln))
    if r.returncode != 0:
        raise RuntimeError("kiln build: " + short(r.stderr + r.stdout))
    lines = [l for l in r.stdout.splitlines() if l.startswith(("built", "tuning"))]
    lines += [l for l in r.stderr.splitlines() if "build stage" in l]
    print("".join(l + "\n" for l in lines), end="", flush=True)
    return time.time() - t0


def kiln_run(kiln, engine, feeds, onames, workdir, repeats, warmup):
    """kiln's median latency (ms) and its outputs for feeds."""
    args = []
    for name, arr in feeds.items():
        path = os.path.join(workdir, f"in_{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    out_dir = os.path.join(workdir, "kiln_out")
    r = subprocess.run([kiln, "run", engine, *args, "--iterations", str(repeats), "--warmup", str(warmup),
                        "--no-transfers", "--quiet", "--output-dir", out_dir], capture_output=True, text=True, env=kiln_env(kiln))
    if r.returncode != 0:
        raise RuntimeError("kiln run: " + short(r.stderr + r.stdout))
    m = LATENCY_RE.search(r.stdout)
    if not m:
        raise RuntimeError("kiln run printed no latency")
    outs = [np.load(os.path.join(out_dir, n.replace("/", "_") + ".npy")) for n in onames]
    return float(m.group(2)), outs


# ------------------------------------------------------------------------------------ one model group

def host_copy_ms(feeds, out_bytes):
    """What PyTorch takes to copy these inputs to the GPU and out_bytes back (pageable memory), in ms."""
    import torch
    cpu_in = [torch.from_numpy(a) for a in feeds.values()]
    gpu_out = torch.empty(max(out_bytes, 1), dtype=torch.uint8, device="cuda")

    def copies():
        for t in cpu_in:
            t.to("cuda")
        gpu_out.cpu()
    copies()
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        copies()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_group(group, rows, a, impls, workdir):
    """Measures every workload of one model group; returns {key: result dict}."""
    import torch
    results = {w.key: {"key": w.key} for w in rows}
    try:
        export_model, timed_model, inames, onames, dynamo = build_models(group)
    except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
        for r in results.values():
            r["error"] = "model: " + short(e)
        return results
    half = timed_model.half().cuda().eval()
    if group.startswith("resnet"):
        half = half.to(memory_format=torch.channels_last)
    for w in rows:
        res = results[w.key]
        feeds = make_inputs(w, inames, np.random.default_rng(1))
        res["bytes_in"] = int(sum(x.nbytes for x in feeds.values()))
        ref = None
        try:  # float32 reference on the GPU, TF32 off (the export model visits the GPU and comes back)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            with torch.no_grad():
                ref = export_model.cuda()(*[torch.from_numpy(x).cuda() for x in feeds.values()]).float().cpu().numpy()
            res["bytes_out"] = int(ref.size * 4)
            res["copies_ms"] = host_copy_ms(feeds, res["bytes_out"])
        except Exception as e:  # noqa: BLE001
            res["ref_error"] = short(e)
        finally:
            export_model.cpu()
            torch.backends.cudnn.allow_tf32 = True
            torch.cuda.empty_cache()
        x = [torch.from_numpy(v).cuda() for v in feeds.values()]
        if w.seq is None:
            x = [x[0].half().to(memory_format=torch.channels_last)]
        if "eager" in impls:
            try:
                with torch.inference_mode():
                    res["eager_ms"] = cuda_time(lambda: half(*x), a.repeats, a.warmup)
                    if ref is not None:
                        res["torch_err"] = rel_err(half(*x).float().cpu().numpy(), ref)
            except Exception as e:  # noqa: BLE001
                res["eager_error"] = short(e)
        if "compile" in impls:
            try:
                compiled = torch.compile(half, mode="reduce-overhead")
                with torch.inference_mode():
                    t0 = time.time()
                    for _ in range(3):
                        compiled(*x)
                    torch.cuda.synchronize()
                    res["compile_s"] = time.time() - t0
                    res["compile_ms"] = cuda_time(lambda: compiled(*x), a.repeats, a.warmup)
            except Exception as e:  # noqa: BLE001
                res["compile_error"] = short(e)
            finally:
                torch._dynamo.reset()
        del x
        torch.cuda.empty_cache()
        if "kiln" in impls:
            onnx_path = os.path.join(workdir, f"{w.key}.onnx")
            engine = os.path.join(workdir, f"{w.key}.kiln")
            try:
                t0 = time.time()
                export_onnx(export_model, feeds, inames, onames, dynamo, onnx_path)
                res["export_s"] = time.time() - t0
                cache = os.path.join(workdir, f"{w.key}.timing-cache")
                res["build_s"] = kiln_build(a.kiln, onnx_path, engine, cache)  # cold: the cache is new
                res["build_warm_s"] = kiln_build(a.kiln, onnx_path, engine, cache)
                res["kiln_ms"], outs = kiln_run(a.kiln, engine, feeds, onames, workdir, a.repeats, a.warmup)
                if ref is not None:
                    res["kiln_err"] = rel_err(outs[0], ref)
            except Exception as e:  # noqa: BLE001
                res["kiln_error"] = short(e)
            for f in os.listdir(workdir):  # engines and exports are large: keep the disk free
                if f.startswith(w.key):
                    os.remove(os.path.join(workdir, f))
    del half, timed_model, export_model
    gc.collect()
    torch.cuda.empty_cache()
    return results


# ------------------------------------------------------------------------------------ the table

def metric(w, ms):
    if w.kind == "latency":
        return f"{ms:.3f} ms"
    return f"{w.batch * 1e3 / ms:,.0f} {w.unit} ({ms:.2f} ms)"


def cell(w, res, impl):
    if f"{impl}_ms" in res:
        return metric(w, res[f"{impl}_ms"])
    err = res.get(f"{impl}_error") or res.get("error")
    return f"error: {err}" if err else "not run"


def ratio(res, other):
    if "kiln_ms" in res and f"{other}_ms" in res:
        return f"{res[f'{other}_ms'] / res['kiln_ms']:.2f}x"
    return "—"


def print_table(rows, results, out=sys.stdout):
    p = lambda *s: print(*s, file=out)  # noqa: E731
    p("| workload | PyTorch eager | torch.compile | kiln fp16 | host copies (not timed) | kiln vs eager | "
      "kiln vs compile | target | met | err kiln / torch fp16 | kiln build cold / warm cache |")
    p("|---|---|---|---|---|---|---|---|---|---|---|")
    for w in rows:
        r = results.get(w.key, {})
        met = "—"
        if "kiln_ms" in r and w.target:
            ok = w.target(r["kiln_ms"], r.get("compile_ms"))
            met = "—" if ok is None else ("yes" if ok else "no")
        copies = f"≈ {r['copies_ms']:.2f} ms" if "copies_ms" in r else "—"
        errs = "{} / {}".format(*(f"{r[k]:.1e}" if k in r else "—" for k in ("kiln_err", "torch_err")))
        build = f"{r['build_s']:.1f} s / {r['build_warm_s']:.1f} s" if "build_warm_s" in r else "—"
        p(f"| {w.title} | {cell(w, r, 'eager')} | {cell(w, r, 'compile')} | {cell(w, r, 'kiln')} | {copies} | "
          f"{ratio(r, 'eager')} | {ratio(r, 'compile')} | {w.target_text} | {met} | {errs} | {build} |")
    p("\nratios: the other's time / kiln's (> 1: kiln is faster). Both time the computation with the inputs"
      " already on the GPU (kiln: --no-transfers); 'host copies' is what copying kiln's inputs and outputs"
      " between host and GPU would add.")


def fake_results(rows, impls):
    """--dry-run: made-up measurements (the last kiln run fails) for the table and the JSON."""
    rng = np.random.default_rng(0)
    out = {}
    for i, w in enumerate(rows):
        base = 0.5 * w.batch ** 0.8
        r = {"key": w.key, "copies_ms": 0.01 * w.batch, "bytes_in": 4 * w.batch, "bytes_out": 4000 * w.batch}
        if "eager" in impls:
            r.update(eager_ms=base * 8, torch_err=2e-3)
        if "compile" in impls:
            r.update(compile_ms=base, compile_s=40.0)
        if "kiln" in impls and i == len(rows) - 1:
            r["kiln_error"] = "kiln build: kiln: error: (dry run) node Foo_3: op Foo is not supported by cuda"
        elif "kiln" in impls:
            r.update(kiln_ms=base * float(rng.uniform(0.6, 1.4)), kiln_err=3e-3, build_s=12.0, build_warm_s=2.0, export_s=5.0)
        out[w.key] = r
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    default_kiln = os.environ.get("KILN_BIN") or next(
        (p for p in ("dist/gpu/bin/kiln", "build-gpu/kiln") if os.path.exists(p)), "dist/gpu/bin/kiln")
    ap.add_argument("--kiln", default=default_kiln, help="the kiln binary (default $KILN_BIN, dist/gpu/bin/kiln)")
    ap.add_argument("--quick", action="store_true", help="small models, seconds (compile is skipped unless --impls names it)")
    ap.add_argument("--gpt2-xl", action="store_true", help="also GPT-2 XL prefill (6 GB export, minutes)")
    ap.add_argument("--only", default="", help="comma-separated workload keys")
    ap.add_argument("--impls", default=None, help="comma-separated subset of eager,compile,kiln")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--workdir", help="scratch directory for exports and engines (default: a temporary one)")
    ap.add_argument("--json", help="also write the measurements here")
    ap.add_argument("--dry-run", action="store_true", help="made-up numbers; no torch, no kiln")
    a = ap.parse_args()
    if a.repeats < 1 or a.warmup < 0:
        ap.error("--repeats must be >= 1 and --warmup >= 0")
    impls = (a.impls or ("eager,kiln" if a.quick else "eager,compile,kiln")).split(",")
    bad = sorted(set(impls) - {"eager", "compile", "kiln"})
    if bad:
        ap.error(f"unknown --impls {', '.join(bad)} (eager, compile, kiln)")
    rows = workloads(a.quick, a.gpt2_xl)
    if a.only:
        keys = a.only.split(",")
        unknown = sorted(set(keys) - {w.key for w in rows})
        if unknown:
            ap.error(f"unknown workload {', '.join(unknown)} (have: {', '.join(w.key for w in rows)})")
        rows = [w for w in rows if w.key in keys]

    header = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv),
              "impls": impls, "repeats": a.repeats, "warmup": a.warmup}
    if a.dry_run:
        header.update(gpu="(dry run)", torch="(dry run)", kiln="(dry run)")
        results = fake_results(rows, impls)
    else:
        import torch
        if not torch.cuda.is_available():
            print("gpu_bench: no GPU visible to PyTorch", file=sys.stderr)
            return 1
        r = subprocess.run([a.kiln, "--version"], capture_output=True, text=True, env=kiln_env(a.kiln)) \
            if os.path.exists(a.kiln) else None
        header.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                      kiln=(r.stdout.strip() if r and r.returncode == 0 else f"not usable: {a.kiln}"))
        print(f"# {header['gpu']}, torch {header['torch']}, {header['kiln']}", flush=True)
        results = {}
        with tempfile.TemporaryDirectory(prefix="kiln-gpu-bench-") as tmp:
            workdir = a.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            for group in dict.fromkeys(w.group for w in rows):
                group_rows = [w for w in rows if w.group == group]
                t0 = time.time()
                results.update(run_group(group, group_rows, a, impls, workdir))
                for w in group_rows:
                    print(f"# {w.key}: {json.dumps(results[w.key])}", flush=True)
                print(f"# {group} done in {time.time() - t0:.0f} s", flush=True)

    print(f"\nGPU benchmark, {header['date']}: {header['gpu']}, torch {header['torch']}, {header['kiln']}")
    print(f"FP16, random weights; median of {a.repeats} after {a.warmup} warm-up runs; `{header['command']}`\n")
    print_table(rows, results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"header": header, "results": [results.get(w.key, {"key": w.key}) for w in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
