"""kiln's tokenizer (src/llm/tokenizer.h, through the hidden `kiln tokenize` command) against Hugging Face
`tokenizers` on byte-level BPE tokenizers trained here, offline: GPT-2 style (ByteLevel pre-tokenizer, with
and without add_prefix_space), Llama-3 style (Split with Llama-3's regex, then ByteLevel, ignore_merges,
special tokens and a bos template), plus the same with merges in the old "a b" form, and Qwen2 style (NFC
normalizer, Split with Qwen2's regex, then ByteLevel, ChatML special tokens, no template). For a varied corpus
(scripts, emoji, combining marks, RTL, white-space runs, CRLF, numbers, code, contractions in both cases,
added tokens inside the text, random mixes) the ids must be identical, decode must equal `tokenizers`'
decode, the streaming decode must equal decode, and decode(encode(s)) == s without special tokens.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_tokenizer.py
"""
import json
import random
import subprocess
import unicodedata

import pytest
import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

from conftest import KILN_TIMEOUT_S, assert_error, assert_ok, run_kiln

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? We'll see; they'd know.",
    "def encode(self, text: str) -> list[int]:\n    return [self.vocab[t] for t in text.split()]\n",
    "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }  // dot product\r\n",
    "Numbers: 1234567890, 3.14159, 2024-01-15, $1,000,000.00, 0xFF, 1e-9, ½ ¾ ²³.",
    "日本語のテキストも少し含めます。中文文本也包括在内。한국어 텍스트도 있습니다.",
    "Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ — and dashes – “quotes” ‘single’ «guillemets».",
    "Ünïcödé àccents café naïve façade résumé Ångström; combining: e\u0301 a\u0308 n\u0303.",
    "العربية نص من اليمين إلى اليسار. עברית גם כן. हिन्दी पाठ। ภาษาไทย",
    "    indented line\n\ttabbed line\n\n\nmultiple newlines   trailing spaces   \n",
    "I'M SHOUTING, YOU'RE WHISPERING, THEY'VE LEFT, HE'LL RETURN, SHE'D GO, IT'S FINE.",
    "<html><body><p class=\"x\">Hello &amp; welcome!</p></body></html>",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
] * 20

CORPUS = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "Hello world", " Hello world", "Hello  world", "Hello   world  ",
    "hello\nworld", "hello\r\nworld\r\n", "line1\n\n\nline2", "  leading", "trailing  ", "tab\there\t\tthere",
    "It's", "it's", "IT'S", "It'S", "we're we'RE WE'RE", "I've I'VE", "I'm I'M", "you'll YOU'LL You'Ll",
    "he'd HE'D", "don't DON'T", "'s", "'", "''", "'x", "rock 'n' roll", "the dogs' bones", "'ſ 'ſt",
    "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "2024-01-15", "0x1F", "v1.2.3",
    "½ ¾ ² ³ ⅓ Ⅻ ①②③ ٠١٢٣ ０１２", "abc123def", "123abc", "a1b2c3",
    "日本語のテキスト", "中文文本", "한국어", "こんにちは世界", "東京タワー 2024年",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "❤️", "emoji😀inside", " 😀 😃 ",
    "e\u0301", "cafe\u0301", "a\u0308\u0304", "\u0301 lone combining", "Ångström", "ﬁ ligature",
    "مرحبا بالعالم", "שלום עולם", "हिन्दी", "ภาษาไทย", "Ελληνικά", "Кириллица", "ქართული",
    "\u00a0nbsp\u00a0", "ideographic\u3000space", "line\u2028sep\u2029para", "nel\u0085x", "zero\u200bwidth",
    "\u000b\u000c vertical", "\x00 nul", "\x1f\x7f ctrl", "mixed \t\n \r\n  spaces",
    "def f(x):\n    return x * 2\n", "if (a && b) { return c; }", "x = [1, 2, 3]; y = {'k': 'v'}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }", "https://example.com/path?q=1&r=2#frag",
    "user@example.com", "C:\\Windows\\System32", "$HOME/.config", "~~~!!!???...", "-----", "=====",
    "...", "!?", "(parenthesized)", "[brackets]", "{braces}", "<angle>", "a.b.c", "a-b_c",
    "     \n     x", "x\n     ", "  \n  \n  ", "\n\n\n", "\r\r\r", " \r\n ", "a \n b", "a\t\n\tb",
    "SHOUTING WORDS", "MiXeD CaSe", "camelCaseWord", "snake_case_word", "PascalCase",
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
    "<|begin_of_text|>Hello<|eot_id|>", "x <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|begin_of_text|", "<|", "|>", "<custom>", "a<custom>b", "pre <custom> post", "<custom><custom>",
    "word <stripme> word", "word<stripme>word", "  <stripme>  ", "<|end_of_text|> tail",
    "\u212b \u2126 \u1100\u1161\u11a8 \uac00\u11a8 \u1e0b\u0323 q\u0307\u0323 \u0344 \u0958 \uf900",
    "a\u0323\u0302\u0301 o\u031b\u0303 \u00c5\u0301 e\u0301\u0301 \u0301\u0301e", "<|im_start|>e\u0301<|im_end|>",
    "Quiz Xylophone Zebra", "QQQ XXX ZZZ XZ ZX", "aQb aXb aZb", "¡Hola! ¡¡", "QX¡Z", "IQ 100 XZ",
]


def random_corpus(n, seed):
    """n random strings mixing characters of every class the pre-tokenizer patterns distinguish."""
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\t", "\n", "\r\n", "\r",
        "'", "'s", "'S", "'re", "'LL", "'ve", "'d", "'M", "'T", ".,;:!?-_()[]{}<>/\\\"@#$%^&*+=|~`",
        "éüñçøåßœæ", "ſ", "日本語中文字", "한국어", "😀👍🏽❤️🇫🇷", "\u0301\u0308", "مرحبا", "שלום", "हिन्दी",
        "²³½Ⅻ①٣０", "\u00a0\u3000\u2028\u0085", "\u200b\u200d", "<|endoftext|>", "<custom>", "<stripme>",
        "<|begin_of_text|>", "<|eot_id|>", "the", " the", "ing", "tion", "QXZ¡",
    ]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 30)
        parts = []
        for _ in range(k):
            pool = rng.choice(pools)
            parts.append(pool if len(pool) > 3 and pool.startswith("<") else
                         "".join(rng.choice(pool) for _ in range(rng.randint(1, 4))))
        out.append("".join(parts))
    return out


ALL_STRINGS = CORPUS + TRAIN_TEXT[:12] + random_corpus(600, 1234)


def train_gpt2_style(add_prefix_space):
    """A byte-level BPE as ByteLevelBPETokenizer trains it (GPT-2's pre-tokenizer)."""
    tok = tokenizers.ByteLevelBPETokenizer(add_prefix_space=add_prefix_space)
    tok.train_from_iterator(TRAIN_TEXT, vocab_size=1200, min_frequency=2, special_tokens=["<|endoftext|>"])
    tok.add_tokens(["<custom>", AddedToken("<stripme>", lstrip=True, rstrip=True)])
    return tok


def train_llama3_style():
    """models.BPE(ignore_merges) with Llama-3's Split + ByteLevel pre-tokenizer, special tokens and a bos
    template."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=LLAMA3_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    tok.add_tokens(["<custom>", AddedToken("<stripme>", lstrip=True, rstrip=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def train_qwen2_style():
    """models.BPE with Qwen2's NFC normalizer, Split + ByteLevel pre-tokenizer and ChatML special tokens
    (Qwen2's tokenizer.json has no post-processor template: no bos)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=QWEN2_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    tok.add_tokens(["<custom>", AddedToken("<stripme>", lstrip=True, rstrip=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def save(tok, directory, string_merges=False):
    """Writes tok to directory/tokenizer.json (merges rewritten as "a b" strings when asked)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    if string_merges:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in data["model"]["merges"]]
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def with_fallback(path, directory, fuse_unk):
    """The tokenizer at path with a few byte-level characters that no merge uses taken out of the
    vocabulary: 'Q' and '¡' (bytes C2 A1) then come out as byte_fallback tokens "<0x51>", "<0xC2>",
    "<0xA1>", and 'X' and 'Z', which have none, as "<unk>" (consecutive ones fused with fuse_unk)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data["model"]
    used = {c for merge in model["merges"] for side in merge for c in side}
    assert not {"Q", "X", "Z", "\u00a1"} & used, "the training text changed: pick other characters"
    for c in ("Q", "X", "Z", "\u00a1"):
        del model["vocab"][c]
    next_id = max([*model["vocab"].values(), *(t["id"] for t in data["added_tokens"])]) + 1
    for i, tok in enumerate(["<unk>", "<0x51>", "<0xC2>", "<0xA1>"]):
        model["vocab"][tok] = next_id + i
    model.update(byte_fallback=True, unk_token="<unk>", fuse_unk=fuse_unk)
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "tokenizer.json"
    out.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def tokenizers_dir(tmp_path_factory):
    """name -> (tokenizer.json path, the `tokenizers` Tokenizer loaded from that file)."""
    root = tmp_path_factory.mktemp("tok")
    made = {
        "gpt2_style": save(train_gpt2_style(False), root / "gpt2_style"),
        "gpt2_prefix_space": save(train_gpt2_style(True), root / "gpt2_prefix_space"),
        "llama3_style": save(train_llama3_style(), root / "llama3_style"),
        "llama3_string_merges": save(train_llama3_style(), root / "llama3_string_merges", string_merges=True),
        "qwen2_style": save(train_qwen2_style(), root / "qwen2_style"),
    }
    made["llama3_fallback"] = with_fallback(made["llama3_style"], root / "llama3_fallback", fuse_unk=False)
    made["llama3_fallback_fused"] = with_fallback(made["llama3_style"], root / "llama3_fallback_fused", fuse_unk=True)
    return {name: (path, Tokenizer.from_file(str(path))) for name, path in made.items()}


NAMES = ["gpt2_style", "gpt2_prefix_space", "llama3_style", "llama3_string_merges", "llama3_fallback",
         "llama3_fallback_fused", "qwen2_style"]


def run_kiln_stdin(kiln, stdin, *args):
    """kiln with args and `stdin` as its standard input."""
    return subprocess.run([kiln, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=KILN_TIMEOUT_S)


def kiln_jsonl(kiln, path, strings, tmp_path, *flags):
    """kiln tokenize --jsonl over strings: one dict per string."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(s) + "\n" for s in strings), encoding="utf-8")
    proc = run_kiln(kiln, "tokenize", path, "--jsonl", src, *flags)
    assert_ok(proc)
    rows = [json.loads(line) for line in proc.stdout.split("\n") if line]  # not splitlines: U+2028
    assert len(rows) == len(strings)
    return rows


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_special", [True, False])
def test_ids_and_decode_match_tokenizers(kiln, tokenizers_dir, tmp_path, name, add_special):
    path, ref = tokenizers_dir[name]
    rows = kiln_jsonl(kiln, path, ALL_STRINGS, tmp_path, *([] if add_special else ["--no-special"]))
    mismatches = []
    for s, row in zip(ALL_STRINGS, rows):
        want = ref.encode(s, add_special_tokens=add_special).ids
        if row["ids"] != want:
            mismatches.append(f"{s!r}:\n  kiln {row['ids']}\n  HF   {want}")
            continue
        text = ref.decode(want, skip_special_tokens=False)
        assert row["text"] == text, f"decode of {s!r}: kiln {row['text']!r}, HF {text!r}"
        assert row["stream"] == text, f"streaming decode of {s!r}: {row['stream']!r}, decode {text!r}"
        # without special tokens the text comes back (except where <stripme>, lstrip / rstrip, took
        # spaces along; add_prefix_space adds spaces and <unk> loses characters)
        if not add_special and name in ("gpt2_style", "llama3_style") and "<stripme>" not in s:
            assert row["text"] == s, f"round trip of {s!r} gave {row['text']!r}"
        if not add_special and name == "qwen2_style" and "<stripme>" not in s:  # comes back in NFC
            assert row["text"] == unicodedata.normalize("NFC", s), f"round trip of {s!r} gave {row['text']!r}"
    assert not mismatches, f"{len(mismatches)} of {len(ALL_STRINGS)} strings differ:\n" + "\n".join(mismatches[:10])


def test_llama3_specials_and_info(kiln, tokenizers_dir):
    path, ref = tokenizers_dir["llama3_style"]
    proc = run_kiln(kiln, "tokenize", path, "--info")
    assert_ok(proc)
    info = json.loads(proc.stdout)
    assert info["vocab_size"] == ref.get_vocab_size(with_added_tokens=True)
    assert info["bos_id"] == ref.token_to_id("<|begin_of_text|>")


def test_decode_skip_special(kiln, tokenizers_dir):
    path, ref = tokenizers_dir["llama3_style"]
    ids = ref.encode("<|begin_of_text|>Hi there<|eot_id|> ok").ids
    proc = run_kiln_stdin(kiln, json.dumps(ids), "tokenize", path, "--decode", "--skip-special")
    assert_ok(proc)
    assert proc.stdout == ref.decode(ids, skip_special_tokens=True)


def test_streaming_decode_splits_utf8(kiln, tokenizers_dir, tmp_path):
    """Characters whose bytes are spread over several tokens come out whole in the streaming decode."""
    path, ref = tokenizers_dir["gpt2_style"]
    strings = ["𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✨🦀🦀 ᚠᛇᚻ ꧁꧂", "\U0010FFFD\U000E0001 rare planes"]
    for row, s in zip(kiln_jsonl(kiln, path, strings, tmp_path, "--no-special"), strings):
        assert row["ids"] == ref.encode(s).ids
        assert row["stream"] == row["text"] == s


def test_encode_speed(kiln, tokenizers_dir, tmp_path):
    """A few MB encode well under a second, with ids identical to `tokenizers`."""
    for name in ("gpt2_style", "llama3_style"):
        path, ref = tokenizers_dir[name]
        text = "\n".join(ALL_STRINGS) * 40
        src = tmp_path / "big.txt"
        src.write_bytes(text.encode("utf-8"))
        proc = run_kiln(kiln, "tokenize", path, "--text", src, "--count", "--no-special")
        assert_ok(proc)
        got = json.loads(proc.stdout)
        want = ref.encode(text, add_special_tokens=False).ids
        assert got["count"] == len(want)
        # CPU time: the wall time of a loaded CI machine says little
        assert got["cpu_ms"] < 1500, f"{name}: {got['bytes'] / 1e6:.1f} MB took {got['cpu_ms']:.0f} ms of CPU"
        proc = run_kiln(kiln, "tokenize", path, "--text", src, "--no-special")
        assert_ok(proc)
        assert json.loads(proc.stdout)["ids"] == want


def test_unsupported_parts_are_refused(kiln, tokenizers_dir, tmp_path):
    path, _ = tokenizers_dir["llama3_style"]
    base = json.loads(path.read_text(encoding="utf-8"))
    cases = [
        (("pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"), r"\p{L}+|\s+", ["not supported", r"\p{L}+"]),
        (("model", "type"), "WordPiece", ["not supported", "WordPiece"]),
        (("normalizer",), {"type": "NFKC"}, ["not supported", "NFKC"]),
        (("decoder",), {"type": "Metaspace"}, ["not supported", "Metaspace"]),
        (("post_processor",), {"type": "RobertaProcessing"}, ["not supported", "RobertaProcessing"]),
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
    assert_error(run_kiln(kiln, "tokenize", tmp_path / "missing.json"), mentions=["missing.json"])
