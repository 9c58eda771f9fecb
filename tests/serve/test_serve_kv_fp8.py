"""kiln serve with an LLM whose config asks for the FP8 KV cache (`"kv_cache_dtype": "fp8"`, scales
from `"kv_calib_text"`, a file in the model's directory): completions run, greedy text close to the
16-bit / fp32 cache's (the same first tokens), a missing calibration file or a bad value refused
naming the key.

Run:  KILN_BIN=build/kiln python -m pytest tests/serve/test_serve_kv_fp8.py
"""
import json
import shutil

from conftest import KJV_GPT2, serve

PROMPT = "And God said, Let there be light: and there was light. And God saw the light,"
CALIB = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
         "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. ")


def complete(kiln, repo):
    with serve(kiln, repo) as s:
        status, out = s.json("/v1/completions", {"model": "kjv", "prompt": PROMPT, "max_tokens": 8, "temperature": 0})
        assert status == 200, out
        return out["choices"][0]["text"], "".join(s.log)


def test_fp8_kv_cache_config(kiln, tmp_path):
    texts = {}
    for name, config in (("auto", {}), ("fp8", {"kv_cache_dtype": "fp8", "kv_calib_text": "calib.txt"})):
        shutil.copytree(KJV_GPT2, tmp_path / name / "kjv" / "1")
        (tmp_path / name / "kjv" / "calib.txt").write_text(CALIB)
        (tmp_path / name / "kjv" / "config.json").write_text(json.dumps(config))
        texts[name], log = complete(kiln, tmp_path / name)
        assert "without a calibration text" not in log
    assert texts["fp8"] and texts["fp8"].split()[:2] == texts["auto"].split()[:2], texts


def test_fp8_kv_cache_config_errors(kiln, tmp_path):
    shutil.copytree(KJV_GPT2, tmp_path / "kjv" / "1")
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"kv_cache_dtype": "fp8", "kv_calib_text": "none.txt"}))
    with serve(kiln, tmp_path) as s:
        log = "".join(s.log)
        assert "none.txt" in log, log
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"kv_cache_dtype": "int4"}))
    with serve(kiln, tmp_path) as s:
        log = "".join(s.log)
        assert "kv_cache_dtype" in log, log
