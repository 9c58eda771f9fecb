"""kiln_llm_forward (src/llm/) against a NumPy reference on tiny random GPT-2 and Llama checkpoints
written at test time (F32 / F16 / BF16 weights, tied and untied, GQA, RoPE scalings, sharded and
hub-style names), and the paged KV cache: a prompt run in one step, in uneven chunks, token by token,
and batched with another sequence gives the same logits, with small scrambled cache blocks. Runs
through tests/unit/llm_driver.c (env KILN_LLM_DRIVER).

Run:  KILN_LLM_DRIVER=build/tests/llm_driver python -m pytest tests/e2e/test_llm_forward.py
"""
import numpy as np
import pytest

from llm_checkpoints import kiln_logits, make_gpt2, make_llama, run_driver
from llm_reference import gpt2_forward, llama_forward, rel_err

TOL = 1e-4  # max |kiln - reference| / max |reference| with an FP32 cache
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def prompt(n, vocab=300, seed=1):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


# (name, maker, kwargs) of every checkpoint variant
VARIANTS = [
    ("gpt2_f32_tied", make_gpt2, dict(dtype="F32")),
    ("gpt2_f16_untied_hubnames", make_gpt2, dict(dtype="F16", tied=False, prefix="", buffers=True, seed=3)),
    ("gpt2_bf16_sharded", make_gpt2, dict(dtype="BF16", shards=3, n_inner=80, seed=4)),
    ("llama_f32_tied", make_llama, dict(dtype="F32", tied=True)),
    ("llama_bf16_llama3", make_llama, dict(dtype="BF16", rope_scaling=LLAMA3, seed=5)),
    ("llama_f16_linear_sharded", make_llama, dict(dtype="F16", rope_scaling={"type": "linear", "factor": 2.0},
                                                  shards=2, seed=6)),
    ("llama_mha_headdim", make_llama, dict(n_kv_head=4, head_dim=24, rope_theta=500000.0, seed=7)),
]


def reference(cfg, params, ids, **kw):
    return (gpt2_forward if cfg["model_type"] == "gpt2" else llama_forward)(cfg, params, ids, **kw)


@pytest.fixture(scope="module", params=VARIANTS, ids=[v[0] for v in VARIANTS])
def ckpt(request, tmp_path_factory):
    name, maker, kw = request.param
    d = tmp_path_factory.mktemp(name)
    cfg, params = maker(d, **kw)
    return d, cfg, params


def test_forward_matches_reference(ckpt, tmp_path):
    d, cfg, params = ckpt
    ids = prompt(21)
    (got,) = kiln_logits(d, tmp_path, [ids])
    err = rel_err(got, reference(cfg, params, ids))
    print(f"{d.name}: max relative logit error {err:.2e}")
    assert err <= TOL


def test_chunked_and_decode_match_one_step(ckpt, tmp_path):
    """One step, uneven chunks, token-by-token decode, and two sequences batched together: same
    logits, all matching the reference, with block_size 4 and scrambled blocks."""
    d, cfg, params = ckpt
    a, b = prompt(19, seed=2), prompt(11, seed=3)
    want_a, want_b = reference(cfg, params, a), reference(cfg, params, b)
    (one,) = kiln_logits(d, tmp_path, [a])
    for chunks in ([3, 1, 5, 2], [1]):
        (got,) = kiln_logits(d, tmp_path, [a], chunks=chunks)
        assert rel_err(got, one) <= 1e-5, f"chunks {chunks} differ from one step"
        assert rel_err(got, want_a) <= TOL
    got_a, got_b = kiln_logits(d, tmp_path, [a, b], chunks=[4, 2, 1])
    assert rel_err(got_a, want_a) <= TOL and rel_err(got_b, want_b) <= TOL


def test_last_logits_only(ckpt, tmp_path):
    """all_logits false: each step gives one row per sequence, its last new token's."""
    d, cfg, params = ckpt
    a, b = prompt(10, seed=4), prompt(7, seed=5)
    got_a, got_b = kiln_logits(d, tmp_path, [a, b], chunks=[3], last=True)
    for got, ids in ((got_a, a), (got_b, b)):
        want = reference(cfg, params, ids)
        ends = [min(i, len(ids)) - 1 for i in range(3, len(ids) + 3, 3)]
        assert not np.isnan(got[ends]).any()
        assert np.isnan(np.delete(got, ends, axis=0)).all()
        assert rel_err(got[ends], want[ends]) <= TOL


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
def test_half_precision_cache(tmp_path, kv_dtype):
    """A F16 / BF16 cache: keys and values rounded as stored, matching a reference that rounds them
    the same way (tolerance for the rare rounding that lands the other way), chunked or not."""
    cfg, params = make_llama(tmp_path / "m", rope_scaling=LLAMA3, seed=8)
    ids = prompt(17, seed=6)
    want = llama_forward(cfg, params, ids, kv_dtype=kv_dtype.upper())
    for chunks in (None, [5, 1]):
        (got,) = kiln_logits(tmp_path / "m", tmp_path, [ids], kv_dtype=kv_dtype, chunks=chunks)
        err = rel_err(got, want)
        print(f"{kv_dtype} cache, chunks {chunks}: max relative logit error {err:.2e}")
        assert err <= (1e-4 if kv_dtype == "f16" else 2e-3)


def test_dynamic_rope_beyond_max_positions(tmp_path):
    """Dynamic NTK scaling: a prompt longer than max_position_embeddings in one step uses the grown
    base (transformers computes it from the step's longest sequence)."""
    cfg, params = make_llama(tmp_path / "m", rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_pos=16, seed=9)
    ids = prompt(24, seed=7)
    (got,) = kiln_logits(tmp_path / "m", tmp_path, [ids])
    assert rel_err(got, llama_forward(cfg, params, ids)) <= TOL
    short = ids[:12]  # within max_position_embeddings, chunking changes nothing
    (got,) = kiln_logits(tmp_path / "m", tmp_path, [short], chunks=[1])
    assert rel_err(got, llama_forward(cfg, params, short)) <= TOL


def test_config_parsing(tmp_path):
    """Defaults and variants of config.json as the driver reports them."""
    make_llama(tmp_path / "a", rope_scaling=LLAMA3, eos=[5, 6, 7])
    out = run_driver(tmp_path / "a")
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.split())
    assert got["arch"] == "llama" and got["n_kv_head"] == "2" and got["head_dim"] == "16"
    assert got["rope_scaling"] == "llama3" and got["rope_original_max_pos"] == "64" and got["tied"] == "0"
    assert got["eos_id"] == "5" and got["eos_ids"] == "5,6,7" and got["bos_id"] == "1"
    make_gpt2(tmp_path / "b")  # n_inner null -> 4 n_embd; tied by default
    got = dict(line.split("=", 1) for line in run_driver(tmp_path / "b").stdout.split())
    assert got["arch"] == "gpt2" and got["d_ff"] == "256" and got["tied"] == "1" and got["max_pos"] == "64"
