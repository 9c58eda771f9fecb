"""kiln's LLM accuracy tools on the GPU: `kiln perplexity --target cuda` of models/kjv-gpt2 (fp16 and
bf16 engines) within 1 % of the CPU's fp32 perplexity on a fixed text (every window's logits come back
from the CUDA forward with all_logits), and `kiln compare --llm` of the fp32 engine on the CPU against
the 16-bit engines on cuda: first-token agreement at least 90 %. A weight-only INT8 engine (`--weights
int8`: int8 matrices on the device, fp16 activations) and a weight-only INT4 one (`--weights int4
--calib-text`: packed int4 matrices with group scales and zero points on the device) on cuda against the
same engine on the CPU: perplexity within 1 %, first-token agreement at least 90 %; the same for FP8
engines (`--weights fp8`: E4M3 matrices and activations, with dynamic and with calibrated static
activation scales), whose activation codes the GPU rounds exactly as the CPU does. Prints the numbers. Exits 77
(skipped) when --target cuda is not available.

usage: llm_accuracy_cuda.py KILN REPO_ROOT
"""
import os
import re
import subprocess
import sys
import tempfile

TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
        "the light from the darkness. And God called the light Day, and the darkness he called Night. And the "
        "evening and the morning were the first day. ") * 3
PROMPTS = ["In the beginning", "And God said", "And the earth was", "Let there be light", "And the evening",
           "And he said unto them", "Blessed are the", "The LORD is my shepherd", "And it came to pass",
           "Thus saith the LORD"]


def kiln(binary, *args):
    p = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=600)
    if p.returncode and "not available" in p.stderr:
        print("skipped: --target cuda is not available:", p.stderr.strip())
        sys.exit(77)
    if p.returncode:
        sys.exit(f"kiln {' '.join(map(str, args))} failed:\n{p.stderr}")
    return p.stdout


def main():
    binary, root = sys.argv[1], sys.argv[2]
    model = os.path.join(root, "models", "kjv-gpt2")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        prompts = os.path.join(tmp, "prompts.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        with open(prompts, "w") as f:
            f.write("\n".join(PROMPTS) + "\n")
        engines = {p: os.path.join(tmp, f"{p}.kiln") for p in ("fp32", "fp16", "bf16")}
        for p, e in engines.items():
            kiln(binary, "build", "--hf", model, "-o", e, f"--{p}")
        ppl = lambda out: float(re.search(r"perplexity ([0-9.]+)", out).group(1))
        ref = ppl(kiln(binary, "perplexity", engines["fp32"], "--text", text, "--ctx", 128, "--stride", 64))
        print(f"cpu fp32: perplexity {ref:.4f}")
        for p in ("fp16", "bf16"):
            got = ppl(kiln(binary, "perplexity", engines[p], "--text", text, "--ctx", 128, "--stride", 64,
                           "--target", "cuda"))
            ok = abs(got - ref) <= 0.01 * ref
            failures += not ok
            print(f"cuda {p}: perplexity {got:.4f} ({100 * (got - ref) / ref:+.3f} %) {'ok' if ok else 'FAILED'}")
            out = kiln(binary, "compare", "--llm", engines["fp32"], engines[p], "--prompts", prompts,
                       "--max-tokens", 32, "--target-b", "cuda")
            first = re.search(r"first-token agreement: (\d+) / (\d+)", out)
            ok = int(first.group(1)) >= 0.9 * int(first.group(2))
            failures += not ok
            print(f"cuda {p} against cpu fp32:\n{out.strip()}\n{'ok' if ok else 'FAILED'}")
        failures += check_quantized(binary, model, tmp, text, prompts, ppl, ("--weights", "int8"), "int8")
        failures += check_quantized(binary, model, tmp, text, prompts, ppl,
                                    ("--weights", "int4", "--calib-text", text), "int4")
        failures += check_quantized(binary, model, tmp, text, prompts, ppl, ("--weights", "fp8"), "fp8")
        failures += check_quantized(binary, model, tmp, text, prompts, ppl,
                                    ("--weights", "fp8", "--calib-text", text), "fp8-calibrated")
    return 1 if failures else 0


def check_quantized(binary, model, tmp, text, prompts, ppl, flags, name):
    """The quantized engine built with flags on cuda against itself on the CPU; returns the number of
    failed checks."""
    engine = os.path.join(tmp, f"{name}.kiln")
    kiln(binary, "build", "--hf", model, "-o", engine, *flags)
    window = ("--text", text, "--ctx", 128, "--stride", 64)
    ref = ppl(kiln(binary, "perplexity", engine, *window))
    got = ppl(kiln(binary, "perplexity", engine, *window, "--target", "cuda"))
    ok = abs(got - ref) <= 0.01 * ref
    print(f"{name}: perplexity cpu {ref:.4f}, cuda {got:.4f} ({100 * (got - ref) / ref:+.3f} %) {'ok' if ok else 'FAILED'}")
    out = kiln(binary, "compare", "--llm", engine, engine, "--prompts", prompts, "--max-tokens", 32,
               "--target-b", "cuda")
    first = re.search(r"first-token agreement: (\d+) / (\d+)", out)
    agree = int(first.group(1)) >= 0.9 * int(first.group(2))
    print(f"{name} cuda against {name} cpu:\n{out.strip()}\n{'ok' if agree else 'FAILED'}")
    return (not ok) + (not agree)


if __name__ == "__main__":
    sys.exit(main())
