#!/usr/bin/env python3
"""gpu_build_times.py — cold `kiln build --target cuda` times at the default flags on torchvision
classifiers (random weights, exported with a dynamic batch as users export them), and the tactics
tuning picks on ResNet-50 and BERT-base at the default bounds next to the same kiln without bounds
(or next to another kiln, --old-kiln: an older build), to check that the bounded tuning finds the
same winners. Runs on the GPU host (needs torch, torchvision, transformers).

usage: gpu_build_times.py --kiln KILN [--old-kiln KILN] [--work DIR] [--out DIR] [--models a,b,...]
                          [--timeout S] [--skip-winners] [--gpt2-xl]
  --gpt2-xl: also GPT-2 XL fp16 (exported as bench/gpu_bench.py does, 6 GB of external data): a cold
  and a warm build (engine size, build and save times, each stage's time: conversion, upload,
  checksum, write, fsync) and two loads (kiln inspect's wall clock).
Prints the tables; writes OUT/build_times.json (the same, with each engine's tactics) and
OUT/build_logs.txt (every --verbose build log, one after the other)."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

CLASSIFIERS = ["mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_1", "resnet18", "efficientnet_b0",
               "mobilenet_v2", "mobilenet_v3_large", "regnet_y_400mf", "densenet121", "resnet50", "convnext_tiny"]


def export_classifier(name, path):
    """torchvision `name`, random weights, exported like the torchvision docs do: dynamic batch."""
    import torch
    import torchvision
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.onnx.export(m, (x,), path, input_names=["image"], output_names=["logits"], opset_version=17,
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)


def export_static(group, path, batch):
    """ResNet-50 (image batch x 3 x 224 x 224) or BERT-base (input_ids batch x 128), static shapes."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    if group == "resnet50":
        import torchvision
        m, args, names = torchvision.models.resnet50().eval(), (torch.randn(batch, 3, 224, 224),), ["image"]
    else:
        from transformers import BertConfig, BertModel

        class Bert(nn.Module):
            def __init__(s):
                super().__init__()
                s.m = BertModel(BertConfig(attn_implementation="eager"))

            def forward(s, input_ids):
                return s.m(input_ids=input_ids).last_hidden_state
        m, args, names = Bert().eval(), (torch.randint(0, 30000, (batch, 128)),), ["input_ids"]
    with torch.no_grad():
        torch.onnx.export(m, args, path, input_names=names, output_names=["out"], opset_version=17, dynamo=False)


def build(kiln, model, out, flags, timeout):
    """(wall seconds, rc, the output) of one cold kiln build (no timing cache)."""
    t0 = time.time()
    try:
        p = subprocess.run([kiln, "build", model, "--target", "cuda", *flags, "-o", out], capture_output=True,
                           text=True, timeout=timeout)
        return time.time() - t0, p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        return time.time() - t0, "timeout", text


def tactics(kiln, engine):
    """{node: tactic text} from kiln inspect's tactics section."""
    p = subprocess.run([kiln, "inspect", engine], capture_output=True, text=True)
    got, on = {}, False
    for line in p.stdout.splitlines():
        if line.startswith("tactics:"):
            on = True
        elif on and line.startswith("  ") and ": " in line:
            node, what = line.strip().split(": ", 1)
            got[node] = re.sub(r" \(tuned.*", "", what)
        elif on and not line.startswith("  "):
            on = False
    return got


def tuning_line(text):
    m = re.search(r"^tuning: .*$", text, re.M)
    return m.group(0) if m else "(no tuning line)"


def gpt2_xl(kiln, work, timeout):
    """Rows for GPT-2 XL fp16: two builds (the second with the ONNX weights in the page cache), two loads."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    import gpu_bench
    path, eng = f"{work}/gpt2xl.onnx", f"{work}/gpt2xl_fp16.kiln"
    if not os.path.exists(path):
        export, _, inames, onames, dynamo = gpu_bench.build_models("gpt2-xl")
        feeds = {inames[0]: np.zeros((1, 128), np.int64)}
        gpu_bench.export_onnx(export, feeds, inames, onames, dynamo, path)
        del export
    rows = []
    for label in ("cold", "warm"):
        t, rc, out = build(kiln, path, eng, ["--fp16", "--verbose"], timeout)
        m = re.search(r"^built .* in ([0-9.]+) ms, saved in ([0-9.]+) ms, ([0-9.]+) MB", out, re.M)
        stages = re.findall(r"build stage: (.*)$", out, re.M)
        stages += re.findall(r"((?:engine write|file write): .*|cuda: .* uploaded in .*)$", out, re.M)
        rows.append({"what": f"build ({label})", "wall_s": round(t, 2), "rc": rc,
                     "build_ms": float(m.group(1)) if m else None, "save_ms": float(m.group(2)) if m else None,
                     "engine_mb": float(m.group(3)) if m else None, "stages": stages})
    for label in ("first", "second"):
        t0 = time.time()
        p = subprocess.run([kiln, "inspect", eng], capture_output=True, text=True)
        rows.append({"what": f"load ({label}: kiln inspect)", "wall_s": round(time.time() - t0, 2), "rc": p.returncode})
    return rows


def save(out, work, res):
    """Writes what is known so far (the stage may be stopped at its time limit)."""
    with open(f"{out}/build_times.json", "w") as f:
        json.dump(res, f, indent=1)
    with open(f"{out}/build_logs.txt", "w") as f:
        for name in sorted(os.listdir(work)):
            if name.endswith(".log"):
                with open(f"{work}/{name}") as g:
                    f.write(f"==== {name}\n{g.read()}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--old-kiln")
    ap.add_argument("--work", default="/tmp/kiln-build-times")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default=",".join(CLASSIFIERS))
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--skip-winners", action="store_true")
    ap.add_argument("--gpt2-xl", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    res = {"classifiers": [], "winners": []}
    lines = ["| model | level 0 build | default build (level 2) | tuning |", "|---|---|---|---|"]
    for name in a.models.split(","):
        path = f"{a.work}/{name}.onnx"
        if not os.path.exists(path):
            export_classifier(name, path)
        t0, rc0, _ = build(a.kiln, path, f"{a.work}/{name}.l0.kiln", ["--tuning-level", "0"], a.timeout)
        t2, rc2, out2 = build(a.kiln, path, f"{a.work}/{name}.kiln", ["--verbose"], a.timeout)
        with open(f"{a.work}/{name}.kiln.log", "w") as f:
            f.write(out2)
        row = {"model": name, "level0_s": round(t0, 2), "level0_rc": rc0, "default_s": round(t2, 2), "default_rc": rc2,
               "tuning": tuning_line(out2)}
        res["classifiers"].append(row)
        lines.append(f"| {name} | {t0:.2f} s | {t2:.2f} s{'' if rc2 == 0 else f' (rc {rc2})'} | {row['tuning']} |")
        print(lines[-1], flush=True)
        save(a.out, a.work, res)
    if not a.skip_winners:
        lines += ["", "| engine | kiln | build | tuning | tactics equal to the other kiln's |", "|---|---|---|---|---|"]
        for group, batch, prec in (("resnet50", 1, "--fp16"), ("bert", 1, "--fp16"), ("resnet50", 256, "--fp16")):
            path = f"{a.work}/{group}_b{batch}.onnx"
            if not os.path.exists(path):
                export_static(group, path, batch)
            picks = {}
            unbounded = ["--tuning-budget-ms", "none", "--tuning-layer-budget-ms", "none", "--tuning-workspace-mb", "none"]
            ref = ("old", a.old_kiln, []) if a.old_kiln else ("unbounded", a.kiln, unbounded)
            for label, kiln, extra in (("new", a.kiln, []), ref):
                eng = f"{a.work}/{group}_b{batch}{prec}.{label}.kiln"
                t, rc, out = build(kiln, path, eng, [prec, "--verbose", *extra], 3 * a.timeout)
                with open(f"{eng}.log", "w") as f:
                    f.write(out)
                picks[label] = tactics(kiln, eng) if rc == 0 else {}
                res["winners"].append({"engine": f"{group} b{batch} {prec}", "kiln": label, "build_s": round(t, 2),
                                       "rc": rc, "tuning": tuning_line(out), "tactics": picks[label]})
            same = ""
            if len(picks) == 2:
                other = ref[0]
                nodes = sorted(set(picks["new"]) | set(picks[other]))
                eq = [n for n in nodes if picks["new"].get(n) == picks[other].get(n)]
                diff = [f"{n}: new {picks['new'].get(n)} / {other} {picks[other].get(n)}" for n in nodes if n not in eq]
                same = f"{len(eq)} of {len(nodes)}"
                res["winners"][-1]["differ"] = diff
            for w in res["winners"][-len(picks):]:
                lines.append(f"| {w['engine']} | {w['kiln']} | {w['build_s']:.2f} s | {w['tuning']} | {same} |")
                print(lines[-1], flush=True)
            save(a.out, a.work, res)
    if a.gpt2_xl:
        res["gpt2_xl"] = gpt2_xl(a.kiln, a.work, 10 * a.timeout)
        lines += ["", "| GPT-2 XL fp16 | wall | build | save | engine |", "|---|---|---|---|---|"]
        for r in res["gpt2_xl"]:
            rc = "" if r["rc"] == 0 else f" (rc {r['rc']})"
            lines.append(f"| {r['what']} | {r['wall_s']:.2f} s{rc} | {r.get('build_ms') or '-'} ms | "
                         f"{r.get('save_ms') or '-'} ms | {r.get('engine_mb') or '-'} MB |")
            print(lines[-1], flush=True)
            for stage in r.get("stages", []):
                print(f"    {stage}", flush=True)
    save(a.out, a.work, res)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
