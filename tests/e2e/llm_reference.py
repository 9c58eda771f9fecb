"""NumPy reference forward passes (float64) of GPT-2 and Llama, written from the formulas of Hugging
Face transformers' modeling_gpt2.py / modeling_llama.py / modeling_rope_utils.py, over a whole
sequence at once with a causal mask. The weights are llm_checkpoints.make_*'s `params`.
"""
import math

import numpy as np

from llm_checkpoints import bf16_round


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v):
    """q [H, T, hd], k/v [H, T, hd] -> [T, H * hd]; softmax(q k^T / sqrt(hd)) v, causal."""
    t, hd = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return (s @ v).transpose(1, 0, 2).reshape(t, -1)


def gpt2_forward(cfg, p, ids):
    """Logits [T, vocab] of GPT2LMHeadModel for token ids at positions 0..T-1."""
    ids = np.asarray(ids)
    t, d, nh = len(ids), cfg["n_embd"], cfg["n_head"]
    eps = cfg["layer_norm_epsilon"]
    x = p["wte.weight"][ids] + p["wpe.weight"][np.arange(t)]
    for i in range(cfg["n_layer"]):
        r = f"h.{i}."
        h = layer_norm(x, p[r + "ln_1.weight"], p[r + "ln_1.bias"], eps)
        qkv = h @ p[r + "attn.c_attn.weight"] + p[r + "attn.c_attn.bias"]  # Conv1D: x W + b, W [in, out]
        q, k, v = (a.reshape(t, nh, d // nh).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        x = x + causal_attention(q, k, v) @ p[r + "attn.c_proj.weight"] + p[r + "attn.c_proj.bias"]
        h = layer_norm(x, p[r + "ln_2.weight"], p[r + "ln_2.bias"], eps)
        m = gelu_new(h @ p[r + "mlp.c_fc.weight"] + p[r + "mlp.c_fc.bias"])
        x = x + m @ p[r + "mlp.c_proj.weight"] + p[r + "mlp.c_proj.bias"]
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    return x @ (p["wte.weight"] if cfg.get("tie_word_embeddings", True) else p["lm_head.weight"]).T


def rope_inv_freq(cfg, head_dim, seq_len):
    """transformers' inverse frequencies for the config's rope_scaling (None, linear, dynamic, llama3)."""
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    max_pos = cfg["max_position_embeddings"]
    if kind == "dynamic":
        n = max(seq_len, max_pos)
        base = base * ((rs["factor"] * n / max_pos) - (rs["factor"] - 1)) ** (head_dim / (head_dim - 2))
    inv = 1.0 / base ** (np.arange(0, head_dim, 2) / head_dim)
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs.get("original_max_position_embeddings", max_pos)
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        inv = np.where(medium, smoothed, scaled)
    return inv


def apply_rope(x, cos, sin):
    """x [H, T, hd] rotated with rotate_half: x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def llama_forward(cfg, p, ids, kv_dtype=None):
    """Logits [T, vocab] of LlamaForCausalLM for token ids at positions 0..T-1. kv_dtype "F16" or
    "BF16" rounds keys (after RoPE) and values as a cache of that dtype stores them."""
    ids = np.asarray(ids)
    t, d = len(ids), cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or d // nh
    eps = cfg["rms_norm_eps"]
    freqs = np.arange(t)[:, None] * rope_inv_freq(cfg, hd, t)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)

    def cache_round(a):
        if kv_dtype == "F16":
            return a.astype(np.float32).astype(np.float16).astype(np.float64)
        if kv_dtype == "BF16":
            return bf16_round(a.astype(np.float32)).astype(np.float64)
        return a

    x = p["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        r = f"model.layers.{i}."
        h = rms_norm(x, p[r + "input_layernorm.weight"], eps)
        q = (h @ p[r + "self_attn.q_proj.weight"].T).reshape(t, nh, hd).transpose(1, 0, 2)
        k = (h @ p[r + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        v = (h @ p[r + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        q, k = apply_rope(q, cos, sin), cache_round(apply_rope(k, cos, sin))
        v = cache_round(v)
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)  # kv head = q head // group
        x = x + causal_attention(q, k, v) @ p[r + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[r + "post_attention_layernorm.weight"], eps)
        g, u = h @ p[r + "mlp.gate_proj.weight"].T, h @ p[r + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ p[r + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T


def rel_err(got, want):
    """max |got - want| relative to the scale of the logits (max |want|)."""
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
