#!/usr/bin/env python3
"""make_seeds.py — writes the seed corpora of the fuzz targets that read files and streams:
fuzz/corpus/<target>/ for fuzz_safetensors, fuzz_hf_config, fuzz_tokenizer, fuzz_npy, fuzz_npz, fuzz_json,
fuzz_load_http, fuzz_load_sse, fuzz_load_prometheus and fuzz_llm_engine. Seeds are small on purpose
(the fuzzer's speed falls with input size): slices of models/kjv-gpt2, the hand-made tokenizer of
tests/unit/test_tokenizer.c, files numpy and safetensors write, and hand-written wire traffic. The LLM
engines are built by `KILN build --hf` from tiny checkpoints written here (skipped without --kiln).

usage: make_seeds.py [--kiln build/kiln] [--out fuzz/corpus]
Needs numpy and safetensors (tests/requirements.txt)."""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
from safetensors.numpy import save as st_save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KJV = os.path.join(ROOT, "models", "kjv-gpt2")


def put(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ----------------------------------------------------------------------------- tokenizers

def byte_chars():
    """GPT-2's byte -> character table (the ByteLevel alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def kjv_slice(n_merges):
    """models/kjv-gpt2's tokenizer.json cut to its byte alphabet and first n_merges merges."""
    with open(os.path.join(KJV, "tokenizer.json")) as f:
        t = json.load(f)
    vocab = t["model"]["vocab"]
    keep = {c: vocab[c] for c in byte_chars().values() if c in vocab}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in keep and b in keep and a + b in vocab:
            keep[a + b] = vocab[a + b]
            merges.append([a, b])
        if len(merges) == n_merges:
            break
    ids = {tok: i + 1 for i, tok in enumerate(sorted(keep, key=keep.get))}  # dense ids, 0 = <|endoftext|>
    t["model"]["vocab"] = ids
    t["model"]["merges"] = merges
    return t


def llama3_style():
    """A Llama-3 style tokenizer: Split with Llama-3's regex + ByteLevel, a bos template, byte_fallback-free."""
    chars = byte_chars()
    vocab = {chars[b]: b for b in range(256)}
    extra = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
    merges = []
    for a, b in extra:
        vocab.setdefault(a + b, len(vocab))
        merges.append(f"{a} {b}")
    bot, eot = len(vocab), len(vocab) + 1
    regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": bot, "content": "<|begin_of_text|>", "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True},
            {"id": eot, "content": "<|eot_id|>", "single_word": False, "lstrip": True, "rstrip": True,
             "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bot],
                                                                  "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def qwen2_style():
    """A Qwen2 style tokenizer: the Llama-3 style one with the NFC normalizer, Qwen2's regex (single
    digits) and no template."""
    t = llama3_style()
    t["normalizer"] = {"type": "NFC"}
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = (
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    t["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return t


def sentencepiece_style(metaspace):
    """A SentencePiece-style tokenizer (Llama 2 form, or Mistral v0.3's Metaspace form): character BPE
    with byte_fallback over a few "<0xXX>" tokens, fuse_unk, the Replace / ByteFallback / Fuse / Strip
    decoder and a "<s> $A" template."""
    sp = "\u2581"
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0x41>": 4, "<0xE6>": 5, "<0x97>": 6, "<0xA5>": 7}
    for t in [sp, "a", "b", "h", "e", "l", "o", sp + "a", "he", "ll", "hell", "hello", sp + "hello"]:
        vocab[t] = len(vocab)
    merges = [[sp, "a"], ["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], [sp, "hello"]]
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": None if metaspace else {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": sp}, {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": sp, "prepend_scheme": "first", "split": False}
        if metaspace else None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": sp}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


# The tokenizer of tests/unit/test_tokenizer.c ("GOOD").
TEST_TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 7, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False,
              "vocab": {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120ab": 6, "\u00c3": 8, "\u00a9": 9},
              "merges": ["a b", ["ab", "c"], "\u0120 ab"]},
}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def tokenizers(out):
    with open(os.path.join(KJV, "tokenizer_config.json")) as f:
        kjv_cfg = f.read()
    put(out, "fuzz_tokenizer", "kjv_slice", compact(kjv_slice(60)) + "\0" + kjv_cfg)
    put(out, "fuzz_tokenizer", "kjv_slice_no_config", compact(kjv_slice(20)))
    put(out, "fuzz_tokenizer", "test_tokenizer", compact(TEST_TOKENIZER) + "\0" +
        compact({"bos_token": {"content": "<|endoftext|>"}, "eos_token": "<|endoftext|>", "add_bos_token": True}))
    llama = llama3_style()
    put(out, "fuzz_tokenizer", "llama3_style", compact(llama) + "\0" +
        compact({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
                 "add_eos_token": False}))
    put(out, "fuzz_tokenizer", "qwen2_style", compact(qwen2_style()))
    put(out, "fuzz_tokenizer", "llama2_style", compact(sentencepiece_style(False)) + "\0" +
        compact({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}))
    put(out, "fuzz_tokenizer", "mistral_metaspace", compact(sentencepiece_style(True)))
    gemma = sentencepiece_style(False)
    gemma["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    gemma["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                              "invert": False}
    gemma["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    put(out, "fuzz_tokenizer", "gemma_split", compact(gemma))
    fallback = dict(TEST_TOKENIZER)
    fallback["model"] = dict(TEST_TOKENIZER["model"], byte_fallback=True, unk_token="<unk>", fuse_unk=True,
                             vocab=dict(TEST_TOKENIZER["model"]["vocab"], **{"<unk>": 10, "<0x41>": 11, "<0xE2>": 12}))
    fallback["added_tokens"] = TEST_TOKENIZER["added_tokens"] + [
        {"id": 13, "content": "[word]", "single_word": True, "lstrip": True, "rstrip": False, "normalized": False,
         "special": False}]
    put(out, "fuzz_tokenizer", "byte_fallback", compact(fallback))
    return llama


# ----------------------------------------------------------------------------- configs

GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
        "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "bos_token_id": 50256,
        "eos_token_id": 50256, "tie_word_embeddings": True, "scale_attn_weights": True}
LLAMA2 = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu", "rope_theta": 10000.0,
          "rope_scaling": None, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
LLAMA3 = dict(LLAMA2, vocab_size=128256, num_key_value_heads=8, intermediate_size=14336, rope_theta=500000.0,
              max_position_embeddings=131072, bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
              rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"})
LLAMA_T5 = dict(LLAMA2, num_key_value_heads=4, head_dim=128, attention_bias=False, mlp_bias=False,
                rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
LLAMA_DYN = dict(LLAMA2, rope_scaling={"type": "dynamic", "factor": 4.0})
MISTRAL = dict(LLAMA2, model_type="mistral", num_key_value_heads=8, intermediate_size=14336, sliding_window=4096)
QWEN2 = dict(LLAMA2, model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
             num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, rope_theta=1000000.0,
             use_sliding_window=False, sliding_window=32768, max_window_layers=21, tie_word_embeddings=True)
PHI3 = dict(LLAMA2, model_type="phi3", vocab_size=32064, hidden_size=3072, intermediate_size=8192,
            sliding_window=2047, original_max_position_embeddings=4096, partial_rotary_factor=0.75)
PHI3_LONGROPE = dict(PHI3, max_position_embeddings=131072, partial_rotary_factor=1.0,
                     rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.01 * i for i in range(48)],
                                   "long_factor": [1.0 + 0.5 * i for i in range(48)]})
GEMMA = dict(LLAMA2, model_type="gemma", vocab_size=256000, hidden_size=2048, intermediate_size=16384,
             num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1, head_dim=256, hidden_act="gelu",
             hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192, tie_word_embeddings=True)


def configs(out):
    with open(os.path.join(KJV, "config.json"), "rb") as f:
        put(out, "fuzz_hf_config", "kjv_gpt2.json", f.read())
    for name, cfg in [("gpt2", GPT2), ("llama2", LLAMA2), ("llama3", LLAMA3), ("llama_rope_parameters", LLAMA_T5),
                      ("llama_dynamic", LLAMA_DYN), ("mistral", MISTRAL), ("qwen2", QWEN2), ("phi3", PHI3), ("phi3_longrope", PHI3_LONGROPE),
                      ("gemma", GEMMA)]:
        put(out, "fuzz_hf_config", name + ".json", json.dumps(cfg, indent=1))


# ----------------------------------------------------------------------------- tensors

def safetensors_seeds(out):
    from safetensors import safe_open
    rng = np.random.default_rng(7)
    with safe_open(os.path.join(KJV, "model.safetensors"), "np") as f:
        names = [n for n in f.keys() if "h.0.ln_1" in n or n == "transformer.ln_f.bias"]
        kjv = {n: f.get_tensor(n)[:16] for n in names}
    put(out, "fuzz_safetensors", "kjv_slice.safetensors", st_save(kjv, metadata={"format": "pt"}))
    dtypes = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i64": np.int64, "i32": np.int32,
              "i16": np.int16, "i8": np.int8, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
    mixed = {k: (rng.standard_normal((2, 3)) * 10).astype(v) for k, v in dtypes.items()}
    mixed["bool"] = np.array([True, False, True])
    mixed["empty"] = np.zeros((0, 4), np.float32)
    mixed["scalar"] = np.array(1.5, np.float32)
    put(out, "fuzz_safetensors", "dtypes.safetensors", st_save(mixed))


def safetensors_bf16(out):
    """A BF16 tensor written by hand (numpy has no bfloat16): the header the safetensors package writes."""
    hdr = compact({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                   "__metadata__": {"format": "pt"}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    data = np.array([1.0, -2.0, 0.5, 3.0], np.float32).view(np.uint32) >> 16
    put(out, "fuzz_safetensors", "bf16.safetensors",
        len(hdr).to_bytes(8, "little") + hdr + data.astype("<u2").tobytes())


def npy_seeds(out):
    import io
    rng = np.random.default_rng(3)
    arrays = {"f32_2x3": rng.standard_normal((2, 3)).astype(np.float32), "f16_4": np.arange(4, dtype=np.float16),
              "f64_scalar": np.array(2.5), "i64_3x1": np.arange(3, dtype=np.int64).reshape(3, 1),
              "i32_empty": np.zeros((0, 2), np.int32), "u8_5": np.arange(5, dtype=np.uint8),
              "bool_2x2": np.array([[True, False], [False, True]]), "i8_1x1x2": np.array([[[-1, 1]]], np.int8)}
    for name, a in arrays.items():
        b = io.BytesIO()
        np.save(b, a)
        put(out, "fuzz_npy", name + ".npy", b.getvalue())
    b = io.BytesIO()
    np.lib.format.write_array(b, np.arange(6, dtype=np.float32).reshape(2, 3), version=(2, 0))
    put(out, "fuzz_npy", "f32_v2.npy", b.getvalue())


def npz_seeds(out):
    """Archives np.savez writes (stored members with ZIP64 local fields): one batch, several per input."""
    import io
    rng = np.random.default_rng(4)
    for name, arrays in {"one": {"input": rng.standard_normal((2, 3)).astype(np.float32)},
                         "per_input": {"ids.0": np.arange(4, dtype=np.int64), "ids.1": np.arange(4, dtype=np.int64),
                                       "mask.0": np.ones(4, np.int64), "mask.1": np.zeros(4, np.int64)}}.items():
        b = io.BytesIO()
        np.savez(b, **arrays)
        put(out, "fuzz_npz", name + ".npz", b.getvalue())


# ----------------------------------------------------------------------------- JSON and wire traffic

def json_seeds(out):
    with open(os.path.join(KJV, "generation_config.json"), "rb") as f:
        put(out, "fuzz_json", "generation_config.json", f.read())
    put(out, "fuzz_json", "escapes.json",
        '{"s":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u0000\\u00e9\\ud83d\\ude00","k\\u0000ey":[1,-0.5,2e-3,1E+400,0]}')
    put(out, "fuzz_json", "nested.json", "[" * 40 + "{}" + "]" * 40)
    put(out, "fuzz_json", "literals.json", ' [true, false, null, "", {}, [], -0, 0.1e1] \n')
    put(out, "fuzz_json", "openai_chunk.json", compact({
        "id": "cmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "kjv-gpt2",
        "choices": [{"index": 0, "delta": {"content": " and"}, "finish_reason": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}))
    put(out, "fuzz_json", "kserve_infer.json", compact({
        "model_name": "m", "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [0.25, -1.5]}]}))
    put(out, "fuzz_json", "prompts.jsonl_line.json", compact({"prompt": "And God said", "max_tokens": 16}))


HTTP = {
    "length": b"\x00HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}",
    "chunked": b"\x06HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
               b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
    "close": b"\x0aHTTP/1.0 200 OK\r\nConnection: close\r\n\r\nbody until the connection closes",
    "interim_then_two": b"\x0cHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 204 No "
                        b"Content\r\n\r\nHTTP/1.1 503 Busy\r\ncontent-length: 0\r\n\r\n",
    "head": b"\x01HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
    "kserve_binary": b"\x10HTTP/1.1 200 OK\r\nInference-Header-Content-Length: 14\r\nContent-Length: 22\r\n\r\n"
                     b"{\"outputs\":[]}\x00\x00\x80?\x00\x00\x00@",
    "sse": b"\x22HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"1a\r\ndata: {\"choices\":[{}]}\n\n\r\n10\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
}

SSE = {
    "openai": b"\x03data: {\"choices\":[{\"delta\":{\"content\":\"In\"}}]}\n\n"
              b"data: {\"choices\":[{\"delta\":{\"content\":\" the\"}}]}\n\ndata: [DONE]\n\n",
    "line_ends": b"\x05: keep-alive comment\r\nevent: message\r\nid: 7\rdata:first\r\ndata: second\r\rretry: 10\n\n"
                 b"data\n\n",
    "stop": b"\x09data: one\n\ndata: [STOP]\n\ndata: never\n\n",
    "unterminated": b"\x0bdata: partial event without its blank line\ndata: and a line without its end",
}

PROM = {
    "dcgm": b"\n# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            b"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\",Hostname=\"h\"} 87\n"
            b"DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-2\",Hostname=\"h\"} 13\n",
    "nvidia_smi": b"\nnvidia_gpu_utilization{index=\"0\"} 0.5 1700000000000\nnvidia_gpu_memory_used_bytes 1e9\n",
    "kiln_match": b"kiln_requests\n# kiln-style page\nkiln_requests_running 3\nkiln_requests_waiting{model=\"a\\\"}b\"} 4\r\n"
                  b"kiln_requests_total 1.5e3\n  kiln_requests_odd\tNaN\nkiln_requests_inf +Inf\n",
    "braces": b"util\nx_gpu_util{a=\"}\",b=\"\\\\\"} 2\nx_gpu_util{unterminated=\"} 3\nx_gpu_util{} -1e308\n",
}


def wire(out):
    for name, data in HTTP.items():
        put(out, "fuzz_load_http", name, data)
    for name, data in SSE.items():
        put(out, "fuzz_load_sse", name, data)
    for name, data in PROM.items():
        put(out, "fuzz_load_prometheus", name, data)


# ----------------------------------------------------------------------------- LLM engines

def tiny_checkpoint(d, arch, tok):
    rng = np.random.default_rng(11)
    vocab = 16
    if arch == "gpt2":
        cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_layer": 1, "n_embd": 8, "n_head": 2, "n_positions": 8,
               "bos_token_id": 7, "eos_token_id": 7}
        shapes = {"wte.weight": (vocab, 8), "wpe.weight": (8, 8), "ln_f.weight": (8,), "ln_f.bias": (8,),
                  "h.0.ln_1.weight": (8,), "h.0.ln_1.bias": (8,), "h.0.ln_2.weight": (8,), "h.0.ln_2.bias": (8,),
                  "h.0.attn.c_attn.weight": (8, 24), "h.0.attn.c_attn.bias": (24,),
                  "h.0.attn.c_proj.weight": (8, 8), "h.0.attn.c_proj.bias": (8,),
                  "h.0.mlp.c_fc.weight": (8, 32), "h.0.mlp.c_fc.bias": (32,),
                  "h.0.mlp.c_proj.weight": (32, 8), "h.0.mlp.c_proj.bias": (8,)}
    else:
        cfg = {"model_type": "llama", "vocab_size": vocab, "hidden_size": 8, "intermediate_size": 12,
               "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
               "max_position_embeddings": 16, "tie_word_embeddings": False, "eos_token_id": [7, 8],
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}
        shapes = {"model.embed_tokens.weight": (vocab, 8), "model.norm.weight": (8,), "lm_head.weight": (vocab, 8),
                  "model.layers.0.input_layernorm.weight": (8,), "model.layers.0.post_attention_layernorm.weight": (8,),
                  "model.layers.0.self_attn.q_proj.weight": (8, 8), "model.layers.0.self_attn.k_proj.weight": (4, 8),
                  "model.layers.0.self_attn.v_proj.weight": (4, 8), "model.layers.0.self_attn.o_proj.weight": (8, 8),
                  "model.layers.0.mlp.gate_proj.weight": (12, 8), "model.layers.0.mlp.up_proj.weight": (12, 8),
                  "model.layers.0.mlp.down_proj.weight": (8, 12)}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(st_save({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}))
    if tok is not None:
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}, f)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [7, 3]}, f)


def engines(out, kiln):
    """Tiny engines named .seed, not .kiln: engine files are git-ignored."""
    with tempfile.TemporaryDirectory() as tmp:
        calib = os.path.join(tmp, "calib.txt")  # W8A8's and FP8's calibration text (.act_scale records)
        with open(calib, "w") as f:
            f.write("a b c a b c " * 8)
        for arch, tok, flags in [("gpt2", TEST_TOKENIZER, ["--fp32"]), ("gpt2", None, ["--fp16"]),
                                 ("llama", TEST_TOKENIZER, ["--bf16"]), ("llama", None, ["--weights", "int8"]),
                                 ("llama", TEST_TOKENIZER, ["--weights", "w8a8", "--calib-text", calib]),
                                 ("llama", None, ["--weights", "int4"]), ("llama", None, ["--weights", "fp8"]),
                                 ("llama", TEST_TOKENIZER, ["--weights", "fp8", "--calib-text", calib])]:
            name = "_".join(f.lstrip("-") for f in flags if f != calib)
            ck = os.path.join(tmp, f"{arch}_{name}")
            tiny_checkpoint(ck, arch, tok)
            engine = os.path.join(tmp, "e.kiln")
            subprocess.run([kiln, "build", "--hf", ck, "-o", engine, *flags], check=True, stdout=subprocess.DEVNULL)
            with open(engine, "rb") as f:
                put(out, "fuzz_llm_engine", f"tiny_{arch}_{name}.seed", f.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", help="the kiln CLI, to build the LLM engine seeds (skipped without it)")
    ap.add_argument("--out", default=os.path.join(ROOT, "fuzz", "corpus"))
    a = ap.parse_args()
    tokenizers(a.out)
    configs(a.out)
    safetensors_bf16(a.out)
    safetensors_seeds(a.out)
    npy_seeds(a.out)
    npz_seeds(a.out)
    json_seeds(a.out)
    wire(a.out)
    if a.kiln:
        engines(a.out, a.kiln)


if __name__ == "__main__":
    main()
