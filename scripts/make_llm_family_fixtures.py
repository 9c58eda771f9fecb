#!/usr/bin/env python3
"""Writes the model-family fixtures of tests/unit/test_llm_families.c into tests/data/llm_families/:
one tiny random checkpoint per family and variant, made and run with Hugging Face transformers
(torch, FP32, eager attention), saved with save_pretrained in fp16 or bf16 (the reference runs the
same rounded weights in FP32).

Each fixture directory holds config.json, generation_config.json, model.safetensors and
  prompt.npy  int32 [P]        the prompt's token ids
  greedy.npy  int32 [G]        transformers' greedy continuation (generate, do_sample=False)
  logits.npy  float32 [P+G-1, vocab]  the prompt's logits (one forward over it), then the logits of
                               generate's steps 1..G-1 (row P-1+i predicts greedy[i])
A seed is kept only when the continuation has no near tie (top-two gap >= GAP x max|logit| at every
step), so that kiln's greedy tokens are well defined at the tolerance of a 16-bit forward.

Needs torch and transformers (the GPU host has them; CI does not: the fixtures are committed).
usage: make_llm_family_fixtures.py [OUTDIR [NAME...]] (default tests/data/llm_families, every fixture)
"""
import copy
import json
import os
import sys

import numpy as np
import torch
import transformers

PROMPT, GREEDY, VOCAB, GAP = 12, 8, 128, 0.04

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8, "rope_theta": 10000.0}


def common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
                bos_token_id=1, eos_token_id=2, pad_token_id=0)
    base.update(kw)
    return base


# name -> (config class, model class, config kwargs, save dtype)
FIXTURES = {
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel,
             dict(vocab_size=VOCAB, n_layer=2, n_embd=128, n_head=2, n_inner=128, n_positions=64, bos_token_id=1,
                  eos_token_id=2), torch.float16),
    "llama2_untied": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                      common(num_key_value_heads=2, tie_word_embeddings=False), torch.float16),
    "llama3_tied": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                    common(tie_word_embeddings=True, rope_scaling=LLAMA3, rope_theta=500000.0), torch.bfloat16),
    "llama_linear": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                     common(tie_word_embeddings=False, rope_scaling={"rope_type": "linear", "factor": 4.0}),
                     torch.bfloat16),
    # the prompt passes max_position_embeddings: the base grows with the context
    "llama_dynamic": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                      common(tie_word_embeddings=False, max_position_embeddings=8,
                             rope_scaling={"rope_type": "dynamic", "factor": 2.0}), torch.float16),
    # a window shorter than the prompt: every token past the sixth sees only the last six
    "mistral_window": (transformers.MistralConfig, transformers.MistralForCausalLM,
                       common(sliding_window=6, tie_word_embeddings=False), torch.bfloat16),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              common(tie_word_embeddings=True, rope_theta=1000000.0), torch.bfloat16),
    # fused qkv_proj and gate_up_proj; RoPE on half of each head
    "phi3_partial": (transformers.Phi3Config, transformers.Phi3ForCausalLM,
                     dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                          original_max_position_embeddings=64, partial_rotary_factor=0.5, bos_token_id=1,
                          eos_token_id=2, pad_token_id=0, tie_word_embeddings=False), torch.bfloat16),
    # LongRoPE (Phi-3.5, the 128k Phi-3s): the prompt passes original_max_position_embeddings, so the long
    # factors and the attention factor sqrt(1 + ln(32 / 8) / ln 8) apply
    "phi3_longrope": (transformers.Phi3Config, transformers.Phi3ForCausalLM,
                      dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                           original_max_position_embeddings=8, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                           tie_word_embeddings=False,
                           rope_scaling={"rope_type": "longrope",
                                         "short_factor": [1.0 + 0.02 * i for i in range(32)],
                                         "long_factor": [1.0 + 0.25 * i for i in range(32)]}), torch.bfloat16),
    "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM,
              common(head_dim=256, hidden_act="gelu_pytorch_tanh"), torch.bfloat16),
}


def randomize(model, seed, gemma):
    """Norm weights near 1 (Gemma's near 0: it scales by 1 + w), the rest N(0, 0.15)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            norm = ("ln" in name or "norm" in name) and name.endswith("weight")
            p.copy_((0.0 if gemma else 1.0) + 0.1 * noise if norm else 0.15 * noise)


def greedy_run(model, prompt):
    """(greedy ids, logits rows, smallest top-two gap / max|logit| over the continuation)."""
    ids = torch.tensor([prompt])
    eos, model.generation_config.eos_token_id = model.generation_config.eos_token_id, None  # never stop early
    with torch.no_grad():
        pre = model(ids).logits[0].float()
        out = model.generate(ids, max_new_tokens=GREEDY, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    model.generation_config.eos_token_id = eos
    steps = torch.stack([s[0].float() for s in out.logits])
    greedy = out.sequences[0, len(prompt):].tolist()
    rows = torch.cat([pre, steps[1:]]).numpy()
    gap = min(float((s.topk(2).values[0] - s.topk(2).values[1]) / s.abs().max()) for s in steps)
    assert greedy == steps.argmax(-1).tolist()
    assert np.abs(pre[-1].numpy() - steps[0].numpy()).max() <= 1e-4 * np.abs(steps[0].numpy()).max()
    return greedy, rows, gap


def make(name, outdir):
    cfg_cls, model_cls, kw, dtype = FIXTURES[name]
    for seed in range(1, 100):
        torch.manual_seed(seed)
        model = model_cls(cfg_cls(**kw, attn_implementation="eager"))
        randomize(model, seed, name.startswith("gemma"))
        with torch.no_grad():  # the reference runs the weights as the file stores them
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
        model.eval()
        prompt = [int(t) for t in np.random.default_rng(seed).integers(3, VOCAB, PROMPT)]
        greedy, rows, gap = greedy_run(model, prompt)
        if gap >= GAP:
            break
    else:
        raise SystemExit(f"{name}: no seed without a near tie")
    d = os.path.join(outdir, name)
    copy.deepcopy(model).to(dtype).save_pretrained(d)
    np.save(os.path.join(d, "prompt.npy"), np.array(prompt, dtype=np.int32))
    np.save(os.path.join(d, "greedy.npy"), np.array(greedy, dtype=np.int32))
    np.save(os.path.join(d, "logits.npy"), rows.astype(np.float32))
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name}: seed {seed}, greedy {greedy}, gap {gap:.3f}, {size // 1024} KB")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/llm_families"
    names = sys.argv[2:] or list(FIXTURES)  # fixtures to (re)make; the default: all
    torch.set_grad_enabled(False)
    for name in names:
        make(name, outdir)
    with open(os.path.join(outdir, "versions.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__}, f, indent=2)


if __name__ == "__main__":
    main()
