"""`kiln generate` (tools/cmd_generate.c) end to end on tiny random GPT-2 and Llama checkpoints with a
byte-level BPE tokenizer.json written here: greedy decoding (plain, and with a repetition or presence
penalty) gives the tokens of a greedy loop over the NumPy reference forward (llm_reference.py), and
stdout is their text; stop strings end the text before them; a seed makes sampling reproducible;
a KV budget that is too small and bad options are clean errors; --chat applies a chat template.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_generate.py
"""
import json
import subprocess

import numpy as np
import pytest

from conftest import KILN_TIMEOUT_S
from llm_checkpoints import make_gpt2, make_llama
from llm_reference import gpt2_forward, llama_forward

VOCAB = 300
EOS_TEXT = "<|endoftext|>"
PROMPT = "the cat sat on the mat and then"
NEAR_TIE = 1e-3  # a reference top-2 gap this small may flip between float32 and float64: stop comparing there


def byte_chars():
    """The byte-level alphabet of GPT-2 style tokenizers: printable Latin-1 bytes stand for themselves,
    the others for the code points from 256 up, in byte order."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def write_tokenizer(d):
    """tokenizer.json with one token per byte (ids 0-255), merges of letter pairs up to id VOCAB-2, and
    the special EOS_TEXT as id VOCAB-1, so that every id the model can produce names a token. Returns
    {id: bytes} for decoding."""
    bc = byte_chars()
    vocab = {bc[b]: b for b in range(256)}
    pieces = {b: bytes([b]) for b in range(256)}
    merges = []
    letters = "etaoinshrdlucmfw "
    for a in letters:
        for b in letters:
            if len(vocab) == VOCAB - 1:
                break
            ca, cb = bc[ord(a)], bc[ord(b)]
            if ca + cb in vocab:
                continue
            merges.append(f"{ca} {cb}")
            pieces[len(vocab)] = (a + b).encode()
            vocab[ca + cb] = len(vocab)
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": VOCAB - 1, "content": EOS_TEXT, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    with open(d / "tokenizer.json", "w") as f:
        json.dump(tok, f)
    return pieces


MODELS = {
    "gpt2": (make_gpt2, gpt2_forward, dict(vocab=VOCAB, n_positions=128, seed=11)),
    "llama": (make_llama, llama_forward, dict(vocab=VOCAB, max_pos=256, seed=12, eos=7)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    """(directory, config, reference params, forward, {id: bytes}) of a checkpoint with its tokenizer."""
    maker, forward, kw = MODELS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    cfg, params = maker(d, **kw)
    pieces = write_tokenizer(d)
    return d, cfg, params, forward, pieces


def generate(kiln, d, *args):
    """Runs kiln generate with --print-ids; returns (exit code, stdout bytes, stderr text, ids dict or None)."""
    proc = subprocess.run([kiln, "generate", str(d), "--print-ids", *map(str, args)], capture_output=True,
                          timeout=KILN_TIMEOUT_S)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode >= 0 and "Sanitizer" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith('{"prompt_ids"')]
    return proc.returncode, proc.stdout, err, (json.loads(lines[-1]) if lines else None)


def reference_greedy(cfg, params, forward, prompt_ids, max_tokens, stop_ids, repetition=1.0, presence=0.0):
    """Greedy decoding over the reference forward with HF repetition / OpenAI presence penalties. Returns
    (tokens, top-2 gap of each step)."""
    ids, out, gaps = list(prompt_ids), [], []
    for _ in range(max_tokens):
        logits = forward(cfg, params, ids)[-1].copy()
        seen = sorted(set(ids))
        logits[seen] = np.where(logits[seen] > 0, logits[seen] / repetition, logits[seen] * repetition)
        logits[sorted(set(out))] -= presence
        top2 = np.sort(logits)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        t = int(np.argmax(logits))  # the first maximum: the lowest id on ties
        ids.append(t)
        out.append(t)
        if t in stop_ids:
            break
    return out, gaps


def assert_same_tokens(got, want, gaps):
    """got == want, except that after a near-tie of the reference the two may part."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            assert gaps[i] < NEAR_TIE, f"token {i}: kiln {g}, reference {w} (top-2 gap {gaps[i]:.3g})\n{got}\n{want}"
            return
    assert len(got) == len(want), f"kiln generated {len(got)} tokens, the reference {len(want)}\n{got}\n{want}"


def text_of(pieces, ids):
    return b"".join(pieces[t] for t in ids if t != VOCAB - 1).decode("utf-8", "replace").encode()


@pytest.mark.parametrize("penalty", [{}, {"repetition": 1.8}, {"presence": 1.5}])
def test_greedy_matches_reference(kiln, model, penalty):
    d, cfg, params, forward, pieces = model
    args = ["--prompt", PROMPT, "--temperature", 0, "--max-tokens", 30]
    if "repetition" in penalty:
        args += ["--repetition-penalty", penalty["repetition"]]
    if "presence" in penalty:
        args += ["--presence-penalty", penalty["presence"]]
    rc, out, err, ids = generate(kiln, d, *args)
    assert rc == 0, err
    assert "TTFT" in err and "TPOT" in err and "prompt" in err
    assert b"".join(pieces[t] for t in ids["prompt_ids"]) == PROMPT.encode()
    stop_ids = {VOCAB - 1, cfg["eos_token_id"]}
    want, gaps = reference_greedy(cfg, params, forward, ids["prompt_ids"], 30, stop_ids, **penalty)
    got = ids["generated_ids"]
    assert_same_tokens(got, want, gaps)
    assert ids["finish"] == ("stop_token" if got[-1] in stop_ids else "length")
    shown = [t for t in got if t not in stop_ids]
    assert out == text_of(pieces, shown)
    if penalty:
        assert len(set(got)) >= 3, f"the penalty should make the output vary: {got}"


def test_stop_string(kiln, model):
    d, _, _, _, pieces = model
    base = ["--prompt", PROMPT, "--temperature", 0, "--max-tokens", 30, "--repetition-penalty", 1.8]
    rc, full, err, ids = generate(kiln, d, *base)
    assert rc == 0, err
    text = full.decode()
    # a stop string from the middle of the output, free of replacement characters
    starts = [i for i in range(len(text) // 3, len(text) - 1) if "\ufffd" not in text[i:i + 2]]
    if not starts:
        pytest.skip("the output has no clean two-character piece")
    stop = text[starts[0]:starts[0] + 2]
    rc, out, err, ids2 = generate(kiln, d, *base, "--stop", "never appears", "--stop", stop)
    assert rc == 0, err
    assert out.decode() == text[:text.index(stop)]
    assert ids2["finish"] == "stop_string"
    assert ids2["generated_ids"] == ids["generated_ids"][:len(ids2["generated_ids"])]


def test_seeded_sampling_is_reproducible(kiln, model):
    d = model[0]
    args = ["--prompt", PROMPT, "--temperature", 1.5, "--top-k", 0, "--top-p", 1, "--min-p", 0, "--max-tokens", 20]
    runs = [generate(kiln, d, *args, "--seed", 7) for _ in range(2)]
    other = generate(kiln, d, *args, "--seed", 8)
    assert all(r[0] == 0 for r in runs + [other])
    assert runs[0][1] == runs[1][1] and runs[0][3] == runs[1][3]
    assert "seed 7" in runs[0][2]
    assert other[3]["generated_ids"] != runs[0][3]["generated_ids"]


def test_no_prefix_cache_changes_nothing(kiln, model):
    d = model[0]
    args = ["--prompt", PROMPT, "--temperature", 1.5, "--top-k", 0, "--top-p", 1, "--min-p", 0, "--max-tokens", 20,
            "--seed", 7]
    on, off = generate(kiln, d, *args), generate(kiln, d, *args, "--no-prefix-cache")
    assert on[0] == 0 and off[0] == 0, off[2]
    assert on[1] == off[1] and on[3] == off[3]


def test_draft_model_keeps_greedy_tokens(kiln, model, tmp_path):
    """--draft: the greedy tokens of plain decoding, drafting with the model itself (every draft accepted)
    and with a smaller model of the same tokenizer; a draft of another vocabulary, --spec draft without
    --draft and --draft with --spec ngram are clean errors."""
    d = model[0]
    small, other = tmp_path / "small", tmp_path / "other"
    small.mkdir()
    other.mkdir()
    make_gpt2(small, seed=5, vocab=VOCAB, n_layer=1, n_embd=32, n_head=2, n_positions=256)
    write_tokenizer(small)
    make_gpt2(other, seed=5, vocab=VOCAB + 8, n_layer=1, n_embd=32, n_head=2, n_positions=256)
    args = ["--prompt", PROMPT, "--temperature", 0, "--max-tokens", 24]
    plain = generate(kiln, d, *args)
    itself = generate(kiln, d, *args, "--draft", d, "--draft-tokens", 3)
    smaller = generate(kiln, d, *args, "--draft", small)
    assert plain[0] == 0 and itself[0] == 0 and smaller[0] == 0, itself[2] + smaller[2]
    assert plain[3] == itself[3] == smaller[3] and plain[1] == itself[1] == smaller[1]
    assert "spec acceptance 1.00" in itself[2] and "spec acceptance" in smaller[2]
    sampled = ["--prompt", PROMPT, "--temperature", 1.0, "--max-tokens", 16, "--seed", 3, "--draft", small]
    a, b = generate(kiln, d, *sampled), generate(kiln, d, *sampled)
    assert a[0] == 0 and a[3] == b[3]
    err = generate(kiln, d, *args, "--draft", other)
    assert err[0] != 0 and "vocabulary" in err[2] and "tokenizer" in err[2], err[2]
    err = generate(kiln, d, *args, "--spec", "draft")
    assert err[0] == 2 and "--draft" in err[2]
    err = generate(kiln, d, *args, "--spec", "ngram", "--draft", small)
    assert err[0] == 2 and "--spec draft" in err[2]


def test_early_exit_keeps_greedy_tokens(kiln, model):
    """--draft layers:1: the model's first layer drafts (2 layers); the greedy tokens of plain decoding, the
    acceptance in the timing line; N out of the model's range is a clean error naming it."""
    d = model[0]
    args = ["--prompt", PROMPT, "--temperature", 0, "--max-tokens", 24]
    plain, early = generate(kiln, d, *args), generate(kiln, d, *args, "--draft", "layers:1", "--draft-tokens", 3)
    assert plain[0] == 0 and early[0] == 0, early[2]
    assert plain[1] == early[1] and plain[3] == early[3]
    assert "spec acceptance" in early[2]
    for bad in ("layers:0", "layers:2", "layers:one"):
        err = generate(kiln, d, *args, "--draft", bad)
        assert err[0] != 0 and "1 <= N < 2" in err[2], err[2]


def test_spec_ngram_keeps_greedy_tokens(kiln, model):
    """--spec ngram: the greedy tokens of plain decoding, with the acceptance in the timing line; sampled
    tokens stay reproducible by seed; --draft-tokens alone is a usage error."""
    d = model[0]
    prompt = " ".join([PROMPT] * 3)
    args = ["--prompt", prompt, "--temperature", 0, "--max-tokens", 24]
    plain, spec = generate(kiln, d, *args), generate(kiln, d, *args, "--spec", "ngram", "--draft-tokens", 3)
    assert plain[0] == 0 and spec[0] == 0, spec[2]
    assert plain[1] == spec[1] and plain[3] == spec[3]
    assert "spec acceptance" in spec[2] and "spec acceptance" not in plain[2]
    sampled = ["--prompt", prompt, "--temperature", 1.0, "--max-tokens", 16, "--seed", 3, "--spec", "ngram"]
    a, b = generate(kiln, d, *sampled), generate(kiln, d, *sampled)
    assert a[0] == 0 and a[3] == b[3]
    err = generate(kiln, d, "--prompt", prompt, "--draft-tokens", 3)
    assert err[0] == 2 and "--spec" in err[2]
    err = generate(kiln, d, "--prompt", prompt, "--spec", "medusa")
    assert err[0] == 2 and "ngram" in err[2]


def test_timing_cache_on_cpu(kiln, model, tmp_path):
    """--timing-cache is taken on the CPU too, where there is nothing to time: the same tokens, no file
    written; without its FILE it is a usage error."""
    d = model[0]
    args = ["--prompt", PROMPT, "--temperature", 0, "--max-tokens", 8]
    cache = tmp_path / "timing.cache"
    plain, cached = generate(kiln, d, *args), generate(kiln, d, *args, "--timing-cache", cache)
    assert plain[0] == 0 and cached[0] == 0, cached[2]
    assert plain[1] == cached[1] and plain[3] == cached[3]
    assert not cache.exists()
    rc, _, err, _ = generate(kiln, d, *args, "--timing-cache")
    assert rc == 2 and "--timing-cache needs a value" in err, err


def test_errors(kiln, model):
    d = model[0]
    rc, _, err, _ = generate(kiln, d, "--prompt", PROMPT, "--max-tokens", 60, "--kv-budget-mb", 0.004)
    assert rc == 1 and "holds no KV-cache block" in err, err
    rc, _, err, _ = generate(kiln, d, "--prompt", PROMPT, "--max-tokens", 100, "--kv-budget-mb", 0.04)
    assert rc == 1 and "KV-cache blocks" in err and "--kv-budget-mb" in err, err
    rc, _, err, _ = generate(kiln, d, "--max-tokens", 5)
    assert rc == 2 and "--prompt is required" in err
    rc, _, err, _ = generate(kiln, d, "--prompt", "x", "--top-p", 0)
    assert rc == 2 and "--top-p" in err
    rc, _, err, _ = generate(kiln, d, "--prompt", "x", "--bogus", 1)
    assert rc == 2 and "unknown option" in err
    rc, _, err, _ = generate(kiln, d.parent / "missing", "--prompt", "x")
    assert rc == 1 and "kiln: error:" in err


def test_chat(kiln, model, tmp_path):
    """--chat renders the user message (after --system's) with the chat template, --chat-template FILE
    overriding the model's; without a template of its own the model gets ChatML. The prompt is then the
    rendered text's tokens."""
    d = model[0]
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}[assistant] {% endif %}")
    args = ["--temperature", 0, "--max-tokens", 5]
    rc, out, err, ids = generate(kiln, d, "--chat", "--chat-template", template, "--system", "be brief",
                                 "--prompt", "the cat", *args)
    assert rc == 0, err
    rc2, out2, err2, ids2 = generate(kiln, d, "--prompt", "[system] be brief\n[user] the cat\n[assistant] ", *args)
    assert rc2 == 0, err2
    assert ids["prompt_ids"] == ids2["prompt_ids"] and ids["generated_ids"] == ids2["generated_ids"] and out == out2
    rc, _, err, ids = generate(kiln, d, "--chat", "--prompt", "the cat", *args)
    rc2, _, err2, ids2 = generate(kiln, d, "--prompt", "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n",
                                  *args)
    assert rc == 0 and rc2 == 0 and ids["prompt_ids"] == ids2["prompt_ids"], err + err2
    rc, _, err, _ = generate(kiln, d, "--system", "x", "--prompt", "x")
    assert rc == 2 and "--chat" in err
    rc, _, err, _ = generate(kiln, d, "--chat", "--chat-template", tmp_path / "missing.jinja", "--prompt", "x")
    assert rc == 1 and "missing.jinja" in err
    template.write_text("{% if %}")
    rc, _, err, _ = generate(kiln, d, "--chat", "--chat-template", template, "--prompt", "x")
    assert rc == 1 and "chat_template" in err, err
