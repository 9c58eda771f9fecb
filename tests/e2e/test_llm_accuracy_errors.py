"""Bad arguments and inputs of `kiln perplexity`, `kiln compare --llm` and `kiln build --hf --weights`:
each a clear message and a non-zero exit, never a crash (also run under the sanitizers)."""
import os

import pytest

from conftest import assert_error, run_kiln

KJV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "kjv-gpt2")


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("And God said, Let there be light: and there was light.")
    return str(path)


@pytest.mark.parametrize("args,mentions,code", [
    ([], ["no model"], 2),
    ([KJV], ["--text"], 2),
    ([KJV, "--text", "T", "--ctx", "1"], ["--ctx"], 2),
    ([KJV, "--text", "T", "--ctx", "16", "--stride", "17"], ["--stride", "--ctx"], 2),
    ([KJV, "--text", "T", "--target", "tpu"], ["--target"], 2),
    ([KJV, "--text", "T", "--bogus", "1"], ["--bogus"], 2),
    ([KJV, "--text", "T", "--ctx", "257"], ["ctx 257", "256"], 1),
    ([KJV, "--text", "/nonexistent/text.txt"], ["text.txt", "no such file"], 1),
])
def test_perplexity_bad_arguments(kiln, text_file, args, mentions, code):
    args = [text_file if a == "T" else a for a in args]
    assert_error(run_kiln(kiln, "perplexity", *args), mentions=mentions, code=code)


@pytest.mark.parametrize("text,mentions", [("And", ["1 token", "at least 2"]), ("", ["0 tokens", "at least 2"])])
def test_perplexity_of_a_text_too_short(kiln, tmp_path, text, mentions):
    path = tmp_path / "short.txt"
    path.write_text(text)
    assert_error(run_kiln(kiln, "perplexity", KJV, "--text", str(path)), mentions=mentions)


@pytest.mark.parametrize("args,mentions,code", [
    ([KJV], ["two models"], 2),
    ([KJV, KJV], ["--prompts"], 2),
    ([KJV, KJV, "--prompts", "P", "--max-tokens", "0"], ["--max-tokens"], 2),
    ([KJV, KJV, "--prompts", "P", "--target-b", "gpu"], ["--target-b"], 2),
    ([KJV, KJV, "--prompts", "EMPTY"], ["holds no prompt"], 1),
    ([KJV, "/nonexistent/model", "--prompts", "P"], ["model"], 1),
])
def test_compare_llm_bad_arguments(kiln, tmp_path, args, mentions, code):
    (tmp_path / "p.txt").write_text("And God said\n")
    (tmp_path / "empty.txt").write_text("\n\n")
    subst = {"P": str(tmp_path / "p.txt"), "EMPTY": str(tmp_path / "empty.txt")}
    args = [subst.get(a, a) for a in args]
    assert_error(run_kiln(kiln, "compare", "--llm", *args), mentions=mentions, code=code)


@pytest.mark.parametrize("args,mentions", [
    (["--weights", "int3"], ["--weights", "int3"]),
    (["--weights-skip", "embed"], ["only with --weights int8"]),
    (["--weights", "int8", "--weights-skip", "norms"], ["norms"]),
    (["--weights", "int8", "--fp16"], ["exclude each other"]),
])
def test_build_weights_bad_arguments(kiln, tmp_path, args, mentions):
    assert_error(run_kiln(kiln, "build", "--hf", KJV, "-o", str(tmp_path / "x.kiln"), *args), mentions=mentions,
                 code=2)
