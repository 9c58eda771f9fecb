"""The FP8 (E4M3) KV cache on the GPU: `kiln perplexity --target cuda` of models/kjv-gpt2 with
`--kv-cache fp8` (calibrated on the text, and with unit scales) within 1 % of the 16-bit cache on
cuda, of the CPU's FP8 cache within 1 %, and `kiln compare --llm` of the 16-bit cache against the
FP8 one on cuda (first-token agreement at least 90 %) and of the CPU's FP8 cache against cuda's
(90 %); `kiln generate --kv-budget-mb 1` on cuda holds 2x the tokens of the 16-bit cache. Prints
the numbers. Exits 77 (skipped) when --target cuda is not available.

usage: llm_kv_fp8_cuda.py KILN REPO_ROOT
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
    return p.stdout, p.stderr


def main():
    binary, root = sys.argv[1], sys.argv[2]
    model = os.path.join(root, "models", "kjv-gpt2")
    failures = 0

    def check(ok, line):
        nonlocal failures
        failures += not ok
        print(f"{line} {'ok' if ok else 'FAILED'}")

    with tempfile.TemporaryDirectory() as tmp:
        text, prompts = os.path.join(tmp, "text.txt"), os.path.join(tmp, "prompts.txt")
        with open(text, "w") as f:
            f.write(TEXT)
        with open(prompts, "w") as f:
            f.write("\n".join(PROMPTS) + "\n")
        ppl = lambda args: float(re.search(r"perplexity ([0-9.]+)", kiln(binary, "perplexity", model, "--text", text,
                                                                          "--ctx", 128, "--stride", 64, *args)[0]).group(1))
        ref = ppl(["--target", "cuda"])
        cpu8 = ppl(["--kv-cache", "fp8", "--calib-text", text])
        print(f"cuda 16-bit cache: perplexity {ref:.4f}; cpu fp8 cache: {cpu8:.4f}")
        for name, args in (("calibrated", ["--calib-text", text]), ("unit scales", [])):
            got = ppl(["--target", "cuda", "--kv-cache", "fp8", *args])
            check(abs(got - ref) <= 0.01 * ref, f"cuda fp8 cache, {name}: perplexity {got:.4f} "
                  f"({100 * (got - ref) / ref:+.3f} % of the 16-bit cache)")
            if name == "calibrated":
                check(abs(got - cpu8) <= 0.01 * cpu8, f"cuda fp8 against cpu fp8: {100 * (got - cpu8) / cpu8:+.3f} %")
        for what, args in (("cuda 16-bit against cuda fp8", ["--target", "cuda", "--kv-cache-b", "fp8"]),
                           ("cpu fp8 against cuda fp8", ["--target-b", "cuda", "--kv-cache-a", "fp8", "--kv-cache-b",
                                                         "fp8"])):
            out, _ = kiln(binary, "compare", "--llm", model, model, "--prompts", prompts, "--max-tokens", 32,
                          "--calib-text", text, *args)
            first = re.search(r"first-token agreement: (\d+) / (\d+)", out)
            check(int(first.group(1)) >= 0.9 * int(first.group(2)), f"{what}:\n{out.strip()}\n")
        _, err = kiln(binary, "generate", model, "--prompt", "And God said", "--max-tokens", 8, "--temperature", 0,
                      "--target", "cuda", "--kv-cache", "fp8", "--kv-budget-mb", 1)
        # keys + values x 6 layers x 6 KV heads x 64 x 16 tokens: 73,728 bytes a block in FP8 (147,456 in
        # 16 bits: 7 blocks, 112 tokens)
        check("KV cache fp8: 14 blocks, 224 tokens" in err, f"cuda fp8 cache in 1 MiB: {err.strip().splitlines()[-1]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
