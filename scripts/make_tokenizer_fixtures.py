#!/usr/bin/env python3
"""make_tokenizer_fixtures.py — writes tokenizer.json and tokenizer_config.json into three fixtures of
tests/data/llm_families, so that `kiln generate` runs them from text: SentencePiece-style BPE
tokenizers trained here with Hugging Face `tokenizers`, in the form of the published files of their
families, with exactly the fixtures' 128 ids (every id the model can sample decodes):
  llama2_untied  Llama 2 (also Mistral v0.1 and Phi-3): ids 0-2 <unk> <s> </s>; normalizer
                 Sequence[Prepend("▁"), Replace(" ", "▁")]; no pre-tokenizer; BPE with byte_fallback and
                 fuse_unk (the vocabulary is too small for the 256 "<0xXX>" tokens, so characters
                 outside it become <unk>); decoder Sequence[Replace("▁", " "), ByteFallback, Fuse,
                 Strip(" ", 1, 0)]; post-processor TemplateProcessing "<s> $A"
  phi3_partial   Phi-3: the Llama 2 form with its chat tokens <|user|> <|assistant|> <|end|> (special)
  gemma          Gemma: <pad> <bos> <eos> <unk> <start_of_turn> <end_of_turn> (bos 1 and eos 2, as the
                 fixture's config.json says); normalizer Replace(" ", "▁") alone; the decoder without
                 Strip; template "<bos> $A"
The merges are learnt over Metaspace words of a small English text; the files are deterministic.

Run:  .venv/bin/python scripts/make_tokenizer_fixtures.py [tests/data/llm_families]
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPACE = "\u2581"
VOCAB = 128
TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "a model reads the text and writes the next word",
    "hello world, hello there; one two three four five six seven eight nine ten",
    "The Cat sat on the Mat. It is a good day to write some tests!",
] * 50

FAMILIES = {
    "llama2_untied": {"specials": ["<unk>", "<s>", "</s>"], "bos": "<s>", "eos": "</s>", "strip": True,
                      "normalizer": normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])},
    "phi3_partial": {"specials": ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>"], "bos": "<s>",
                     "eos": "</s>", "strip": True,
                     "normalizer": normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])},
    "gemma": {"specials": ["<pad>", "<bos>", "<eos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], "bos": "<bos>",
              "eos": "<eos>", "strip": False, "normalizer": normalizers.Replace(" ", SPACE)},
}


def make(spec):
    """The tokenizer of one family, with ids 0 .. VOCAB-1."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=spec["specials"]))
    tok.normalizer = spec["normalizer"]
    tok.pre_tokenizer = None
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if spec["strip"] else []))
    bos = spec["bos"]
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB, tok.get_vocab_size(with_added_tokens=True)
    return tok


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "data", "llm_families")
    for name, spec in FAMILIES.items():
        tok = make(spec)
        d = os.path.join(root, name)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": spec["bos"], "eos_token": spec["eos"], "add_bos_token": True,
                       "add_eos_token": False}, f, indent=1)
            f.write("\n")
        print(f"{d}: {VOCAB} ids, bos {tok.token_to_id(spec['bos'])}, eos {tok.token_to_id(spec['eos'])}")


if __name__ == "__main__":
    main()
