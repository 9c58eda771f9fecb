#!/usr/bin/env python3
"""make_llm_checkpoint.py — writes a Llama-shaped Hugging Face checkpoint with random weights for the
LLM serving benchmark (bench/llm_serve_sweep.sh): config.json, model.safetensors (bf16 or fp16) and a
byte-level BPE tokenizer.json whose vocabulary covers every id of the model.

Weights: embeddings with standard deviation 1, matrices [out, in] with 1/sqrt(in) (as kiln's own
random models, src/llm/llm_random.c), norm weights 1 +- 0.1, so the logits stay finite. They are drawn
on the GPU with PyTorch when it has one (the GPU host), else with NumPy, and written one tensor at a
time, so the writer never holds more than one tensor (2.1 GB for Llama-3-8B's embedding).

Tokenizer: the 256 byte tokens, then merges that make every word of `kiln load`'s synthetic prompts
(src/load/prompts.c, read at run time) one token with and without its leading space, then filler
tokens up to the regular vocabulary, then special tokens (<|begin_of_text|>, <|end_of_text|>,
<|eot_id|>, reserved) at the top, as Llama 3 has them. A prompt of N synthetic words is N tokens (no
BOS is added), and every id the model can generate decodes to text.

usage: make_llm_checkpoint.py OUT_DIR [--shape llama3-8b|tiny-llama] [--dtype bf16|fp16] [--seed N]
"""
import argparse
import json
import os
import re
import struct
import sys
import time

import numpy as np

SHAPES = {
    # layers, hidden, heads, kv heads, intermediate, vocab, max positions, rope theta
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ff=14336, vocab=128256, max_pos=8192, theta=500000.0),
    "tiny-llama": dict(layers=2, hidden=128, heads=2, kv_heads=1, ff=384, vocab=2048, max_pos=2048, theta=10000.0),
}
N_SPECIAL = 256  # Llama 3: ids 128000.. are special; the tiny shape keeps the same count
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prompt_words(root=ROOT):
    """The WORDS list of kiln load's synthetic prompts."""
    src = open(os.path.join(root, "src", "load", "prompts.c")).read()
    m = re.search(r"WORDS\[\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        sys.exit("make_llm_checkpoint: no WORDS list in src/load/prompts.c")
    return re.findall(r'"([^"]+)"', m.group(1))


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe(symbols, ranks):
    """symbols merged by the lowest-ranked adjacent pair until none applies."""
    while len(symbols) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
        rank, i = min(pairs)
        if rank == 1 << 30:
            break
        symbols = symbols[:i] + [symbols[i] + symbols[i + 1]] + symbols[i + 2:]
    return symbols


def tokenizer_json(vocab_size, words):
    """The tokenizer.json document: byte-level BPE, one token per word, vocab_size ids in all."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    merges, ranks = [], {}
    for w in words:
        for piece in (w, " " + w):
            text = "".join(b2u[b] for b in piece.encode())
            # Each merge added ranks after every earlier one, so earlier words still merge as before.
            while len(syms := bpe([*text], ranks)) > 1:
                pair = (syms[0], syms[1])
                ranks[pair] = len(merges)
                merges.append(" ".join(pair))
                vocab.setdefault(pair[0] + pair[1], len(vocab))
    regular = vocab_size - N_SPECIAL
    if len(vocab) > regular:
        sys.exit(f"make_llm_checkpoint: vocab {vocab_size} is too small for {len(vocab)} tokens + {N_SPECIAL} specials")
    for i in range(regular - len(vocab)):
        vocab[f"{b2u[32]}w{i}"] = len(vocab)  # " w<i>": unreachable by merges, decodable
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(N_SPECIAL - 2)]
    names[9] = "<|eot_id|>"
    added = [{"id": regular + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(names)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def tensors(s):
    """(name, shape, center, half-width of the uniform draw) of every weight, in file order."""
    d, qd, kvd, ff = s["hidden"], s["hidden"], s["kv_heads"] * (s["hidden"] // s["heads"]), s["ff"]
    u = lambda cols: (3.0 / cols) ** 0.5  # uniform half-width for standard deviation 1/sqrt(cols)
    out = [("model.embed_tokens.weight", (s["vocab"], d), 0.0, 3.0 ** 0.5)]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,), 1.0, 0.1),
                (p + "self_attn.q_proj.weight", (qd, d), 0.0, u(d)),
                (p + "self_attn.k_proj.weight", (kvd, d), 0.0, u(d)),
                (p + "self_attn.v_proj.weight", (kvd, d), 0.0, u(d)),
                (p + "self_attn.o_proj.weight", (d, qd), 0.0, u(qd)),
                (p + "post_attention_layernorm.weight", (d,), 1.0, 0.1),
                (p + "mlp.gate_proj.weight", (ff, d), 0.0, u(d)),
                (p + "mlp.up_proj.weight", (ff, d), 0.0, u(d)),
                (p + "mlp.down_proj.weight", (d, ff), 0.0, u(ff))]
    return out + [("model.norm.weight", (d,), 1.0, 0.1), ("lm_head.weight", (s["vocab"], d), 0.0, u(d))]


class Drawer:
    """16-bit random arrays (as uint16 bits): PyTorch on the GPU when there is one, else NumPy."""

    def __init__(self, dtype, seed):
        self.dtype, self.torch = dtype, None
        try:
            import torch
            if torch.cuda.is_available():
                self.torch, self.gen = torch, torch.Generator(device="cuda").manual_seed(seed)
        except ImportError:
            pass
        self.rng = np.random.default_rng(seed)

    def draw(self, n, center, half):
        if self.torch:
            t = self.torch
            x = (t.rand(n, device="cuda", generator=self.gen) * 2 - 1) * half + center
            x = x.to(t.bfloat16 if self.dtype == "bf16" else t.float16)
            return x.view(t.int16).cpu().numpy().view(np.uint16)
        x = ((self.rng.random(n, dtype=np.float32) * 2 - 1) * half + center).astype(np.float32)
        if self.dtype == "fp16":
            return x.astype(np.float16).view(np.uint16)
        b = x.view(np.uint32).astype(np.uint64)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def write_safetensors(path, specs, drawer, st_dtype):
    """The safetensors file: header first (offsets from the shapes), then each tensor as drawn."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _, _ in specs:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, shape, center, half in specs:
            drawer.draw(int(np.prod(shape)), center, half).tofile(f)
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    s = SHAPES[a.shape]
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["hidden"],
              "intermediate_size": s["ff"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
              "num_key_value_heads": s["kv_heads"], "vocab_size": s["vocab"], "max_position_embeddings": s["max_pos"],
              "rms_norm_eps": 1e-5, "rope_theta": s["theta"], "hidden_act": "silu", "tie_word_embeddings": False,
              "bos_token_id": s["vocab"] - N_SPECIAL, "eos_token_id": s["vocab"] - N_SPECIAL + 1,
              "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float16"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(s["vocab"], prompt_words()), f, ensure_ascii=False)
    drawer = Drawer(a.dtype, a.seed)
    nbytes = write_safetensors(os.path.join(a.out, "model.safetensors"), tensors(s), drawer,
                               "BF16" if a.dtype == "bf16" else "F16")
    print(f"wrote {a.out}: {a.shape} {a.dtype}, {nbytes / 1e9:.2f} GB of weights drawn with "
          f"{'PyTorch on the GPU' if drawer.torch else 'NumPy'}, in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
