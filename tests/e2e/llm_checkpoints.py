"""Tiny random Hugging Face checkpoints for the LLM tests, written with NumPy alone (CI needs no torch
or safetensors package): the safetensors format by hand, config.json, and GPT-2 / Llama weights under
the names the hub uses. Also runs tests/unit/llm_driver.c (env KILN_LLM_DRIVER) and reads its logits.

Each make_* returns (cfg, params): the config dict as written and the weights as float64 arrays under
canonical names (GPT-2 without, Llama with the "model." prefix), holding exactly the values stored in
the file after rounding to its dtype, so a reference forward pass sees what kiln sees.
"""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "U8": np.uint8}


def bf16_bits(x):
    """float32 array -> uint16 bfloat16 bits, rounded to nearest even (as torch does)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_round(x):
    """x rounded to bfloat16 and back, as float32."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def round_to(x, dtype):
    """x as stored in a file of dtype ("F32", "F16", "BF16"), back in float64."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "F16":
        x = x.astype(np.float16).astype(np.float32)
    elif dtype == "BF16":
        x = bf16_round(x)
    return x.astype(np.float64)


def safetensors_bytes(tensors):
    """The safetensors image of {name: (array, dtype)}; dtype one of F32, F16, BF16, I64, U8."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (arr, dtype) in tensors.items():
        if dtype == "BF16":
            raw = bf16_bits(arr).tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=ST_DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_checkpoint(d, config, tensors, shards=1):
    """config.json and the tensors ({name: (array, dtype)}) into directory d: model.safetensors, or
    `shards` files and model.safetensors.index.json."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(safetensors_bytes(tensors))
        return
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        with open(os.path.join(d, fname), "wb") as f:
            f.write(safetensors_bytes({n: tensors[n] for n in part}))
        weight_map.update({n: fname for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


class _Weights:
    """Random weights, rounded to the file dtype, collected for the file and for the reference."""

    def __init__(self, rng, dtype):
        self.rng, self.dtype, self.file, self.ref = rng, dtype, {}, {}

    def add(self, file_name, ref_name, shape, scale=0.15, center=0.0):
        w = round_to(center + scale * self.rng.standard_normal(shape), self.dtype)
        self.file[file_name] = (w, self.dtype)
        self.ref[ref_name] = w
        return w


def make_gpt2(d, seed=0, dtype="F32", tied=True, prefix="transformer.", vocab=300, n_layer=2, n_embd=64, n_head=4,
              n_positions=64, n_inner=None, shards=1, buffers=False):
    """A GPT-2 checkpoint (Conv1D weights [in, out]). prefix "" gives the original hub names;
    buffers adds the non-weight attn.bias / attn.masked_bias buffers of old checkpoints."""
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": vocab, "n_layer": n_layer,
           "n_embd": n_embd, "n_head": n_head, "n_positions": n_positions, "n_ctx": n_positions, "n_inner": n_inner,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "bos_token_id": 0, "eos_token_id": 1,
           "tie_word_embeddings": tied}
    ff = n_inner or 4 * n_embd
    w = _Weights(np.random.default_rng(seed), dtype)
    w.add(prefix + "wte.weight", "wte.weight", (vocab, n_embd), 0.3)
    w.add(prefix + "wpe.weight", "wpe.weight", (n_positions, n_embd), 0.1)
    for i in range(n_layer):
        p, r = f"{prefix}h.{i}.", f"h.{i}."
        w.add(p + "ln_1.weight", r + "ln_1.weight", (n_embd,), 0.1, 1.0)
        w.add(p + "ln_1.bias", r + "ln_1.bias", (n_embd,), 0.1)
        w.add(p + "attn.c_attn.weight", r + "attn.c_attn.weight", (n_embd, 3 * n_embd))
        w.add(p + "attn.c_attn.bias", r + "attn.c_attn.bias", (3 * n_embd,), 0.1)
        w.add(p + "attn.c_proj.weight", r + "attn.c_proj.weight", (n_embd, n_embd))
        w.add(p + "attn.c_proj.bias", r + "attn.c_proj.bias", (n_embd,), 0.1)
        w.add(p + "ln_2.weight", r + "ln_2.weight", (n_embd,), 0.1, 1.0)
        w.add(p + "ln_2.bias", r + "ln_2.bias", (n_embd,), 0.1)
        w.add(p + "mlp.c_fc.weight", r + "mlp.c_fc.weight", (n_embd, ff))
        w.add(p + "mlp.c_fc.bias", r + "mlp.c_fc.bias", (ff,), 0.1)
        w.add(p + "mlp.c_proj.weight", r + "mlp.c_proj.weight", (ff, n_embd), 0.1)
        w.add(p + "mlp.c_proj.bias", r + "mlp.c_proj.bias", (n_embd,), 0.1)
        if buffers:
            mask = np.tril(np.ones((n_positions, n_positions), dtype=np.uint8))[None, None]
            w.file[p + "attn.bias"] = (mask, "U8")
            w.file[p + "attn.masked_bias"] = (np.array(-1e4, dtype=np.float32), "F32")
    w.add(prefix + "ln_f.weight", "ln_f.weight", (n_embd,), 0.1, 1.0)
    w.add(prefix + "ln_f.bias", "ln_f.bias", (n_embd,), 0.1)
    if not tied:
        w.add("lm_head.weight", "lm_head.weight", (vocab, n_embd), 0.3)
    write_checkpoint(d, cfg, w.file, shards)
    return cfg, w.ref


def make_llama(d, seed=0, dtype="F32", tied=False, rope_scaling=None, vocab=300, n_layer=2, hidden=64, n_head=4,
               n_kv_head=2, head_dim=None, inter=96, max_pos=256, rope_theta=10000.0, shards=1, eos=2):
    """A Llama checkpoint (nn.Linear weights [out, in]) with grouped-query attention."""
    hd = head_dim or hidden // n_head
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": n_layer, "num_attention_heads": n_head,
           "num_key_value_heads": n_kv_head, "max_position_embeddings": max_pos, "rms_norm_eps": 1e-5,
           "rope_theta": rope_theta, "rope_scaling": rope_scaling, "hidden_act": "silu", "tie_word_embeddings": tied,
           "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": eos}
    if head_dim:
        cfg["head_dim"] = head_dim
    w = _Weights(np.random.default_rng(seed), dtype)
    w.add("model.embed_tokens.weight", "model.embed_tokens.weight", (vocab, hidden), 0.5)
    for i in range(n_layer):
        p = f"model.layers.{i}."
        w.add(p + "input_layernorm.weight", p + "input_layernorm.weight", (hidden,), 0.1, 1.0)
        w.add(p + "self_attn.q_proj.weight", p + "self_attn.q_proj.weight", (n_head * hd, hidden), 0.2)
        w.add(p + "self_attn.k_proj.weight", p + "self_attn.k_proj.weight", (n_kv_head * hd, hidden), 0.2)
        w.add(p + "self_attn.v_proj.weight", p + "self_attn.v_proj.weight", (n_kv_head * hd, hidden))
        w.add(p + "self_attn.o_proj.weight", p + "self_attn.o_proj.weight", (hidden, n_head * hd))
        w.add(p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight", (hidden,), 0.1, 1.0)
        w.add(p + "mlp.gate_proj.weight", p + "mlp.gate_proj.weight", (inter, hidden))
        w.add(p + "mlp.up_proj.weight", p + "mlp.up_proj.weight", (inter, hidden))
        w.add(p + "mlp.down_proj.weight", p + "mlp.down_proj.weight", (hidden, inter), 0.1)
    w.add("model.norm.weight", "model.norm.weight", (hidden,), 0.1, 1.0)
    if not tied:
        w.add("lm_head.weight", "lm_head.weight", (vocab, hidden), 0.3)
    write_checkpoint(d, cfg, w.file, shards)
    return cfg, w.ref


def driver():
    """Path of tests/unit/llm_driver.c's binary (env KILN_LLM_DRIVER); fails the test when unset."""
    path = os.environ.get("KILN_LLM_DRIVER")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("KILN_LLM_DRIVER is not set to the built llm_driver (tests/CMakeLists.txt sets it under ctest)")
    return os.path.abspath(path)


def run_driver(ckpt, seqs=(), chunks=None, block_size=4, kv_dtype="f32", scramble=True, last=False, out=None):
    """Runs llm_driver; returns the CompletedProcess."""
    args = [driver(), str(ckpt)]
    for s in seqs:
        args += ["--seq", ",".join(map(str, s))]
    if chunks:
        args += ["--chunks", ",".join(map(str, chunks))]
    args += ["--block-size", str(block_size), "--kv-dtype", kv_dtype]
    if scramble:
        args.append("--scramble")
    if last:
        args.append("--last")
    if out:
        args += ["--out", str(out)]
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} did not finish within 300 s")


def kiln_logits(ckpt, tmp_path, seqs, **kw):
    """kiln's logits for seqs: a list with one [len, vocab] array per sequence."""
    out = tmp_path / f"logits_{len(os.listdir(tmp_path))}.npy"
    proc = run_driver(ckpt, seqs, out=out, **kw)
    assert proc.returncode == 0, f"llm_driver failed (exit {proc.returncode}):\n{proc.stderr}"
    logits = np.load(out)
    rows = np.cumsum([0] + [len(s) for s in seqs])
    return [logits[a:b] for a, b in zip(rows[:-1], rows[1:])]
