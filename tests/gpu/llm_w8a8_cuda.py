"""W8A8 on the GPU: models/kjv-gpt2 built `--weights w8a8` (calibrated on the first chapters of Genesis,
a training text of the model, or on CALIB when given), its perplexity on cuda (int8 x int8 products:
the dp4a GEMV for decode, cuBLASLt IMMA for the windows) within 1 % of the same engine on the CPU and
within 2 % of the CPU's fp32 engine, and `kiln compare --llm` of the engine on cuda against itself on
the CPU and against fp32 on the CPU: first-token agreement at least 90 %. Prints the numbers. With
VAL and PROMPTS (the validation split and the 64 prompts of docs/llm-quantization.md) it measures on
them instead of the built-in text. Exits 77 (skipped) when --target cuda is not available.

usage: llm_w8a8_cuda.py KILN REPO_ROOT [CALIB VAL PROMPTS]
"""
import os
import re
import subprocess
import sys
import tempfile

CALIB = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
         "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
         "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
         "the light from the darkness. And God called the light Day, and the darkness he called Night. And the "
         "evening and the morning were the first day. ") * 4
TEXT = ("And Abram went up out of Egypt, he, and his wife, and all that he had, and Lot with him, into the south. "
        "And Abram was very rich in cattle, in silver, and in gold. And he went on his journeys from the south even "
        "to Bethel, unto the place where his tent had been at the beginning, between Bethel and Hai. ") * 3
PROMPTS = ["In the beginning", "And God said", "And the earth was", "Let there be light", "And the evening",
           "And he said unto them", "Blessed are the", "The LORD is my shepherd", "And it came to pass",
           "Thus saith the LORD"]


def kiln(binary, *args):
    p = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=900)
    if p.returncode and "not available" in p.stderr:
        print("skipped: --target cuda is not available:", p.stderr.strip())
        sys.exit(77)
    if p.returncode:
        sys.exit(f"kiln {' '.join(map(str, args))} failed:\n{p.stderr}")
    return p.stdout


def agreement(binary, a, b, prompts, label, **targets):
    """kiln compare --llm a b; prints it; whether the first tokens agree on at least 90 % of prompts."""
    extra = [x for k, v in targets.items() for x in (f"--{k.replace('_', '-')}", v)]
    out = kiln(binary, "compare", "--llm", a, b, "--prompts", prompts, "--max-tokens", 32, *extra)
    first = re.search(r"first-token agreement: (\d+) / (\d+)", out)
    ok = int(first.group(1)) >= 0.9 * int(first.group(2))
    print(f"{label}:\n{out.strip()}\n{'ok' if ok else 'FAILED'}")
    return ok


def main():
    binary, root = sys.argv[1], sys.argv[2]
    model = os.path.join(root, "models", "kjv-gpt2")
    with tempfile.TemporaryDirectory() as tmp:
        calib, text, prompts = (os.path.abspath(a) for a in sys.argv[3:6]) if len(sys.argv) >= 6 else (
            os.path.join(tmp, n) for n in ("calib.txt", "text.txt", "prompts.txt"))
        if len(sys.argv) < 6:
            for path, content in ((calib, CALIB), (text, TEXT), (prompts, "\n".join(PROMPTS) + "\n")):
                with open(path, "w") as f:
                    f.write(content)
        fp32, w8a8 = os.path.join(tmp, "fp32.kiln"), os.path.join(tmp, "w8a8.kiln")
        kiln(binary, "build", "--hf", model, "-o", fp32, "--fp32")
        kiln(binary, "build", "--hf", model, "-o", w8a8, "--weights", "w8a8", "--calib-text", calib)
        ppl = lambda out: float(re.search(r"perplexity ([0-9.]+)", out).group(1))
        window = ("--text", text, "--ctx", 256)
        ref = ppl(kiln(binary, "perplexity", fp32, *window))
        cpu = ppl(kiln(binary, "perplexity", w8a8, *window))
        gpu = ppl(kiln(binary, "perplexity", w8a8, *window, "--target", "cuda"))
        checks = [abs(gpu - cpu) <= 0.01 * cpu, abs(gpu - ref) <= 0.02 * ref]
        print(f"perplexity: cpu fp32 {ref:.4f}, cpu w8a8 {cpu:.4f} ({100 * (cpu - ref) / ref:+.3f} %), cuda w8a8 "
              f"{gpu:.4f} ({100 * (gpu - cpu) / cpu:+.3f} % of cpu w8a8, {100 * (gpu - ref) / ref:+.3f} % of fp32) "
              f"{'ok' if all(checks) else 'FAILED'}")
        checks.append(agreement(binary, w8a8, w8a8, prompts, "w8a8 cpu against w8a8 cuda", target_b="cuda"))
        checks.append(agreement(binary, fp32, w8a8, prompts, "fp32 cpu against w8a8 cuda", target_b="cuda"))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
