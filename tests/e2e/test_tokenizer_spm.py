"""kiln's tokenizer (src/llm/tokenizer.h, through `kiln tokenize`) against Hugging Face `tokenizers` on
SentencePiece-style BPE tokenizers trained here, offline, in the forms the published tokenizer.json files
of those families take: BPE over characters with byte_fallback ("<0x00>".."<0xFF>" in the vocabulary),
fuse_unk and "<unk>", and
  llama2_style   normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer, decoder
                 Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)], "<s> $A" template
                 (Llama 2, Mistral v0.1, Phi-3)
  mistral_style  no normalizer, pre-tokenizer Metaspace(prepend_scheme "first", split false), the same
                 decoder (Mistral v0.3 and later conversions)
  metaspace_split  Metaspace(prepend_scheme "always", split true)
  metaspace_decoder  mistral_style with the Metaspace decoder (byte tokens then decode as their text)
  gemma_style    normalizer Replace(" ", "▁") only, pre-tokenizer Split(" ", MergedWithPrevious), decoder
                 without Strip, "<bos>" template and <start_of_turn> / <end_of_turn> special tokens (Gemma)
  split_*        no normalizer, Split on the string " " with each behavior
  llama2_unk     llama2_style with some byte tokens taken out: characters needing them become <unk>
                 (fused)
Ids, decode and the streaming decode must equal `tokenizers`' on the corpus of test_tokenizer.py, and
the fixtures of scripts/make_tokenizer_fixtures.py (Llama 2, Phi-3 and Gemma forms) must load and run
`kiln generate` from text.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_tokenizer_spm.py
"""
import json
import os

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from conftest import assert_error, assert_ok, run_kiln
from test_tokenizer import ALL_STRINGS, TRAIN_TEXT, kiln_jsonl, run_kiln_stdin

SPACE = "\u2581"  # ▁
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def spm_decoder(strip):
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if strip else []))


def train(specials, vocab_size=900):
    """A character BPE trained over Metaspace words, with every byte token added to its vocabulary (as
    sentencepiece's conversions have them: vocabulary entries, not added tokens)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  limit_alphabet=70)
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for t in BYTE_TOKENS:
        vocab.setdefault(t, len(vocab))
    return data


def finish(data, normalizer, pre_tokenizer, strip, bos, drop_bytes=(), decoder=None):
    """data with the given parts (`tokenizers` objects) and a "bos $A" template."""
    for t in drop_bytes:
        del data["model"]["vocab"][t]
    tok = Tokenizer.from_str(json.dumps(data))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder or spm_decoder(strip)
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def make_all(root):
    legacy = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    llama = train(["<unk>", "<s>", "</s>"])
    gemma = train(["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"])
    made = {
        "llama2_style": finish(json.loads(json.dumps(llama)), legacy, None, True, "<s>"),
        "mistral_style": finish(json.loads(json.dumps(llama)), None,
                                pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False),
                                True, "<s>"),
        "metaspace_split": finish(json.loads(json.dumps(llama)), None,
                                  pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True),
                                  True, "<s>"),
        "metaspace_decoder": finish(json.loads(json.dumps(llama)), None,
                                    pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False),
                                    True, "<s>", decoder=decoders.Metaspace(replacement=SPACE, prepend_scheme="first")),
        "gemma_style": finish(gemma, normalizers.Replace(" ", SPACE),
                              pre_tokenizers.Split(" ", behavior="merged_with_previous"), False, "<bos>"),
        "llama2_unk": finish(json.loads(json.dumps(llama)), legacy, None, True, "<s>",
                             drop_bytes=["<0xF0>", "<0x9F>", "<0xE2>"]),
    }
    for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"):
        made[f"split_{behavior}"] = finish(json.loads(json.dumps(llama)), None,
                                           pre_tokenizers.Split(" ", behavior=behavior), False, "<s>")
    out = {}
    for name, tok in made.items():
        d = root / name
        d.mkdir()
        tok.save(str(d / "tokenizer.json"))
        out[name] = (d / "tokenizer.json", Tokenizer.from_file(str(d / "tokenizer.json")))
    return out


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory):
    return make_all(tmp_path_factory.mktemp("spm"))


NAMES = ["llama2_style", "mistral_style", "metaspace_split", "metaspace_decoder", "gemma_style", "llama2_unk",
         "split_removed", "split_isolated", "split_merged_with_previous", "split_merged_with_next", "split_contiguous"]
EXTRA = ["<s>Hello</s>", "<s> Hello", "x<s>y", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
         "<bos><bos>", " leading", "  two leading", "trailing ", "\u2581already", "a\u2581b", "<unk>", "<0x41>",
         "\U0001F600\U0001F600 \u2603\u2603", "\u00e9t\u00e9 \u00fcber \u00df", "\u4e2d\u6587\u5b57 \u65e5\u672c"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_special", [True, False])
def test_spm_ids_and_decode_match_tokenizers(kiln, spm_dir, tmp_path, name, add_special):
    path, ref = spm_dir[name]
    strings = ALL_STRINGS + EXTRA
    rows = kiln_jsonl(kiln, path, strings, tmp_path, *([] if add_special else ["--no-special"]))
    mismatches = []
    for s, row in zip(strings, rows):
        want = ref.encode(s, add_special_tokens=add_special).ids
        if row["ids"] != want:
            mismatches.append(f"{s!r}:\n  kiln {row['ids']}\n  HF   {want}")
            continue
        text = ref.decode(want, skip_special_tokens=False)
        assert row["text"] == text, f"decode of {s!r}: kiln {row['text']!r}, HF {text!r}"
        assert row["stream"] == text, f"streaming decode of {s!r}: {row['stream']!r}, decode {text!r}"
    assert not mismatches, f"{len(mismatches)} of {len(strings)} strings differ:\n" + "\n".join(mismatches[:10])


def test_spm_decode_of_byte_runs(kiln, spm_dir):
    """Runs of byte tokens: valid UTF-8 gives its text, anything else one U+FFFD per token, in decode and
    in the streaming decode; skip_special drops <s> before the leading space is stripped."""
    path, ref = spm_dir["llama2_style"]
    b = [ref.token_to_id(t) for t in ("<0xE6>", "<0x97>", "<0xA5>", "<0x20>", "<0x41>", "<0xFF>")]
    hello = ref.encode("Hello world", add_special_tokens=True).ids
    cases = [b[:3], b[:2], [b[3], b[4]], [b[0], b[1], b[2], b[5]], b[:2] + hello, hello + b[:1], b[5:] * 3 + hello,
             [b[3]] + hello, hello + [b[0], b[1], b[2]] * 30]
    for skip in (False, True):
        want = [ref.decode(ids, skip_special_tokens=skip) for ids in cases]
        for ids, w in zip(cases, want):
            proc = run_kiln_stdin(kiln, json.dumps(ids), "tokenize", path, "--decode",
                                  *(["--skip-special"] if skip else []))
            assert_ok(proc)
            assert proc.stdout == w, f"decode of {ids}: kiln {proc.stdout!r}, HF {w!r}"


def test_spm_unsupported_parts_are_refused(kiln, spm_dir, tmp_path):
    path, _ = spm_dir["llama2_style"]
    base = json.loads(path.read_text(encoding="utf-8"))
    cases = [
        (("decoder",), {"type": "ByteLevel"}, ["not supported", "ByteLevel"]),
        (("decoder", "decoders", 0), {"type": "CTC"}, ["not supported", "CTC"]),
        (("decoder", "decoders", 3), {"type": "Strip", "content": " ", "start": 0, "stop": 1}, ["Strip"]),
        (("normalizer", "normalizers", 1, "pattern"), {"Regex": " +"}, ["not supported", "Replace"]),
        (("normalizer", "normalizers", 0), {"type": "Lowercase"}, ["not supported", "Lowercase"]),
    ]
    for keys, value, mentions in cases:
        data = json.loads(json.dumps(base))
        node = data
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data), encoding="utf-8")
        assert_error(run_kiln(kiln, "tokenize", bad, "--info"), mentions=mentions)


FAMILIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "llm_families")


@pytest.mark.parametrize("name", ["llama2_untied", "phi3_partial", "gemma"])
def test_family_fixtures_generate_from_text(kiln, tmp_path, name):
    """The tokenizers of scripts/make_tokenizer_fixtures.py: kiln's ids equal `tokenizers`' and `kiln generate`
    runs the fixture from a text prompt (its prompt, bos included, counted as `tokenizers` counts it)."""
    d = os.path.join(FAMILIES, name)
    ref = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    strings = ["the quick brown fox", " hello  world ", "Zebra \u00e9\u00e9 \U0001F600!", "", "<s>x</s>",
               "<|user|>\nhi<|end|>\n<|assistant|>", "<start_of_turn>user\nhi<end_of_turn>"]
    for row, s in zip(kiln_jsonl(kiln, d, strings, tmp_path), strings):
        assert row["ids"] == ref.encode(s).ids, s
        assert row["text"] == row["stream"] == ref.decode(row["ids"], skip_special_tokens=False), s
    prompt = "the lazy dog writes"
    proc = run_kiln(kiln, "generate", d, "--prompt", prompt, "--max-tokens", "6", "--temperature", "0")
    assert_ok(proc)
    assert f"prompt {len(ref.encode(prompt).ids)} tokens" in proc.stderr
