"""`kiln build --io-format fp16` (trtexec's --inputIOFormats=fp16:chw) on the cpu: the engine's float
inputs and outputs become float16 under their names (inspect, `kiln run` with float16 .npy files),
its results equal the float32-I/O engine's on the same float16-rounded input within float16 rounding
of the outputs, `kiln bench` feeds it float16, and a bad value is a usage error."""
import numpy as np
import pytest

from conftest import assert_error, assert_ok, describe, read_outputs, run_kiln, write_inputs

SAMPLE = "models/sample_cnn.onnx"


@pytest.fixture(scope="module")
def engines(kiln, tmp_path_factory):
    work = tmp_path_factory.mktemp("io_format")
    wide, narrow = work / "fp32io.kiln", work / "fp16io.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", wide))
    proc = run_kiln(kiln, "build", SAMPLE, "-o", narrow, "--io-format", "fp16", "--verbose")
    assert_ok(proc)
    assert "io_fp16: input 'image' is float16" in proc.stdout + proc.stderr, describe(proc)
    return work, wide, narrow


def test_inspect_shows_float16_io(kiln, engines):
    _, _, narrow = engines
    proc = run_kiln(kiln, "inspect", narrow, "--no-layers")
    assert_ok(proc)
    assert "--io-format fp16" in proc.stdout, describe(proc)
    io_lines = [line for line in proc.stdout.splitlines() if line.startswith(("  image:", "  probs:"))]
    assert len(io_lines) == 2 and all("float16" in line for line in io_lines), describe(proc)


def test_run_matches_float32_io_within_fp16_rounding(kiln, engines):
    work, wide, narrow = engines
    x = np.random.default_rng(7).standard_normal((2, 3, 32, 32)).astype(np.float16)
    outs = {}
    for name, engine, feed in (("wide", wide, x.astype(np.float32)), ("narrow", narrow, x)):
        out_dir = work / f"out-{name}"
        assert_ok(run_kiln(kiln, "run", engine, *write_inputs(work / f"in-{name}", {"image": feed}),
                           "--output-dir", out_dir, "--quiet"))
        outs[name] = read_outputs(out_dir, ["probs"])["probs"]
    assert outs["narrow"].dtype == np.float16 and outs["wide"].dtype == np.float32
    np.testing.assert_allclose(outs["narrow"].astype(np.float32), outs["wide"], rtol=1e-3, atol=1e-4)


def test_run_refuses_float32_for_a_float16_input(kiln, engines):
    work, _, narrow = engines
    x = np.zeros((1, 3, 32, 32), np.float32)
    assert_error(run_kiln(kiln, "run", narrow, *write_inputs(work / "in-bad", {"image": x}), "--quiet"),
                 mentions=["image"])


def test_bench_feeds_float16(kiln, engines):
    _, _, narrow = engines
    proc = run_kiln(kiln, "bench", narrow, "--duration", "0.25", "--warmup", "30", "--iterations", "5")
    assert_ok(proc)
    assert "image:float16" in proc.stdout + proc.stderr, describe(proc)


def test_bad_io_format_is_a_usage_error(kiln, tmp_path):
    assert_error(run_kiln(kiln, "build", SAMPLE, "-o", tmp_path / "x.kiln", "--io-format", "int8"),
                 mentions=["--io-format", "int8"], code=2)
