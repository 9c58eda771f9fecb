"""The FP8 (E4M3) KV cache on the CPU (`--kv-cache fp8`, per-head scales from `--calib-text` or 1.0
with a warning) on the bundled models/kjv-gpt2: perplexity within 1 % of the fp32 cache, greedy
agreement with it over a few prompts (and an FP8 run against itself identical), 4x the cache blocks
of the same `--kv-budget-mb`, bad values refused. (CUDA: tests/gpu/llm_kv_fp8_cuda.py.)

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_llm_kv_fp8.py
"""
import os
import re

import pytest

from conftest import assert_error, assert_ok, run_kiln

KJV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv-gpt2")
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
        "the light from the darkness. And God called the light Day, and the darkness he called Night. And the "
        "evening and the morning were the first day. And God said, Let there be a firmament in the midst of the "
        "waters, and let it divide the waters from the waters.")
PROMPTS = ["In the beginning", "And God said", "And the earth was", "Let there be light", "And the evening",
           "the face of the deep"]
WARNING = "without a calibration text"


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return str(path)


def perplexity(kiln, text_file, *args):
    p = run_kiln(kiln, "perplexity", KJV, "--text", text_file, *args)
    assert_ok(p)
    m = re.search(r"perplexity ([0-9.]+) ", p.stdout)
    assert m, p.stdout
    return float(m.group(1)), p.stderr


def compare(kiln, prompts_file, *args):
    p = run_kiln(kiln, "compare", "--llm", KJV, KJV, "--prompts", prompts_file, "--max-tokens", 16, *args)
    assert_ok(p)
    ident = re.search(r"identical sequences: (\d+) / (\d+)", p.stdout)
    first = re.search(r"first-token agreement: (\d+) / (\d+)", p.stdout)
    assert ident and first, p.stdout
    return int(ident.group(1)), int(first.group(1)), int(ident.group(2))


def test_fp8_kv_perplexity_within_one_percent(kiln, text_file):
    ref, err = perplexity(kiln, text_file)
    assert WARNING not in err
    calibrated, err = perplexity(kiln, text_file, "--kv-cache", "fp8", "--calib-text", text_file)
    assert "FP8 (E4M3) KV cache, calibrated scales" in err and WARNING not in err, err
    unit, err = perplexity(kiln, text_file, "--kv-cache", "fp8")
    assert WARNING in err and "unit scales" in err, err
    for got in (calibrated, unit):
        assert got != ref and abs(got - ref) <= 0.01 * ref, (got, ref)


def test_fp8_kv_greedy_agreement(kiln, prompts_file, text_file):
    ident, first, n = compare(kiln, prompts_file, "--kv-cache-b", "fp8", "--calib-text", text_file)
    assert n == 6 and first == 6 and ident >= 4, (ident, first)
    # the same FP8 cache on both sides: the same tokens
    assert compare(kiln, prompts_file, "--kv-cache-a", "fp8", "--kv-cache-b", "fp8", "--calib-text",
                   text_file) == (6, 6, 6)


def test_fp8_kv_holds_four_times_the_tokens(kiln):
    # kjv-gpt2: 6 layers x 6 KV heads x head dim 64, blocks of 16 tokens: 73,728 bytes a block in FP8
    # (294,912 in fp32), so 1 MiB holds 14 blocks (224 tokens) in FP8, 3 in fp32
    p = run_kiln(kiln, "generate", KJV, "--prompt", "And God said", "--max-tokens", 4, "--temperature", 0,
                 "--kv-cache", "fp8", "--kv-budget-mb", 1)
    assert_ok(p)
    assert "KV cache fp8: 14 blocks, 224 tokens" in p.stderr, p.stderr
    p = run_kiln(kiln, "generate", KJV, "--prompt", "And God said " * 20, "--max-tokens", 4, "--temperature", 0,
                 "--kv-budget-mb", 1)
    assert_error(p, mentions=["--kv-budget-mb"])  # 3 fp32 blocks (48 tokens) do not hold the prompt
    p = run_kiln(kiln, "generate", KJV, "--prompt", "And God said " * 20, "--max-tokens", 4, "--temperature", 0,
                 "--kv-cache", "fp8", "--kv-budget-mb", 1)
    assert_ok(p)


def test_fp8_kv_refusals(kiln, text_file):
    assert_error(run_kiln(kiln, "perplexity", KJV, "--text", text_file, "--kv-cache", "fp16"), mentions=["--kv-cache"],
                 code=2)
    assert_error(run_kiln(kiln, "generate", KJV, "--prompt", "x", "--kv-cache", "int4"), mentions=["--kv-cache"],
                 code=2)
    assert_error(run_kiln(kiln, "perplexity", KJV, "--text", text_file, "--kv-cache", "fp8", "--calib-text",
                          text_file + ".missing"), mentions=["missing"])
