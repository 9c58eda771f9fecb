"""Values at and beyond their limits through the `kiln` CLI: engine headers with fields no calendar or
build can hold, and the messages a user meets for them. Every case must end cleanly (no signal, no
sanitizer report; this file also runs in the sanitizer build) with a message naming what is wrong.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_cli_bad_values.py
"""
import struct

import onnx
import pytest

from conftest import assert_error, assert_ok, run_kiln
from llm_checkpoints import make_gpt2
from test_cli_errors import HEADER_CRC_OFFSET, resealed, tiny_model

CREATED_OFFSET = 24         # u64 creation time (docs/engine-format.md, "Header")
FORMAT_VERSION_OFFSET = 8   # u32 format version


@pytest.fixture(scope="module")
def engines(kiln, tmp_path_factory):
    """A directory with tiny.onnx, tiny.kiln (a graph engine) and llm.kiln (a tiny GPT-2 engine)."""
    d = tmp_path_factory.mktemp("bad_values")
    onnx.save(tiny_model(), d / "tiny.onnx")
    assert_ok(run_kiln(kiln, "build", d / "tiny.onnx", "-o", d / "tiny.kiln"))
    make_gpt2(d / "gpt2", vocab=64, n_positions=32)
    assert_ok(run_kiln(kiln, "build", "--hf", d / "gpt2", "-o", d / "llm.kiln"))
    return d


def patched(src, dst, offset, fmt, value):
    """dst: the engine src with the header field at offset set to value (struct format fmt), resealed."""
    data = bytearray(src.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    dst.write_bytes(resealed(data))
    return dst


@pytest.mark.parametrize("engine", ["tiny.kiln", "llm.kiln"])
@pytest.mark.parametrize("created", [1 << 62, (1 << 64) - 1, 1 << 40])
def test_inspect_creation_time_beyond_the_calendar(kiln, engines, tmp_path, engine, created):
    """A creation time of 2^62 s made gmtime return NULL into strftime (a crash); now it is shown raw."""
    path = patched(engines / engine, tmp_path / engine, CREATED_OFFSET, "<Q", created)
    proc = run_kiln(kiln, "inspect", path, "--no-layers")
    assert_ok(proc)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("built by:"))
    assert str(created) in line or "UTC" in line, proc.stdout
    if created >= 1 << 62:
        assert f"invalid date ({created} seconds since 1970)" in line, proc.stdout
