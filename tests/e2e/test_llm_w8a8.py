"""W8A8 LLM engines (`kiln build --hf DIR --weights w8a8 --calib-text FILE`): SmoothQuant smoothing and
static INT8 activation scales calibrated on a text; `kiln inspect` shows the records, the mean NLL
stays within 0.05 nats of fp32's (the random model's perplexity is in the 10^5) and greedy first tokens
agree on a tiny random GPT-2 with the tokenizer of
models/kjv-gpt2; every option is refused where it does not apply, and the calibration input where it
cannot be read.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_llm_w8a8.py
"""
import math
import os
import re
import shutil

import pytest

from conftest import assert_error, assert_ok, run_kiln
from llm_checkpoints import make_gpt2

KJV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv-gpt2")
CALIB = ("And it came to pass after these things, that God did tempt Abraham, and said unto him, Abraham: and he "
         "said, Behold, here I am. And he said, Take now thy son, thine only son Isaac, whom thou lovest, and get "
         "thee into the land of Moriah; and offer him there for a burnt offering upon one of the mountains which "
         "I will tell thee of. And Abraham rose up early in the morning, and saddled his ass.")
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light.")
PROMPTS = ["In the beginning", "And God said", "And the earth was", "Let there be light", "And the evening",
           "the face of the deep"]
PPL = re.compile(r"perplexity ([0-9.]+)")


@pytest.fixture
def files(tmp_path):
    """A tiny GPT-2 checkpoint with the kjv tokenizer, the calibration and evaluation texts, the prompts."""
    ck = tmp_path / "ck"
    make_gpt2(str(ck), seed=11, vocab=8192, n_layer=2, n_embd=64, n_head=4, n_positions=64)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(KJV, name), str(ck))
    (tmp_path / "calib.txt").write_text(CALIB)
    (tmp_path / "text.txt").write_text(TEXT)
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return {k: str(tmp_path / v) for k, v in (("ck", "ck"), ("calib", "calib.txt"), ("text", "text.txt"),
                                              ("prompts", "prompts.txt"), ("dir", "."))}


def build(kiln, f, out, *args):
    return run_kiln(kiln, "build", "--hf", f["ck"], "-o", os.path.join(f["dir"], out), *args)


def perplexity(kiln, engine, f):
    p = run_kiln(kiln, "perplexity", engine, "--text", f["text"], "--ctx", 64)
    assert_ok(p)
    return float(PPL.search(p.stdout).group(1))


def test_w8a8_engine_inspect_perplexity_and_agreement(kiln, files):
    f = files
    fp32, w8a8, alt = (os.path.join(f["dir"], n) for n in ("fp32.kiln", "w8a8.kiln", "alt.kiln"))
    assert_ok(build(kiln, f, "fp32.kiln", "--fp32"))
    p = build(kiln, f, "w8a8.kiln", "--weights", "w8a8", "--calib-text", f["calib"])
    assert_ok(p)
    assert "w8a8 weights" in p.stdout, p.stdout
    p = build(kiln, f, "alt.kiln", "--weights", "w8a8", "--calib-text", f["calib"], "--calibrator", "minmax",
              "--smooth-alpha", "0.8", "--weights-skip", "lm_head")
    assert_ok(p)
    assert os.path.getsize(w8a8) < 0.5 * os.path.getsize(fp32) < os.path.getsize(alt)
    p = run_kiln(kiln, "inspect", w8a8)
    assert_ok(p)
    assert "precision: w8a8" in p.stdout and "build options: --hf --weights w8a8 --calib-text" in p.stdout, p.stdout
    for name in ("qkv", "o", "up", "down"):
        assert re.search(r"layers\.1\.%s\.weight\.act_scale\s+float32\s+\[1\]" % name, p.stdout), p.stdout
    assert re.search(r"layers\.0\.up\.weight\s+int8", p.stdout) and re.search(r"tok_emb\s+int8", p.stdout), p.stdout
    ref = perplexity(kiln, fp32, f)
    for engine in (w8a8, alt):
        got = perplexity(kiln, engine, f)
        assert abs(math.log(got / ref)) <= 0.05, (engine, got, ref)  # mean NLL within 0.05 nats
    p = run_kiln(kiln, "compare", "--llm", fp32, w8a8, "--prompts", f["prompts"], "--max-tokens", 8)
    assert_ok(p)
    first = re.search(r"first-token agreement: (\d+) / (\d+)", p.stdout)
    assert first and int(first.group(1)) >= int(first.group(2)) - 1, p.stdout


@pytest.mark.parametrize("args,mentions", [
    (["--weights", "w8a8"], ["needs --calib-text", "calibrat"]),
    (["--calib-text", "CALIB"], ["--calib-text", "only with --weights w8a8, int4 or fp8"]),
    (["--weights", "int8", "--smooth-alpha", "0.5"], ["apply only with --weights w8a8"]),
    (["--weights", "w8a8", "--calib-text", "CALIB", "--smooth-alpha", "1.5"], ["--smooth-alpha", "[0, 1]"]),
    (["--weights", "w8a8", "--calib-text", "CALIB", "--smooth-alpha", "x"], ["--smooth-alpha"]),
    (["--weights", "w8a8", "--calib-text", "CALIB", "--fp16"], ["w8a8", "exclude"]),
    (["--weights", "w8a8", "--weights", "int8", "--calib-text", "CALIB"], ["exclude"]),
    (["--weights", "w4a4", "--calib-text", "CALIB"], ["int8", "w8a8", "w4a4"]),
])
def test_w8a8_usage_refusals(kiln, files, args, mentions):
    args = [files["calib"] if a == "CALIB" else a for a in args]
    assert_error(build(kiln, files, "x.kiln", *args), mentions=mentions, code=2)
    assert not os.path.exists(os.path.join(files["dir"], "x.kiln"))


def test_w8a8_calibration_input_refusals(kiln, files, tmp_path):
    f = files
    p = build(kiln, f, "x.kiln", "--weights", "w8a8", "--calib-text", f["calib"], "--calibrator", "kl")
    assert_error(p, mentions=["kl"], code=p.returncode if p.returncode in (1, 2) else 1)
    p = build(kiln, f, "x.kiln", "--weights", "w8a8", "--calib-text", str(tmp_path / "missing.txt"))
    assert_error(p, mentions=["missing.txt"])
    (tmp_path / "empty.txt").write_text("")
    p = build(kiln, f, "x.kiln", "--weights", "w8a8", "--calib-text", str(tmp_path / "empty.txt"))
    assert_error(p, mentions=["has no text"])
    os.remove(os.path.join(f["ck"], "tokenizer.json"))
    p = build(kiln, f, "x.kiln", "--weights", "w8a8", "--calib-text", f["calib"])
    assert_error(p, mentions=["tokenizer.json", "w8a8"])
    assert not os.path.exists(os.path.join(f["dir"], "x.kiln"))


def test_w8a8_random_weights_are_cuda_only(kiln):
    p = run_kiln(kiln, "bench", "--llm", "--random", "tiny-gpt2", "--dtype", "w8a8", "--target", "cpu")
    assert_error(p, mentions=["--dtype w8a8", "cuda", "--weights w8a8"], code=2)
