"""Which layers an INT8 build quantizes: `--layer-precision PATTERN:int8` (also without --int8) and
float rules keeping layers out of --int8; `--keep-sensitive N` ranking the layers by the output error
each adds when quantized alone and keeping the N worst, and the first and last, in float (the ranking
checked against onnxruntime: the layer it puts first hurts the fp32 output most when quantized alone);
`--quantize-ends`; and the errors for FP8 and 16-bit fallback on the CPU target, which computes
neither."""
import json
import re

import numpy as np
import onnx
import pytest

import models
from conftest import assert_error, assert_ok, ort_run, read_outputs, run_kiln, write_inputs


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """The ResNet-style CNN (7 quantizable layers) and 4 calibration batches of 4 images."""
    d = tmp_path_factory.mktemp("int8_keep")
    model = d / "resnet.onnx"
    onnx.save(models.BUILDERS["resnet"](), model)
    calib = d / "calib"
    calib.mkdir()
    for k in range(4):
        np.save(calib / f"batch{k}.npy", models.make_inputs("resnet", 4, seed=300 + k)["input"])
    return model, calib


def layers(kiln, engine):
    """{node name: op} of the engine's convolution and matrix layers, from kiln inspect."""
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] in ("QConv", "QMatMul", "FusedConv", "Conv", "Gemm", "MatMul"):
            out[parts[2]] = parts[1]
    return out


def quantized(kiln, engine):
    return sorted(n for n, op in layers(kiln, engine).items() if op.startswith("Q"))


def test_layer_precision_rules(kiln, tmp_path, resnet):
    model, calib = resnet
    engine = tmp_path / "e.kiln"
    # float rule in an --int8 build: the stem stays float, the 6 others quantize
    assert_ok(run_kiln(kiln, "build", model, "-o", engine, "--int8", "--calib", calib,
                       "--layer-precision", "/stem/*:fp32"))
    q = quantized(kiln, engine)
    assert len(q) == 6 and "/stem/conv/Conv" not in q, q
    # int8 rules alone quantize only what they match; later rules win
    assert_ok(run_kiln(kiln, "build", model, "-o", engine, "--calib", calib, "--layer-precision", "/layer2.0/*:int8",
                       "--layer-precision", "/layer2.0/down/*:fp32"))
    assert quantized(kiln, engine) == ["/layer2.0/a/conv/Conv", "/layer2.0/b/conv/Conv"]
    # a rule forcing one layer back into int8 after a catch-all float rule
    assert_ok(run_kiln(kiln, "build", model, "-o", engine, "--int8", "--calib", calib, "--layer-precision", "*:fp32",
                       "--layer-precision", "/fc/*:int8"))
    assert quantized(kiln, engine) == ["/fc/Gemm"]
    assert_error(run_kiln(kiln, "build", model, "-o", engine, "--calib", calib, "--layer-precision", "/nope*:int8"),
                 mentions=["nope*:int8", "matches no layer"])
    assert_error(run_kiln(kiln, "build", model, "-o", engine, "--layer-precision", "/fc/*:int8"), mentions=["--calib"])


def ranking(stderr):
    """[(name, error, kept)] from the build's sensitivity log, most sensitive first."""
    rows = re.findall(r"^\[kiln\]\[I\]\s+\d+\. (\S+)\s+(\S+)(  kept in float)?$", stderr, re.M)
    return [(name, float(err), bool(kept)) for name, err, kept in rows]


def test_keep_sensitive(kiln, tmp_path, resnet):
    model, calib = resnet
    engine = tmp_path / "keep.kiln"
    proc = run_kiln(kiln, "build", model, "-o", engine, "--int8", "--calib", calib, "--keep-sensitive", "2", "--verbose")
    assert_ok(proc)
    rows = ranking(proc.stderr)
    assert len(rows) == 7, proc.stderr
    errors = [e for _, e, _ in rows]
    assert errors == sorted(errors, reverse=True) and errors[0] > 0
    kept = {name for name, _, k in rows if k}
    assert kept == {rows[0][0], rows[1][0], "/stem/conv/Conv", "/fc/Gemm"}, rows
    assert "kept in float (--keep-sensitive 2, and the first and last layer)" in proc.stderr
    q = quantized(kiln, engine)
    assert set(q) == {name for name, _, _ in rows} - kept
    # the ends may go to int8 when asked: exactly the 2 most sensitive stay float
    ends = tmp_path / "ends.kiln"
    assert_ok(run_kiln(kiln, "build", model, "-o", ends, "--int8", "--calib", calib, "--keep", "2", "--quantize-ends"))
    assert set(quantized(kiln, ends)) == {name for name, _, _ in rows} - {rows[0][0], rows[1][0]}
    # keeping the most sensitive layer out lowers the error against fp32 on held-out images
    all_int8 = tmp_path / "all.kiln"
    assert_ok(run_kiln(kiln, "build", model, "-o", all_int8, "--int8", "--calib", calib))
    feeds = models.make_inputs("resnet", 8, seed=999)
    ref = ort_run(model, feeds)["output"]

    def err(e):
        out = tmp_path / e.stem
        assert_ok(run_kiln(kiln, "run", e, *write_inputs(out / "in", feeds), "--output-dir", out / "out"))
        return float(((read_outputs(out / "out", ["output"])["output"] - ref) ** 2).sum() / (ref ** 2).sum())
    assert err(engine) < err(all_int8)


def test_keep_errors(kiln, tmp_path, resnet):
    model, calib = resnet
    out = tmp_path / "x.kiln"
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--keep", "2"), mentions=["--int8"], code=2)
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8", "--calib", calib, "--keep", "x"),
                 mentions=["--keep"], code=2)
    cache = tmp_path / "c.calib"
    assert_ok(run_kiln(kiln, "build", model, "-o", out, "--int8", "--calib", calib, "--calib-cache", cache))
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8", "--calib-cache", cache, "--keep", "1"),
                 mentions=["sensitivity", "--calib"])


def test_fp8_and_16bit_on_cpu(kiln, tmp_path, resnet):
    model, calib = resnet
    out = tmp_path / "x.kiln"
    # FP8 runs on the CPU (the reference kernels), so it asks for calibration data like int8
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--fp8"), mentions=["--fp8", "--calib"])
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--layer-precision", "/fc/*:fp8"),
                 mentions=["--fp8", "--calib"])
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--int8", "--fp16", "--calib", calib),
                 mentions=["--int8 --fp16", "target cpu", "--int8 alone"])
    assert_error(run_kiln(kiln, "build", model, "-o", out, "--layer-precision", "/fc/*:int9"),
                 mentions=["int8|fp8"], code=2)
    assert not out.exists()


def test_compare_int8(kiln, tmp_path, resnet, monkeypatch):
    """kiln compare on an INT8 build: errors and top-1 agreement on held-out inputs, --per-layer ranks
    the 7 int8 layers by the error each adds, and calibration batches are refused as inputs."""
    model, calib = resnet
    held_out = tmp_path / "held_out.npy"
    np.save(held_out, models.make_inputs("resnet", 8, seed=999)["input"])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the temporary calibration cache goes
    proc = run_kiln(kiln, "compare", model, "--int8", "--calib", calib, "--atol", "0.2", "--input", f"input={held_out}",
                    "--per-layer")
    assert_ok(proc)
    assert "7 int8 layers" in proc.stdout and "PASS" in proc.stdout, proc.stdout
    agree = re.search(r"top-1 agreement 'output': (\d+) of 8 rows", proc.stdout)
    assert agree and int(agree.group(1)) >= 7, proc.stdout
    rows = re.findall(r"^\s+(\d+)  (\S+)\s+(QConv|QMatMul)\s+(\S+)$", proc.stdout, re.M)
    assert [int(r[0]) for r in rows] == list(range(1, 8)), proc.stdout
    errors = [float(r[3]) for r in rows]
    assert errors == sorted(errors, reverse=True) and errors[0] > 0
    assert {r[1] for r in rows} >= {"/stem/conv/Conv", "/fc/Gemm"}
    assert not list(scratch.iterdir())  # the temporary cache is gone
    assert_error(run_kiln(kiln, "compare", model, "--int8", "--calib", calib, "--input", f"input={calib / 'batch0.npy'}"),
                 mentions=["calibration data"], code=2)


def test_bench_sweep_precisions(kiln, tmp_path, resnet):
    """kiln bench --sweep precision=fp32,fp16,int8,fp8 on the CPU: fp32, int8 and fp8 rows measured,
    with their accuracy against fp32 in the same table and JSON; the fp16 row says why it is skipped;
    without --calib the int8 row calibrates on random inputs and says so."""
    model, calib = resnet
    short = ["--duration", "0.2", "--warmup", "20", "--iterations", "3", "--batch", "8"]
    out = tmp_path / "sweep.json"
    proc = run_kiln(kiln, "bench", model, *short, "--sweep", "precision=fp32,fp16,int8,fp8", "--calib", calib,
                    "--export-json", out)
    assert_ok(proc)
    rows = {r["precision"]: r for r in json.loads(out.read_text())["sweep"]["rows"]}
    assert rows["fp32"]["cosine"] == pytest.approx(1.0) and rows["fp32"]["top1_agree"] == 8
    int8 = rows["int8"]
    assert int8["status"] == "ok" and int8["qps"] > 0 and int8["build_s"] > 0
    assert int8["engine_bytes"] < rows["fp32"]["engine_bytes"]  # int8 weights
    assert int8["cosine"] >= 0.9995 and 0 < int8["max_rel_err"] <= 0.05 and int8["top1_agree"] >= 7
    assert rows["fp16"]["status"] == "unsupported" and "fp16" in rows["fp16"]["error"]
    fp8 = rows["fp8"]  # the Gemm head in E4M3, the convolutions in fp32
    assert fp8["status"] == "ok" and fp8["qps"] > 0 and fp8["cosine"] >= 0.999 and fp8["top1_agree"] >= 7
    line = next(l for l in proc.stdout.splitlines() if l.startswith("int8 "))
    assert re.search(r"0\.999\d+\s+\d/8$", line), line
    assert "calibrated on random inputs" not in proc.stdout
    proc = run_kiln(kiln, "bench", model, *short, "--sweep", "precision=fp32,int8")
    assert_ok(proc)
    assert "calibrated on random inputs" in proc.stdout and "random batches" in proc.stderr
    assert_error(run_kiln(kiln, "bench", model, "--calib", calib), mentions=["--calib", "int8"], code=2)


def test_encoder_three_inputs(kiln, tmp_path):
    """The BERT-style encoder (3 inputs, 13 quantizable MatMul / Gemm layers): --keep-sensitive feeds
    every input of the calibration batches, and compare --per-layer ranks all 13 int8 layers on
    held-out token ids."""
    model = tmp_path / "bert.onnx"
    onnx.save(models.BUILDERS["bert"](), model)
    calib = tmp_path / "calib"
    calib.mkdir()
    for k in range(2):
        for name, arr in models.make_inputs("bert", 2, 16, seed=300 + k).items():
            np.save(calib / f"{name}.{k}.npy", arr)
    engine = tmp_path / "bert.kiln"
    proc = run_kiln(kiln, "build", model, "-o", engine, "--int8", "--calib", calib, "--keep-sensitive", "3", "--verbose")
    assert_ok(proc)
    rows = ranking(proc.stderr)
    kept = {name for name, _, k in rows if k}
    assert len(rows) == 13 and {r[0] for r in rows[:3]} <= kept and 3 <= len(kept) <= 5, rows
    assert set(quantized(kiln, engine)) == {name for name, _, _ in rows} - kept
    held = {}
    for name, arr in models.make_inputs("bert", 2, 16, seed=999).items():
        held[name] = tmp_path / f"{name}.npy"
        np.save(held[name], arr)
    proc = run_kiln(kiln, "compare", model, "--int8", "--calib", calib, "--atol", "1", "--per-layer",
                    *[a for name, path in held.items() for a in ("--input", f"{name}={path}")])
    assert_ok(proc)
    rows = re.findall(r"^\s+(\d+)  (\S+)\s+QMatMul\s+(\S+)$", proc.stdout, re.M)
    assert len(rows) == 13, proc.stdout
