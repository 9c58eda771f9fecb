"""`kiln build --fp8` on the CPU, the reference every FP8 engine is checked against: the BERT-style
encoder's MatMul / Gemm layers (13) and the ResNet-style CNN's Gemm head become kiln.F8MatMul (E4M3
activations and weights, per-tensor scales from the --int8 calibration), the CNN's convolutions stay
float32; the engines' accuracy against the float32 model in onnxruntime on held-out inputs; a cache
written by an --int8 build serves an --fp8 one; --layer-precision PATTERN:fp8 picks layers; kiln
compare --fp8 reports the FP8 engine's error.

Accuracy bounds (E4M3 keeps 3 mantissa bits, so looser than int8's per-channel weights on these
random-weight models): ResNet cosine >= 0.999, top-1 >= 7 of 8; BERT cosine >= 0.99 per output."""
import numpy as np
import onnx
import pytest

import models
from conftest import assert_error, assert_ok, ort_run, read_outputs, run_kiln, write_inputs

BOUNDS = {"resnet": 0.999, "bert": 0.99}
HELD_OUT = {"resnet": dict(batch=8, seq=None), "bert": dict(batch=4, seq=16)}
FP8_LAYERS = {"resnet": 1, "bert": 13}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """{kind: (model path, calibration dir)}: the float32 models and 4 calibration batches each."""
    d = tmp_path_factory.mktemp("fp8")
    out = {}
    for kind in ("resnet", "bert"):
        model = d / f"{kind}.onnx"
        onnx.save(models.BUILDERS[kind](), model)
        calib = d / f"{kind}_calib"
        calib.mkdir()
        for k in range(4):
            feeds = models.make_inputs(kind, 4, 16 if kind == "bert" else None, seed=300 + k)
            for name, arr in feeds.items():
                np.save(calib / (f"batch{k}.npy" if kind == "resnet" else f"{name}.{k}.npy"), arr)
        out[kind] = (model, calib)
    return out


def layers(kiln, engine, op):
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    return sum(1 for line in proc.stdout.splitlines() if line.split()[1:2] == [op])


def cosines(kiln, engine, model, kind, workdir):
    feeds = models.make_inputs(kind, HELD_OUT[kind]["batch"], HELD_OUT[kind]["seq"], seed=999)
    ref = ort_run(model, feeds)
    proc = run_kiln(kiln, "run", engine, *write_inputs(workdir / "in", feeds), "--output-dir", workdir / "out")
    assert_ok(proc)
    got = read_outputs(workdir / "out", list(ref))
    out = {}
    for name, r in ref.items():
        g = got[name].astype(np.float64)
        out[name] = (float((g * r).sum() / (np.linalg.norm(g) * np.linalg.norm(r))), g, r)
    return out


@pytest.mark.parametrize("kind", ["resnet", "bert"])
def test_fp8_accuracy(kiln, tmp_path, calibrated, kind):
    model, calib = calibrated[kind]
    engine = tmp_path / "fp8.kiln"
    proc = run_kiln(kiln, "build", model, "-o", engine, "--fp8", "--calib", calib, "--verbose")
    assert_ok(proc)
    assert f"fp8: {FP8_LAYERS[kind]} layers in E4M3" in proc.stderr, proc.stderr
    assert layers(kiln, engine, "F8MatMul") == FP8_LAYERS[kind]
    assert layers(kiln, engine, "QMatMul") == 0 and layers(kiln, engine, "QConv") == 0
    for name, (cosine, g, r) in cosines(kiln, engine, model, kind, tmp_path).items():
        assert cosine >= BOUNDS[kind], f"{name}: cosine similarity {cosine:.5f} to fp32"
        assert cosine < 1.0 - 1e-9, f"{name}: no rounding at all: the fp8 layers did not run"
        if kind == "resnet":
            assert (g.argmax(1) == r.argmax(1)).sum() >= 7


def test_fp8_from_int8_cache_and_rules(kiln, tmp_path, calibrated):
    """An --int8 build's calibration cache gives an --fp8 build its thresholds (no data needed); a
    rule picks the fp8 layers, and with --int8 the convolutions go to int8 beside the fp8 head."""
    model, calib = calibrated["resnet"]
    cache = tmp_path / "c.calib"
    assert_ok(run_kiln(kiln, "build", model, "-o", tmp_path / "i.kiln", "--int8", "--calib", calib,
                       "--calib-cache", cache))
    engine = tmp_path / "f.kiln"
    proc = run_kiln(kiln, "build", model, "-o", engine, "--fp8", "--calib-cache", cache)
    assert_ok(proc)
    assert layers(kiln, engine, "F8MatMul") == 1
    mixed = tmp_path / "m.kiln"
    assert_ok(run_kiln(kiln, "build", model, "-o", mixed, "--int8", "--layer-precision", "/fc/*:fp8", "--calib", calib))
    assert layers(kiln, mixed, "F8MatMul") == 1 and layers(kiln, mixed, "QConv") == 6
    assert layers(kiln, mixed, "QMatMul") == 0
    assert_error(run_kiln(kiln, "build", model, "-o", tmp_path / "x.kiln", "--fp8"), mentions=["--fp8", "--calib"])


def test_compare_fp8(kiln, tmp_path, calibrated):
    """kiln compare --fp8 builds the FP8 engine and reports its error against fp32, naming its layers."""
    model, calib = calibrated["resnet"]
    held_out = tmp_path / "held_out.npy"
    np.save(held_out, models.make_inputs("resnet", 8, seed=999)["input"])
    proc = run_kiln(kiln, "compare", model, "--fp8", "--calib", calib, "--atol", "0.5", "--input", f"input={held_out}")
    assert_ok(proc)
    assert "1 fp8 layer" in proc.stdout and "PASS" in proc.stdout, proc.stdout
