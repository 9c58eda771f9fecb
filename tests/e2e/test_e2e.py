"""End-to-end tests of the `kiln` CLI on the three e2e models (tests/e2e/models.py): build an engine once
per model, run it at several shapes with inputs from .npy files, and compare with onnxruntime; check
that saved engines run deterministically and match the unsaved model; check `kiln inspect`."""
import os

import numpy as np
import onnx
import pytest

import models
from conftest import (assert_ok, ort_run, read_outputs, relative_error, run_kiln, write_inputs)

# max|kiln - ort| / max|ort| per output (fp32 everywhere; the same bound for every model)
TOLERANCE = 1e-4

SHAPES = {"resnet": [(1, None), (3, None)],
          "bert": [(1, 8), (3, 8), (1, 17), (3, 17)],
          "gpt2": [(1, 8), (3, 8), (1, 17), (3, 17)]}
CASES = [(kind, b, s) for kind in sorted(SHAPES) for b, s in SHAPES[kind]]


def case_id(case):
    kind, batch, seq = case
    return f"{kind}-b{batch}" + (f"-s{seq}" if seq else "")


@pytest.fixture(scope="module")
def engines(kiln, tmp_path_factory):
    """kind -> (model path, engine path, model proto), each engine built once with `kiln build`."""
    built = {}
    for kind in sorted(SHAPES):
        d = tmp_path_factory.mktemp(f"engine-{kind}")
        model = models.BUILDERS[kind]()
        onnx.save(model, d / "model.onnx")
        proc = run_kiln(kiln, "build", d / "model.onnx", "-o", d / "model.kiln")
        built[kind] = (d / "model.onnx", d / "model.kiln", model, proc)
    return built


def engine_for(engines, kind):
    model_path, engine_path, model, proc = engines[kind]
    assert_ok(proc)
    assert os.path.isfile(engine_path), f"kiln build exited 0 but wrote no {engine_path}"
    return model_path, engine_path, model


def run_engine(kiln, path, feeds, workdir, tag):
    """`kiln run path` with feeds as .npy inputs; returns {output name: array} as kiln wrote them."""
    out_dir = workdir / f"out-{tag}"
    args = write_inputs(workdir / "inputs", feeds)
    proc = run_kiln(kiln, "run", path, *args, "--output-dir", out_dir)
    assert_ok(proc)
    return out_dir


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_onnxruntime(kiln, engines, tmp_path, case):
    kind, batch, seq = case
    model_path, engine_path, model = engine_for(engines, kind)
    feeds = models.make_inputs(kind, batch, seq)
    ref = ort_run(model_path, feeds)
    out_dir = run_engine(kiln, engine_path, feeds, tmp_path, "engine")
    got = read_outputs(out_dir, list(ref))
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype, f"{name}: kiln wrote {g.dtype}, onnxruntime gives {r.dtype}"
        assert g.shape == r.shape, f"{name}: kiln wrote shape {g.shape}, onnxruntime gives {r.shape}"
        assert np.all(np.isfinite(g)), f"{name}: kiln's output has non-finite values"
        err = relative_error(g, r)
        assert err <= TOLERANCE, f"{name}: max|kiln-ort|/max|ort| = {err:.3g} > {TOLERANCE:g}"


@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_engine_round_trip(kiln, engines, tmp_path, kind):
    """Two runs of the saved engine are bit-identical, and equal to running the model without saving
    an engine (`kiln run MODEL.onnx`)."""
    model_path, engine_path, model = engine_for(engines, kind)
    batch, seq = SHAPES[kind][-1]
    feeds = models.make_inputs(kind, batch, seq, seed=7)
    names = [o.name for o in model.graph.output]
    first = read_outputs(run_engine(kiln, engine_path, feeds, tmp_path, "engine-1"), names)
    second = read_outputs(run_engine(kiln, engine_path, feeds, tmp_path, "engine-2"), names)
    direct = read_outputs(run_engine(kiln, model_path, feeds, tmp_path, "model"), names)
    for name in names:
        assert first[name].tobytes() == second[name].tobytes(), f"{name}: two runs of the engine differ"
        assert first[name].shape == direct[name].shape
        assert first[name].tobytes() == direct[name].tobytes(), \
            f"{name}: the saved engine and the unsaved model differ (max diff " \
            f"{np.max(np.abs(first[name] - direct[name])):.3g})"


def test_run_with_random_inputs_is_seeded(kiln, engines, tmp_path):
    """`kiln run ENGINE --seed N` without inputs: the same seed gives the same outputs, another seed
    different ones."""
    _, engine_path, _ = engine_for(engines, "resnet")
    outs = {}
    for tag, seed in (("a", 3), ("b", 3), ("c", 4)):
        proc = run_kiln(kiln, "run", engine_path, "--seed", seed, "--output-dir", tmp_path / tag)
        assert_ok(proc)
        outs[tag] = read_outputs(tmp_path / tag, ["output"])["output"]
        assert np.all(np.isfinite(outs[tag]))
    assert outs["a"].tobytes() == outs["b"].tobytes()
    assert outs["a"].tobytes() != outs["c"].tobytes()


@pytest.mark.parametrize("kind", sorted(SHAPES))
@pytest.mark.parametrize("what", ["model", "engine"])
def test_inspect(kiln, engines, kind, what):
    """`kiln inspect` exits 0 (for a model: every node is supported), names every input and output
    (with the symbolic batch dimension) and lists the layers: for the model every op type it contains,
    for the engine at least the model's main compute op (Conv or MatMul, possibly fused)."""
    model_path, engine_path, model = engine_for(engines, kind)
    proc = run_kiln(kiln, "inspect", model_path if what == "model" else engine_path)
    assert_ok(proc)
    text = proc.stdout
    for vi in list(model.graph.input) + list(model.graph.output):
        assert vi.name in text, f"inspect does not list {vi.name}:\n{text}"
    assert "batch" in text, f"inspect does not show the symbolic batch dimension:\n{text}"
    if what == "model":
        for op in sorted({n.op_type for n in model.graph.node} - {"Constant"}):
            assert op in text, f"inspect of the model does not list the {op} nodes:\n{text}"
    else:
        heavy = {"resnet": "Conv", "bert": "MatMul", "gpt2": "MatMul"}[kind]
        assert heavy in text, f"inspect of the engine lists no {heavy} layer:\n{text}"
