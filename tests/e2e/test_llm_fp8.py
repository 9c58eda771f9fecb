"""FP8 (E4M3) LLM engines (`kiln build --hf --weights fp8 [--calib-text FILE]`, docs/llm-quantization.md):
on models/kjv-gpt2, inspect shows the precision, E4M3 matrices, their scales and (calibrated) activation
scales, the perplexity stays within 1 % of the fp32 engine's and the first greedy tokens of six prompts
agree, with dynamic and with static activation scales; an engine of a tiny random GPT-2 opens for cuda
(without a GPU only the device is missing); and the refusals of the build and of random FP8 weights on
the CPU.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_llm_fp8.py
"""
import os
import re

import pytest

from conftest import assert_error, assert_ok, run_kiln
from test_llm_accuracy import KJV, TEXT, build, checkpoint, compare, kiln_perplexity, prompts_file, text_file  # noqa: F401


def test_fp8_engines_inspect_perplexity_and_agreement(kiln, tmp_path, text_file, prompts_file):
    (tmp_path / "calib.txt").write_text(TEXT[:300])
    fp32, dyn, cal = (str(tmp_path / f) for f in ("fp32.kiln", "fp8.kiln", "fp8c.kiln"))
    build(kiln, KJV, fp32, "--fp32")
    assert "fp8 weights" in build(kiln, KJV, dyn, "--weights", "fp8").stdout
    build(kiln, KJV, cal, "--weights", "fp8", "--calib-text", str(tmp_path / "calib.txt"))
    assert os.path.getsize(dyn) < 0.5 * os.path.getsize(fp32)
    p = run_kiln(kiln, "inspect", dyn)
    assert_ok(p)
    assert "precision: fp8" in p.stdout and "a dynamic scale per token row" in p.stdout, p.stdout
    assert re.search(r"layers\.0\.qkv\.weight\s+float8e4m3fn", p.stdout) and "layers.0.qkv.weight.scale" in p.stdout
    assert "act_scale" not in p.stdout, p.stdout
    p = run_kiln(kiln, "inspect", cal)
    assert_ok(p)
    assert "static scales calibrated" in p.stdout and re.search(r"layers\.5\.down\.weight\.act_scale\s+float32\s+\[1\]",
                                                                 p.stdout), p.stdout
    ref, _, _ = kiln_perplexity(kiln, fp32, text_file, "--ctx", 64)
    for engine in (dyn, cal):
        got, _, _ = kiln_perplexity(kiln, engine, text_file, "--ctx", 64)
        assert abs(got - ref) <= 0.01 * ref, (engine, got, ref)
        _, _, first, n = compare(kiln, fp32, engine, prompts_file, 8)
        assert first >= n - 1, (engine, first, n)


def test_fp8_engine_opens_for_cuda(kiln, tmp_path, text_file):
    """Without a GPU (or a CUDA build) the only error is the missing device (tests/gpu/llm_accuracy_cuda.py
    runs it on one)."""
    checkpoint(tmp_path / "ck", seed=12)
    engine = str(tmp_path / "f8.kiln")
    build(kiln, str(tmp_path / "ck"), engine, "--weights", "fp8")
    p = run_kiln(kiln, "perplexity", engine, "--text", text_file, "--target", "cuda")
    if p.returncode == 0:
        assert "perplexity" in p.stdout, p.stdout
        return
    assert_error(p, any_of=["without the cuda backend", "no cuda device"])


@pytest.mark.parametrize("args,mentions", [
    (["--weights", "fp8", "--bf16"], ["exclude each other"]),
    (["--weights", "int8", "--weights", "fp8"], ["exclude each other"]),
    (["--calib-text", "CALIB"], ["only with --weights w8a8, int4 or fp8"]),
    (["--weights", "int8", "--calib-text", "CALIB"], ["only with --weights w8a8, int4 or fp8"]),
    (["--weights", "fp8", "--calib-text"], ["needs a value"]),
])
def test_fp8_build_bad_arguments(kiln, tmp_path, args, mentions):
    (tmp_path / "calib.txt").write_text("And God said")
    args = [str(tmp_path / "calib.txt") if a == "CALIB" else a for a in args]
    assert_error(run_kiln(kiln, "build", "--hf", KJV, "-o", str(tmp_path / "x.kiln"), *args), mentions=mentions,
                 code=2)


@pytest.mark.parametrize("calib,mentions", [("missing.txt", ["missing.txt"]), ("empty.txt", ["no text"])])
def test_fp8_build_bad_calibration_text(kiln, tmp_path, calib, mentions):
    (tmp_path / "empty.txt").write_text("")
    out = tmp_path / "x.kiln"
    p = run_kiln(kiln, "build", "--hf", KJV, "-o", str(out), "--weights", "fp8", "--calib-text", str(tmp_path / calib))
    assert_error(p, mentions=["FP8 activation calibration", *mentions], code=1)
    assert not out.exists()


def test_random_fp8_weights_are_refused_on_the_cpu(kiln):
    p = run_kiln(kiln, "bench", "--llm", "--random", "tiny-llama", "--dtype", "fp8", "--target", "cpu")
    assert_error(p, mentions=["--dtype fp8", "--target cuda"], code=2)
