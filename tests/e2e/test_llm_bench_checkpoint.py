"""bench/make_llm_checkpoint.py, the checkpoint of the LLM serving benchmark, at its tiny shape: kiln
generates from it (bf16 and fp16), its tokenizer gives transformers' ids, every word of kiln load's
synthetic prompts is one token with and without its leading space (so 128 words are 128 tokens), and
every id of the model's vocabulary decodes."""
import json
import os
import re
import struct
import subprocess
import sys

import pytest

from conftest import run_kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "make_llm_checkpoint.py")


def words():
    src = open(os.path.join(ROOT, "src", "load", "prompts.c")).read()
    return re.findall(r'"([^"]+)"', re.search(r"WORDS\[\]\s*=\s*\{(.*?)\};", src, re.S).group(1))


@pytest.fixture(scope="module", params=["bf16", "fp16"])
def checkpoint(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"ck_{request.param}")
    p = subprocess.run([sys.executable, SCRIPT, str(out), "--shape", "tiny-llama", "--dtype", request.param],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return out, request.param


def test_kiln_generates_from_it(kiln, checkpoint):
    ck, dtype = checkpoint
    with open(ck / "model.safetensors", "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert header["model.embed_tokens.weight"]["dtype"] == ("BF16" if dtype == "bf16" else "F16")
    p = run_kiln(kiln, "generate", ck, "--prompt", "the of and", "--max-tokens", 16, "--temperature", 0,
                 "--print-ids")
    assert p.returncode == 0, p.stderr
    ids = json.loads(next(line for line in p.stderr.splitlines() if line.startswith('{"prompt_ids"')))
    assert len(ids["generated_ids"]) == 16 and ids["finish"] == "length"
    assert len(ids["prompt_ids"]) == 3


def test_prompt_words_are_one_token_each(kiln, checkpoint):
    tokenizers = pytest.importorskip("tokenizers")
    ck, _ = checkpoint
    tok = tokenizers.Tokenizer.from_file(str(ck / "tokenizer.json"))
    ws = words()
    text = " ".join(ws * 2)
    p = run_kiln(kiln, "tokenize", ck, "--text", write(ck / "words.txt", text))
    assert p.returncode == 0, p.stderr
    ids = json.loads(p.stdout)["ids"]
    assert ids == tok.encode(text).ids and len(ids) == 2 * len(ws)


def test_every_id_decodes(kiln, checkpoint):
    ck, _ = checkpoint
    vocab = json.load(open(ck / "config.json"))["vocab_size"]
    p = subprocess.run([kiln, "tokenize", str(ck), "--decode"], input=json.dumps(list(range(vocab))),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "<|eot_id|>" in p.stdout and " w0" in p.stdout


def write(path, text):
    path.write_text(text)
    return path
