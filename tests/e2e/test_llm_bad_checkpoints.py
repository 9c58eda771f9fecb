"""Malformed Hugging Face checkpoints and batches through tests/unit/llm_driver.c: each fails cleanly
(exit 1, "kiln: error:", no crash or sanitizer report) with a message naming what is wrong: a
missing tensor, a wrong shape, a truncated or corrupt safetensors file, a bad or unsupported
config.json (a family kiln does not run, or a family's unsupported feature), a missing fused
projection, missing files, a broken shard index, a token outside the vocabulary, a position past
GPT-2's table. Also runs in the sanitizer build (the file name has "bad").
"""
import json
import os

import numpy as np
import pytest

from conftest import assert_error
from llm_checkpoints import make_gpt2, make_llama, run_driver, safetensors_bytes, write_checkpoint


def edit_config(d, **changes):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    with open(path, "w") as f:
        json.dump(cfg, f)


def load_fails(d, mentions, any_of=()):
    assert_error(run_driver(d, [[1, 2, 3]]), mentions=mentions, any_of=any_of)


def rewrite_weights(d, cfg, params, drop=(), reshape=None, dtype=None):
    """Rewrites a GPT-2 checkpoint (transformer. names) without `drop`, with `reshape` {name: shape}
    and `dtype` {name: safetensors dtype}."""
    tensors = {}
    for name, w in params.items():
        full = name if name.startswith("lm_head") else "transformer." + name
        if name in drop:
            continue
        if reshape and name in reshape:
            w = np.zeros(reshape[name])
        tensors[full] = (w, (dtype or {}).get(name, "F32"))
    write_checkpoint(d, cfg, tensors)


@pytest.fixture
def gpt2(tmp_path):
    d = tmp_path / "gpt2"
    cfg, params = make_gpt2(d)
    return d, cfg, params


def test_missing_tensor(gpt2):
    d, cfg, params = gpt2
    rewrite_weights(d, cfg, params, drop=["h.1.mlp.c_fc.bias"])
    load_fails(d, ["h.1.mlp.c_fc.bias", "missing"])


def test_missing_lm_head_when_untied(gpt2):
    d, cfg, params = gpt2
    edit_config(d, tie_word_embeddings=False)
    load_fails(d, ["lm_head.weight", "missing"])


def test_wrong_shape(gpt2):
    d, cfg, params = gpt2
    rewrite_weights(d, cfg, params, reshape={"h.0.attn.c_attn.weight": (64, 128)})
    load_fails(d, ["h.0.attn.c_attn.weight", "expected shape [64, 192]", "found [64, 128]"])


def test_wrong_shape_llama(tmp_path):
    d = tmp_path / "llama"
    cfg, _ = make_llama(d)
    edit_config(d, num_key_value_heads=4)  # the file's k_proj has 2 kv heads of 16
    load_fails(d, ["layers.0.self_attn.k_proj.weight", "expected shape [64, 64]", "found [32, 64]"])


def test_weight_of_integer_dtype(gpt2):
    d, cfg, params = gpt2
    rewrite_weights(d, cfg, params, dtype={"ln_f.weight": "I64"})
    load_fails(d, ["ln_f.weight", "int64", "F32, F16 or BF16"])


@pytest.mark.parametrize("keep", [4, 100, -1])
def test_truncated_safetensors(gpt2, keep):
    """Cut inside the length, inside the header, and one byte short of the end."""
    d, _, _ = gpt2
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep])
    load_fails(d, ["model.safetensors"], any_of=["truncated", "too short"])


def test_corrupt_safetensors_header(gpt2):
    d, _, _ = gpt2
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[8 + data.index(b'"dtype"', 8) - 8 + 10] = ord("X")  # the first dtype value: "F32" -> "X32"
    with open(path, "wb") as f:
        f.write(data)
    load_fails(d, ["model.safetensors", "X32"])


def test_overlapping_tensors(tmp_path):
    d = tmp_path / "m"
    make_gpt2(d)
    image = bytearray(safetensors_bytes({"a": (np.zeros(4), "F32"), "b": (np.zeros(4), "F32")}))
    text = image[8:].split(b"\x00")[0].decode().rstrip()
    text = text.replace("[16, 32]", "[8, 24]")
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(image[:8] + text.encode().ljust(len(image) - 8 - 32) + bytes(32))
    load_fails(d, ["overlap", "'a'", "'b'"])


@pytest.mark.parametrize("text, mentions", [
    ("{ \"model_type\": \"gpt2\", ", ["config.json", "invalid JSON"]),
    ("[1, 2]", ["config.json", "not a JSON object"]),
    ("", ["config.json"]),
])
def test_bad_config_json(gpt2, text, mentions):
    d, _, _ = gpt2
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(text)
    load_fails(d, mentions)


@pytest.mark.parametrize("changes, mentions", [
    (dict(model_type="mamba"), ["model_type", "mamba", "not supported"]),
    (dict(model_type=None), ["model_type", "missing"]),
    (dict(n_embd=None), ["n_embd", "missing"]),
    (dict(n_head=5), ["n_head"]),
    (dict(n_layer=-2), ["n_layer"]),
    (dict(activation_function="relu"), ["activation_function", "relu"]),
])
def test_bad_gpt2_config(gpt2, changes, mentions):
    d, _, _ = gpt2
    edit_config(d, **changes)
    load_fails(d, mentions)


@pytest.mark.parametrize("changes, mentions", [
    (dict(hidden_size=None), ["hidden_size", "missing"]),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), ["yarn", "not supported"]),
    (dict(rope_scaling={"rope_type": "linear"}), ["rope_scaling.factor", "missing"]),
    (dict(num_key_value_heads=3), ["num_key_value_heads"]),
    (dict(attention_bias=True), ["attention_bias"]),
    (dict(eos_token_id="x"), ["eos_token_id"]),
])
def test_bad_llama_config(tmp_path, changes, mentions):
    d = tmp_path / "llama"
    make_llama(d)
    edit_config(d, **changes)
    load_fails(d, mentions)


FAMILIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llm_families")


@pytest.mark.parametrize("family, changes, mentions", [
    ("gpt2", dict(model_type="falcon"), ["'falcon'", "not supported", "gpt2, llama, mistral, qwen2, phi3, gemma"]),
    ("qwen2", dict(use_sliding_window=True), ["use_sliding_window", "not supported"]),
    ("mistral_window", dict(sliding_window=0), ["sliding_window"]),
    ("phi3_partial", dict(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0]}),
     ["rope_parameters.short_factor", "list of 16 numbers"]),
    ("phi3_longrope", dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 32,
                                            "long_factor": [1.0] * 31 + [-2.0]}),
     ["rope_parameters.long_factor", "positive numbers"]),
    ("phi3_longrope", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0}), ["yarn", "not supported"]),
    ("phi3_partial", dict(partial_rotary_factor=0.01, rope_parameters=None), ["partial_rotary_factor", "rotary dims"]),
    ("phi3_partial", dict(rope_parameters={"rope_type": "default", "partial_rotary_factor": 1.5}),
     ["rope_parameters.partial_rotary_factor", "above 1"]),
    ("gemma", dict(hidden_act="relu"), ["hidden_act", "relu"]),
    ("llama2_untied", dict(hidden_act="gelu"), ["hidden_act", "gelu"]),  # exact GELU: only Gemma reads it as tanh
])
def test_bad_family_config(tmp_path, family, changes, mentions):
    """A fixture of tests/data/llm_families with a feature kiln does not run: refused by name."""
    d = tmp_path / family
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        (d / f).write_bytes(open(os.path.join(FAMILIES, family, f), "rb").read())
    edit_config(d, **changes)
    load_fails(d, mentions)


def test_missing_fused_projection(tmp_path):
    """A Phi-3 checkpoint without its fused qkv_proj names the tensor."""
    d = tmp_path / "phi3"
    make_llama(d)
    edit_config(d, model_type="phi3")
    load_fails(d, ["model.layers.0.self_attn.qkv_proj.weight", "missing"])


def test_missing_files(tmp_path):
    d = tmp_path / "ck"
    make_gpt2(d)
    os.remove(os.path.join(d, "model.safetensors"))
    load_fails(d, ["model.safetensors"])
    open(os.path.join(d, "pytorch_model.bin"), "wb").close()
    load_fails(d, ["pytorch_model.bin"])
    os.remove(os.path.join(d, "config.json"))
    load_fails(d, ["config.json"])
    load_fails(tmp_path / "nowhere", ["config.json"])


def test_broken_shard_index(tmp_path):
    d = tmp_path / "ck"
    make_llama(d, shards=2)
    index = os.path.join(d, "model.safetensors.index.json")
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    load_fails(d, ["model-00002-of-00002.safetensors"])
    with open(index, "w") as f:
        json.dump({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}, f)
    load_fails(d, ["model.norm.weight", "does not hold it"])
    with open(index, "w") as f:
        json.dump({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}, f)
    load_fails(d, ["../elsewhere.safetensors"])
    with open(index, "w") as f:
        json.dump({"metadata": {}}, f)
    load_fails(d, ["weight_map"])


def test_bad_batches(gpt2):
    d, _, _ = gpt2
    assert_error(run_driver(d, [[1, 300, 2]]), mentions=["token", "300", "vocabulary"])
    assert_error(run_driver(d, [[-1]]), mentions=["token", "-1", "vocabulary"])
    assert_error(run_driver(d, [list(range(65))], chunks=[60, 1]), mentions=["position 64", "64 positions"])
