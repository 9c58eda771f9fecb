"""kiln's logits against Hugging Face transformers itself (CPU, FP32) on tiny random GPT-2 and Llama
models saved with save_pretrained: the proof that kiln reads checkpoints and computes the forward
pass as transformers does (names, Conv1D layout, tying, GQA, RoPE scalings, transformers 5's
rope_parameters). Skipped where torch / transformers are not installed (CI's venv).

Run:  KILN_LLM_DRIVER=build/tests/llm_driver python -m pytest tests/e2e/test_llm_vs_hf.py
"""
import copy

import numpy as np
import pytest

from llm_checkpoints import kiln_logits
from llm_reference import rel_err

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOL = 1e-4


def randomize(model, seed):
    """Weights of a useful scale (the default init gives near-zero logits): norms near 1, the rest
    N(0, 0.15)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if ("ln" in name or "norm" in name) and name.endswith("weight") else 0.15 * noise)
    return model.eval()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def gpt2(tied):
    cfg = transformers.GPT2Config(vocab_size=300, n_layer=2, n_embd=64, n_head=4, n_positions=64, bos_token_id=0,
                                  eos_token_id=0, tie_word_embeddings=tied)
    return transformers.GPT2LMHeadModel(cfg)


def llama(rope, tied=False, kv_heads=2):
    cfg = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=32,
                                   rope_scaling=rope, tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(cfg)


MODELS = {
    "gpt2_tied": lambda: gpt2(True),
    "gpt2_untied": lambda: gpt2(False),
    "llama_plain_tied": lambda: llama(None, tied=True),
    "llama_llama3": lambda: llama({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "llama_linear": lambda: llama({"rope_type": "linear", "factor": 3.0}, kv_heads=1),
    "llama_dynamic": lambda: llama({"rope_type": "dynamic", "factor": 2.0}),
}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_logits_match_transformers(tmp_path, name, dtype):
    torch.manual_seed(0)
    model = randomize(MODELS[name](), seed=1)
    if dtype == "bfloat16":  # saved in BF16; the reference runs the rounded weights in FP32
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    # a copy is converted and saved: converting the model itself would round its RoPE frequencies too
    copy.deepcopy(model).to(getattr(torch, dtype)).save_pretrained(tmp_path / "m")
    # the dynamic model's prompt passes max_position_embeddings (32), so its RoPE base grows
    ids = [int(t) for t in np.random.default_rng(2).integers(0, 300, 40 if "dynamic" in name else 23)]
    want = hf_logits(model, ids)
    (got,) = kiln_logits(tmp_path / "m", tmp_path, [ids])
    err = rel_err(got, want)
    print(f"{name} {dtype}: max relative logit error vs transformers {err:.2e}")
    assert err <= TOL
    if "dynamic" not in name:  # decode token by token through the paged cache: same logits
        (got,) = kiln_logits(tmp_path / "m", tmp_path, [ids], chunks=[5, 1])
        assert rel_err(got, want) <= TOL
