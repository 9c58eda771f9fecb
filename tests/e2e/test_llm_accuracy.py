"""kiln's LLM accuracy tools: `kiln perplexity` against transformers' published sliding-window method
(computed here over a float64 NumPy forward of the same checkpoint, and over transformers itself where
torch is installed), `kiln compare --llm` (a model against itself and against a different one), and
weight-only INT8 engines (`kiln build --hf --weights int8`: inspect, perplexity and agreement against
fp32, refused on cuda). The checkpoints are tiny random GPT-2s with the tokenizer of models/kjv-gpt2.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_llm_accuracy.py
"""
import math
import os
import re
import shutil

import numpy as np
import pytest

from conftest import assert_error, assert_ok, run_kiln
from llm_checkpoints import make_gpt2
from llm_reference import gpt2_forward

KJV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv-gpt2")
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
        "the light from the darkness. And God called the light Day, and the darkness he called Night. And the "
        "evening and the morning were the first day. And God said, Let there be a firmament in the midst of the "
        "waters, and let it divide the waters from the waters.")
PROMPTS = ["In the beginning", "And God said", "And the earth was", "Let there be light", "And the evening",
           "the face of the deep"]
PPL_LINE = re.compile(r"perplexity ([0-9.]+) \(mean NLL ([0-9.]+) nats over (\d+) scored tokens; (\d+) tokens, "
                      r"(\d+) windows")


def checkpoint(d, seed):
    """A tiny GPT-2 (vocabulary of models/kjv-gpt2, context 64) with the kjv tokenizer; its config and
    float64 reference weights."""
    cfg, params = make_gpt2(str(d), seed=seed, vocab=8192, n_layer=2, n_embd=64, n_head=4, n_positions=64)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(KJV, name), str(d))
    return cfg, params


def guide_perplexity(logits_of, ids, ctx, stride):
    """transformers' "Perplexity of fixed-length models" loop; logits_of(window ids) -> [T, vocab]."""
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):
        end = min(begin + ctx, len(ids))
        trg_len = end - prev_end
        window = ids[begin:end]
        logits = np.asarray(logits_of(window), dtype=np.float64)
        labels = np.array(window)
        labels[:-trg_len] = -100
        shift_logits, shift_labels = logits[:-1], labels[1:]
        valid = shift_labels != -100
        lse = np.log(np.exp(shift_logits - shift_logits.max(-1, keepdims=True)).sum(-1)) + shift_logits.max(-1)
        nll = lse[valid] - shift_logits[valid, shift_labels[valid]]
        num_loss_tokens = int((labels != -100).sum()) - 1
        if len(nll):  # a last window of one token has no loss (torch's mean of nothing is nan, times 0)
            nll_sum += nll.mean() * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end = end
        if end == len(ids):
            break
    return math.exp(nll_sum / n_tokens), n_tokens


def kiln_perplexity(kiln, model, text_file, *args):
    p = run_kiln(kiln, "perplexity", model, "--text", text_file, *args)
    assert_ok(p)
    m = PPL_LINE.search(p.stdout)
    assert m, p.stdout
    return float(m.group(1)), int(m.group(3)), int(m.group(4))


def kjv_ids(text):
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(os.path.join(KJV, "tokenizer.json")).encode(text).ids


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return str(path)


@pytest.mark.parametrize("ctx,stride", [(64, 64), (32, 16), (40, 7)])
def test_perplexity_matches_the_method_over_a_float64_forward(kiln, tmp_path, text_file, ctx, stride):
    cfg, params = checkpoint(tmp_path / "ck", seed=3)
    ids = kjv_ids(TEXT)
    assert len(ids) > 2 * ctx
    want, want_n = guide_perplexity(lambda w: gpt2_forward(cfg, params, w), ids, ctx, stride)
    got, scored, n = kiln_perplexity(kiln, str(tmp_path / "ck"), text_file, "--ctx", ctx, "--stride", stride)
    assert n == len(ids) and scored == want_n
    assert abs(got - want) <= 1e-3 * want, (got, want)


def test_perplexity_with_a_last_window_of_one_token(kiln, tmp_path, text_file):
    cfg, params = checkpoint(tmp_path / "ck", seed=9)
    ids = kjv_ids(TEXT)
    ctx = next(s for s in range(16, 65) if len(ids) % s == 1)
    want, want_n = guide_perplexity(lambda w: gpt2_forward(cfg, params, w), ids, ctx, ctx)
    got, scored, _ = kiln_perplexity(kiln, str(tmp_path / "ck"), text_file, "--ctx", ctx)
    assert scored == want_n and math.isfinite(got)
    assert abs(got - want) <= 1e-3 * want, (got, want)


def test_perplexity_matches_transformers(kiln, tmp_path, text_file):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    checkpoint(tmp_path / "ck", seed=4)
    model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "ck"), torch_dtype=torch.float32).eval()
    ids = kjv_ids(TEXT)

    def logits_of(window):
        with torch.no_grad():
            return model(torch.tensor([window])).logits[0].double().numpy()

    want, _ = guide_perplexity(logits_of, ids, 32, 16)
    got, _, _ = kiln_perplexity(kiln, str(tmp_path / "ck"), text_file, "--ctx", 32, "--stride", 16)
    assert abs(got - want) <= 1e-3 * want, (got, want)


def compare(kiln, a, b, prompts_file, n):
    p = run_kiln(kiln, "compare", "--llm", a, b, "--prompts", prompts_file, "--max-tokens", n)
    assert_ok(p)
    ident = re.search(r"identical sequences: (\d+) / (\d+)", p.stdout)
    prefix = re.search(r"mean matching prefix: ([0-9.]+) tokens", p.stdout)
    first = re.search(r"first-token agreement: (\d+) / (\d+)", p.stdout)
    assert ident and prefix and first, p.stdout
    return int(ident.group(1)), float(prefix.group(1)), int(first.group(1)), int(ident.group(2))


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n\n")
    return str(path)


def test_compare_llm_itself_and_a_different_model(kiln, tmp_path, prompts_file):
    checkpoint(tmp_path / "a", seed=5)
    checkpoint(tmp_path / "b", seed=6)
    assert compare(kiln, str(tmp_path / "a"), str(tmp_path / "a"), prompts_file, 12) == (6, 12.0, 6, 6)
    ident, prefix, first, n = compare(kiln, str(tmp_path / "a"), str(tmp_path / "b"), prompts_file, 12)
    assert n == 6 and ident < 6 and prefix < 12 and first < 6


def build(kiln, ck, out, *args):
    p = run_kiln(kiln, "build", "--hf", ck, "-o", out, *args)
    assert_ok(p)
    return p


def test_int8_engine_inspect_perplexity_and_agreement(kiln, tmp_path, text_file, prompts_file):
    checkpoint(tmp_path / "ck", seed=7)
    fp32, int8, keep = (str(tmp_path / f) for f in ("fp32.kiln", "int8.kiln", "keep.kiln"))
    build(kiln, str(tmp_path / "ck"), fp32, "--fp32")
    assert "int8 weights" in build(kiln, str(tmp_path / "ck"), int8, "--weights", "int8").stdout
    build(kiln, str(tmp_path / "ck"), keep, "--weights", "int8", "--weights-skip", "lm_head,embed")
    assert os.path.getsize(int8) < 0.5 * os.path.getsize(fp32) < os.path.getsize(keep)
    p = run_kiln(kiln, "inspect", int8)
    assert_ok(p)
    assert re.search(r"layers\.0\.qkv\.weight\s+int8", p.stdout) and "layers.0.qkv.weight.scale" in p.stdout, p.stdout
    p = run_kiln(kiln, "inspect", keep)
    assert re.search(r"tok_emb\s+float32", p.stdout) and re.search(r"weights by format:.* int8 [0-9.]+ MB", p.stdout), p.stdout
    ref, _, _ = kiln_perplexity(kiln, fp32, text_file, "--ctx", 64)
    for engine in (int8, keep):
        got, _, _ = kiln_perplexity(kiln, engine, text_file, "--ctx", 64)
        assert abs(got - ref) <= 0.01 * ref, (engine, got, ref)
    _, _, first, n = compare(kiln, fp32, int8, prompts_file, 8)
    assert first >= n - 1


def test_int8_engine_opens_for_cuda(kiln, tmp_path, text_file):
    """An INT8 engine is no longer refused for cuda: it opens for the device, and without a GPU (or a
    CUDA build) the only error is the missing device (tests/gpu/llm_accuracy_cuda.py runs it)."""
    checkpoint(tmp_path / "ck", seed=8)
    engine = str(tmp_path / "q.kiln")
    build(kiln, str(tmp_path / "ck"), engine, "--weights", "int8")
    p = run_kiln(kiln, "perplexity", engine, "--text", text_file, "--target", "cuda")
    if p.returncode == 0:
        assert "perplexity" in p.stdout, p.stdout
        return
    assert_error(p, any_of=["without the cuda backend", "no cuda device"])
    assert "int8" not in p.stderr.lower(), p.stderr
