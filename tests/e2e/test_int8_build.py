"""`kiln build --int8`: post-training calibration of the ResNet-style CNN and the BERT-style encoder
(tests/e2e/models.py, written with onnx.helper) on the CPU, the engine's accuracy against the float32
model in onnxruntime on held-out inputs, the calibration cache (a rebuild from it needs no data and
gives the same engine; another model's cache is refused), batches in a .npz, and the option errors.

Accuracy bounds (measured values in docs/quantization.md): ResNet cosine similarity >= 0.9995, max
error <= 5% of max|fp32|, top-1 agreement >= 7 of 8; BERT cosine >= 0.998 per output, max error <=
20% of max|fp32| (a few hidden units of a random-weight model)."""
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from conftest import assert_error, assert_ok, ort_run, read_outputs, run_kiln, write_inputs

BOUNDS = {"resnet": {"cosine": 0.9995, "max_rel": 0.05},
          "bert": {"cosine": 0.998, "max_rel": 0.20}}
HELD_OUT = {"resnet": dict(batch=8, seq=None), "bert": dict(batch=4, seq=16)}
LAYERS = {"resnet": {"QConv": 6, "QMatMul": 1}, "bert": {"QMatMul": 13}}  # the Gemm heads are QMatMul too


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """{kind: (model path, calibration dir)}: the float32 models and 4 calibration batches each
    (seeds disjoint from the held-out inputs); the CNN's as one file per batch, BERT's per input."""
    d = tmp_path_factory.mktemp("int8")
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


def build(kiln, model, engine, *args):
    proc = run_kiln(kiln, "build", model, "-o", engine, "--int8", *args)
    assert_ok(proc)
    return proc


def run_engine(kiln, engine, feeds, workdir):
    proc = run_kiln(kiln, "run", engine, *write_inputs(workdir / "in", feeds), "--output-dir", workdir / "out")
    assert_ok(proc)
    return workdir / "out"


def integer_layers(kiln, engine, op):
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    return sum(1 for line in proc.stdout.splitlines() if line.split()[1:2] == [op])


@pytest.mark.parametrize("calibrator", ["entropy", "minmax", "percentile", "percentile:99.9"])
@pytest.mark.parametrize("kind", ["resnet", "bert"])
def test_int8_accuracy(kiln, tmp_path, calibrated, kind, calibrator):
    model, calib = calibrated[kind]
    engine = tmp_path / "int8.kiln"
    build(kiln, model, engine, "--calib", calib, "--calibrator", calibrator)
    for op, count in LAYERS[kind].items():
        assert integer_layers(kiln, engine, op) == count, f"expected {count} {op} layers in the engine"
    feeds = models.make_inputs(kind, HELD_OUT[kind]["batch"], HELD_OUT[kind]["seq"], seed=999)
    ref = ort_run(model, feeds)
    got = read_outputs(run_engine(kiln, engine, feeds, tmp_path), list(ref))
    for name, r in ref.items():
        g = got[name].astype(np.float64)
        cosine = float((g * r).sum() / (np.linalg.norm(g) * np.linalg.norm(r)))
        max_rel = float(np.abs(g - r).max() / np.abs(r).max())
        assert cosine >= BOUNDS[kind]["cosine"], f"{name}: cosine similarity {cosine:.5f} to fp32"
        assert max_rel <= BOUNDS[kind]["max_rel"], f"{name}: max error {max_rel:.3g} of max|fp32|"
    if kind == "resnet":
        agree = int((got["output"].argmax(1) == ref["output"].argmax(1)).sum())
        assert agree >= 7, f"top-1 agrees with fp32 on {agree} of 8 images"


def test_cache_reuse_and_refusal(kiln, tmp_path, calibrated):
    model, calib = calibrated["resnet"]
    cache = tmp_path / "resnet.calib"
    first = tmp_path / "first.kiln"
    build(kiln, model, first, "--calib", calib, "--calib-cache", cache)
    assert cache.is_file() and cache.read_text().startswith("kiln-int8-calibration 1\n")
    again = tmp_path / "again.kiln"
    proc = build(kiln, model, again, "--calib-cache", cache, "--verbose")  # no data: thresholds from the cache
    assert "calibration cache" in proc.stderr, proc.stderr
    feeds = models.make_inputs("resnet", 2, seed=999)
    a = np.load(run_engine(kiln, first, feeds, tmp_path / "a") / "output.npy")
    b = np.load(run_engine(kiln, again, feeds, tmp_path / "b") / "output.npy")
    assert np.array_equal(a, b), "the engine rebuilt from the cache computes differently"
    bert, _ = calibrated["bert"]
    proc = run_kiln(kiln, "build", bert, "-o", tmp_path / "bert.kiln", "--int8", "--calib-cache", cache)
    assert_error(proc, mentions=["another model", str(cache.name)])


def test_option_errors(kiln, tmp_path, calibrated):
    model, calib = calibrated["resnet"]
    out = tmp_path / "x.kiln"
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8"), mentions=["--calib"])
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--calib", calib), mentions=["--int8"], code=2)
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8", "--calib", calib, "--calibrator", "kl"),
                 mentions=["calibrator", "entropy"])
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8", "--calib", tmp_path / "missing"),
                 mentions=["calibration directory"])
    bert, bert_calib = calibrated["bert"]
    partial = tmp_path / "partial"
    shutil.copytree(bert_calib, partial)
    os.remove(partial / "token_type_ids.3.npy")
    assert_error(run_kiln(kiln, "build", bert, "-o", out, "--int8", "--calib", partial),
                 mentions=["token_type_ids.3.npy"])
    qdq = tmp_path / "qdq.onnx"  # an explicitly quantized model keeps its own scales
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s"], ["y"])],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(np.array(0.1, np.float32), "s")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), qdq)
    assert_error(run_kiln(kiln, "build", qdq, "-o", out, "--int8", "--calib", calib), mentions=["already quantized"])
    assert not out.exists()


def test_npz_batches(kiln, tmp_path, calibrated):
    """The same batches in one .npz give the same thresholds as the directory; a compressed .npz is
    refused with a message saying how to write it."""
    model, calib = calibrated["bert"]
    arrays = {p.name[:-4]: np.load(p) for p in sorted(calib.glob("*.npy"))}
    np.savez(tmp_path / "batches.npz", **arrays)
    build(kiln, model, tmp_path / "dir.kiln", "--calib", calib, "--calib-cache", tmp_path / "dir.calib")
    build(kiln, model, tmp_path / "npz.kiln", "--calib", tmp_path / "batches.npz", "--calib-cache", tmp_path / "npz.calib")
    thresholds = lambda p: p.read_text().splitlines()[3:]  # after the magic, digest and calibrator lines
    assert thresholds(tmp_path / "dir.calib") == thresholds(tmp_path / "npz.calib")
    np.savez_compressed(tmp_path / "packed.npz", **arrays)
    assert_error(run_kiln(kiln, "build", model, "-o", tmp_path / "x.kiln", "--int8", "--calib", tmp_path / "packed.npz"),
                 mentions=["compressed", "np.savez"])


def test_compare_and_inspect(kiln, tmp_path, calibrated):
    """kiln compare builds the INT8 engine and reports its error against the float32 reference;
    kiln inspect counts the integer layers."""
    model, calib = calibrated["resnet"]
    proc = run_kiln(kiln, "compare", model, "--int8", "--calib", calib, "--atol", "0.1")
    assert_ok(proc)
    assert "7 int8 layers" in proc.stdout and "PASS" in proc.stdout, proc.stdout
    engine = tmp_path / "int8.kiln"
    build(kiln, model, engine, "--calib", calib)
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    assert "int8: 7 integer layers" in proc.stdout, proc.stdout
