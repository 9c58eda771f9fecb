"""LLM engines end to end: `kiln build --hf` on tiny random GPT-2 and Llama checkpoints (with the
tokenizer of test_generate.py), `kiln generate` from the engine equals generation from the directory
token for token (greedy; fp32 engine), an fp16 engine generates, `kiln inspect` describes it (and
names the family and its features for the fixtures of tests/data/llm_families), `kiln run` refuses it; `kiln bench --llm` reports every statistic with exact token counts and writes its JSON; bad
options exit 2.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_llm_engine.py
"""
import json
import os

import pytest

from conftest import assert_error, run_kiln
from llm_checkpoints import make_gpt2, make_llama
from test_generate import VOCAB, generate, write_tokenizer

MAKERS = {"gpt2": (make_gpt2, dict(vocab=VOCAB, n_positions=128, seed=21)),
          "llama": (make_llama, dict(vocab=VOCAB, max_pos=256, seed=22, eos=7, dtype="BF16"))}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def ckpt(request, tmp_path_factory):
    maker, kw = MAKERS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    maker(d, **kw)
    write_tokenizer(d)
    return d


def build(kiln, d, out, *flags):
    proc = run_kiln(kiln, "build", "--hf", d, "-o", out, *flags)
    assert proc.returncode == 0, proc.stderr
    assert "LLM engine" in proc.stdout
    return out


def test_engine_generates_like_the_directory(kiln, ckpt, tmp_path):
    engine = build(kiln, ckpt, tmp_path / "m32.kiln", "--fp32")
    args = ("--prompt", "the cat sat on the mat", "--temperature", "0", "--max-tokens", "24")
    rc1, out1, err1, ids1 = generate(kiln, ckpt, *args)
    rc2, out2, err2, ids2 = generate(kiln, engine, *args)
    assert rc1 == 0 and rc2 == 0, err1 + err2
    assert ids1 == ids2 and out1 == out2
    assert len(ids2["generated_ids"]) >= 1


def test_half_engine_generates(kiln, ckpt, tmp_path):
    engine = build(kiln, ckpt, tmp_path / "m16.kiln", "--fp16")
    rc, _, err, ids = generate(kiln, engine, "--prompt", "on the mat", "--temperature", "0", "--max-tokens", "8")
    assert rc == 0, err
    assert 1 <= len(ids["generated_ids"]) <= 8


def test_inspect_and_kind_mismatch(kiln, ckpt, tmp_path):
    engine = build(kiln, ckpt, tmp_path / "m.kiln")
    proc = run_kiln(kiln, "inspect", engine)
    assert proc.returncode == 0, proc.stderr
    for text in ("(LLM)", "model: ", "precision: ", "parameters: ", "bytes of weights", f"vocab size {VOCAB}",
                 "tok_emb"):
        assert text in proc.stdout, proc.stdout
    assert_error(run_kiln(kiln, "run", engine), mentions=("an LLM engine", "kiln generate"))


FAMILIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llm_families")


@pytest.mark.parametrize("name,family,features", [
    ("qwen2", "qwen2", ["SwiGLU", "q/k/v biases", "layers.0.qkv.bias"]),
    ("gemma", "gemma", ["GeGLU (gelu tanh)", "embeddings scaled by sqrt(d_model)", "head dim 256"]),
    ("phi3_partial", "phi3", ["RoPE on 32 of 64 head dims"]),
    ("phi3_longrope", "phi3", ["rope scaling longrope (factor 4, attention factor 1.29", "original context 8)"]),
    ("mistral_window", "mistral", ["sliding window 6"]),
])
def test_inspect_names_the_family(kiln, tmp_path, name, family, features):
    """An engine of each family (tests/data/llm_families) names it and its features in kiln inspect."""
    engine = build(kiln, os.path.join(FAMILIES, name), tmp_path / "f.kiln")
    proc = run_kiln(kiln, "inspect", engine)
    assert proc.returncode == 0, proc.stderr
    for text in [f"model: {family},"] + features:
        assert text in proc.stdout, proc.stdout


def test_truncated_engine_is_a_clean_error(kiln, ckpt, tmp_path):
    engine = build(kiln, ckpt, tmp_path / "m.kiln")
    data = engine.read_bytes()
    for n in (0, 7, 100, 1279, 1280, 5000, len(data) - 1):
        cut = tmp_path / "cut.kiln"
        cut.write_bytes(data[:n])
        assert_error(run_kiln(kiln, "generate", cut, "--prompt", "x"), any_of=("truncated", "corrupted"))


def test_bench_llm(kiln, ckpt, tmp_path):
    engine = build(kiln, ckpt, tmp_path / "m.kiln")
    out = tmp_path / "b.json"
    proc = run_kiln(kiln, "bench", "--llm", engine, "--batch", "1,2", "--input-len", "8", "--output-len", "5",
                    "--iterations", "2", "--warmup", "0", "--export-json", out)
    assert proc.returncode == 0, proc.stderr
    for text in ("=== Batch 1 ===", "=== Batch 2 ===", "TTFT: ", "TPOT: ", "E2E Latency: ", "Prefill Time",
                 "Output Throughput", "Total Throughput", "percentile(99%)", "=== Environment ==="):
        assert text in proc.stdout, proc.stdout
    doc = json.loads(out.read_text())
    assert doc["kind"] == "llm" and doc["workload"]["ignore_eos"] and doc["environment"]["cpu_model"]
    for row, batch in zip(doc["results"], (1, 2)):
        assert row["batch"] == batch and row["error"] is None
        assert row["requests"] == 2 * batch
        assert row["output_tokens"] == 2 * batch * 5 and row["input_tokens"] == 2 * batch * 8
        for key in ("prefill_ms", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "total_tokens_per_s"):
            assert row[key]["median"] > 0 and row[key]["p99"] >= row[key]["p90"], key
    # the directory works too
    proc = run_kiln(kiln, "bench", "--llm", ckpt, "--batch", "1", "--input-len", "4", "--output-len", "2",
                    "--iterations", "1")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [("--batch", "0"), ("--batch", "1,x"), ("--input-len", "-3"), ("--output-len", "0"),
                                  ("--iterations", "0"), ("--target", "tpu"), ("--frobnicate", "1"), ("extra",)])
def test_bench_llm_bad_args(kiln, ckpt, args):
    assert_error(run_kiln(kiln, "bench", "--llm", ckpt, *args), code=2)


def test_bench_llm_lengths_beyond_the_model(kiln, ckpt):
    assert_error(run_kiln(kiln, "bench", "--llm", ckpt, "--input-len", "200", "--output-len", "100"),
                 mentions=("exceeds the model",))
