"""`kiln compare`: an engine against the CPU FP32 reference built from the ONNX model. Passes on the
sample CNN and the BERT-/GPT-style test models; a planted divergence (one initializer perturbed) is
found and the failing outputs named; --per-layer names the first node that diverges; exit statuses
0 / 1 / 2."""
import re

import onnx
import pytest
from onnx import numpy_helper

import models
from conftest import assert_error, assert_ok, describe, run_kiln, write_inputs

SAMPLE = "models/sample_cnn.onnx"
PERTURBED = {"bert": ("encoder.layer.1.intermediate.dense.bias", "/encoder/layer.1/intermediate/dense/Add"),
             "gpt2": ("transformer.h.1.mlp.c_fc.bias", None)}


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def model(request, tmp_path_factory):
    """(kind, path of the model, --input arguments for batch 2, seq 8)."""
    kind = request.param
    d = tmp_path_factory.mktemp(f"compare_{kind}")
    path = d / "model.onnx"
    onnx.save(models.BUILDERS[kind](), path)
    return kind, path, write_inputs(d / "in", models.make_inputs(kind, 2, 8))


def perturb(src, dst, init_name, delta=0.5):
    """Copies the model at src to dst with element 3 of initializer init_name changed by delta; returns
    the names of the nodes that read it."""
    m = onnx.load(str(src))
    found = False
    for init in m.graph.initializer:
        if init.name == init_name:
            a = numpy_helper.to_array(init).copy()
            a.flat[3] += delta
            init.CopyFrom(numpy_helper.from_array(a, init.name))
            found = True
    assert found, f"no initializer {init_name}: {[i.name for i in m.graph.initializer][:50]}"
    onnx.save(m, str(dst))
    return [n.name for n in m.graph.node if init_name in n.input]


def rows(stdout):
    """{value name: result word} from the report's table."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^  (\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(PASS|FAIL)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_sample_cnn_passes(kiln):
    proc = run_kiln(kiln, "compare", SAMPLE, "--seed", 3)
    assert_ok(proc)
    assert "atol 0.0001, rtol 0.0001" in proc.stdout, describe(proc)
    assert rows(proc.stdout) == {"probs": "PASS"}, describe(proc)
    assert "PASS" in proc.stdout.splitlines()[-1]


def test_engine_file_passes(kiln, tmp_path):
    engine = tmp_path / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine))
    proc = run_kiln(kiln, "compare", SAMPLE, engine, "--shapes", "image:3x3x32x32")
    assert_ok(proc)
    assert rows(proc.stdout) == {"probs": "PASS"}, describe(proc)


def test_models_pass(kiln, model):
    kind, path, inputs = model
    proc = run_kiln(kiln, "compare", path, *inputs)
    assert_ok(proc)
    table = rows(proc.stdout)
    assert table and set(table.values()) == {"PASS"}, describe(proc)


def test_per_layer_passes(kiln, model):
    kind, path, inputs = model
    proc = run_kiln(kiln, "compare", path, "--per-layer", *inputs)
    assert_ok(proc)
    assert "unfused graph" in proc.stdout, describe(proc)
    assert len(rows(proc.stdout)) > 50, describe(proc)


def test_planted_divergence_is_found(kiln, model, tmp_path):
    kind, path, inputs = model
    init = PERTURBED[kind][0]
    readers = perturb(path, tmp_path / "perturbed.onnx", init)
    engine = tmp_path / "perturbed.kiln"
    assert_ok(run_kiln(kiln, "build", tmp_path / "perturbed.onnx", "-o", engine))
    proc = run_kiln(kiln, "compare", path, engine, *inputs)
    err = assert_error(proc, mentions=["exceed the tolerance"])
    failing = [name for name, r in rows(proc.stdout).items() if r == "FAIL"]
    assert failing, describe(proc)
    for name in failing:
        assert name in err, describe(proc)
    # a tolerance wide enough for the change passes
    assert_ok(run_kiln(kiln, "compare", path, engine, *inputs, "--atol", "100", "--rtol", "0"))

    # per layer: both sides from ONNX; the first diverging layer is the one reading the perturbed bias
    proc = run_kiln(kiln, "compare", path, tmp_path / "perturbed.onnx", "--per-layer", *inputs)
    err = assert_error(proc, mentions=["first diverging layer"])
    m = re.search(r"first divergence: layer '([^']+)' \(([^)]+)\)", proc.stdout)
    assert m, describe(proc)
    assert m.group(1) in readers, f"first divergence {m.group(1)}, the perturbed bias is read by {readers}" + describe(proc)
    if PERTURBED[kind][1]:
        assert m.group(1) == PERTURBED[kind][1]


def test_per_layer_with_engine_file_is_a_usage_error(kiln, tmp_path):
    engine = tmp_path / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine))
    err = assert_error(run_kiln(kiln, "compare", SAMPLE, engine, "--per-layer"), code=2)
    assert "--per-layer needs the ONNX model" in err and "--per-layer" in err


@pytest.mark.parametrize("args, mention", [
    ([], "required"),
    ([SAMPLE, "--atol"], "--atol"),
    ([SAMPLE, "--atol", "-1"], "non-negative"),
    ([SAMPLE, "--rtol", "x"], "non-negative"),
    ([SAMPLE, "--bogus"], "unknown option"),
    ([SAMPLE, "a.kiln", "b.kiln"], "unexpected argument"),
    ([SAMPLE, "--layer-precision", "conv"], "PATTERN:fp32"),
    ([SAMPLE, "--profile", "image:1x3,2x3"], "MIN,OPT,MAX"),
    ([SAMPLE, "--seed", "-3"], "--seed"),
])
def test_bad_arguments_exit_2(kiln, args, mention):
    err = assert_error(run_kiln(kiln, "compare", *args), code=2)
    assert mention.lower() in err.lower()


def test_build_options_with_engine_file_exit_2(kiln, tmp_path):
    engine = tmp_path / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine))
    assert_error(run_kiln(kiln, "compare", SAMPLE, engine, "--fp16"), code=2, mentions=["built already"])


def test_engine_of_another_model_fails(kiln, model, tmp_path):
    kind, path, inputs = model
    engine = tmp_path / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine))
    assert_error(run_kiln(kiln, "compare", path, engine, *inputs), mentions=["engine"])


def test_fp16_defaults(kiln, tmp_path):
    """The defaults follow the engine's precision; an fp16 engine needs the cuda target (and a GPU)."""
    engine = tmp_path / "cnn16.kiln"
    proc = run_kiln(kiln, "build", SAMPLE, "-o", engine, "--target", "cuda", "--fp16")
    if proc.returncode != 0:
        pytest.skip("no cuda target or no GPU here: " + proc.stderr.strip().splitlines()[-1])
    proc = run_kiln(kiln, "compare", SAMPLE, engine)
    assert_ok(proc)
    assert "atol 0.01, rtol 0.01" in proc.stdout, describe(proc)
    proc = run_kiln(kiln, "compare", SAMPLE, "--target", "cuda", "--fp16", "--per-layer")
    assert_ok(proc)

