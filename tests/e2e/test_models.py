"""Checks the e2e model builders themselves, with onnx and onnxruntime only (no kiln): each model passes
onnx.checker with full shape inference, has the ops it is meant to exercise, runs in onnxruntime at
every test shape with the declared output shapes and finite values, and its masks really mask."""
import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import models
from conftest import ort_run

SHAPES = {"resnet": [(1, None), (3, None)],
          "bert": [(1, 8), (3, 17)],
          "gpt2": [(1, 8), (3, 17)]}

REQUIRED_OPS = {
    "resnet": {"Conv", "BatchNormalization", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm"},
    "bert": {"Gather", "LayerNormalization", "ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Mul", "Add",
             "MatMul", "Reshape", "Transpose", "Unsqueeze", "Cast", "Softmax", "Erf", "Shape", "Concat",
             "Slice", "Constant"},
    "gpt2": {"Gather", "Range", "Shape", "Unsqueeze", "Trilu", "Where", "Pow", "Tanh", "Split",
             "LayerNormalization", "MatMul", "Softmax", "Concat", "Reshape", "Transpose", "Slice",
             "ConstantOfShape"},
}


@pytest.fixture(scope="module", params=sorted(models.BUILDERS))
def built(request, tmp_path_factory):
    kind = request.param
    path = tmp_path_factory.mktemp(kind) / "model.onnx"
    model = models.BUILDERS[kind]()
    onnx.save(model, path)
    return kind, model, path


def test_checker_and_ops(built):
    kind, model, path = built
    onnx.checker.check_model(str(path), full_check=True)
    assert model.opset_import[0].version == models.OPSET
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert REQUIRED_OPS[kind] <= set(ops), f"missing ops: {REQUIRED_OPS[kind] - set(ops)}"
    # the first dimension of every input is symbolic, as exported with dynamic axes
    for inp in model.graph.input:
        assert inp.type.tensor_type.shape.dim[0].dim_param == "batch"


def test_ort_runs(built):
    kind, model, path = built
    declared = {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim]
                for o in model.graph.output}
    for batch, seq in SHAPES[kind]:
        outs = ort_run(path, models.make_inputs(kind, batch, seq))
        assert set(outs) == set(declared)
        for name, arr in outs.items():
            assert arr.dtype == np.float32
            assert np.all(np.isfinite(arr)), f"{kind} {name} has non-finite values"
            sizes = {"batch": batch, "sequence": seq}
            assert list(arr.shape) == [sizes.get(d, d) for d in declared[name]]
            assert 0.1 < float(np.std(arr)) < 100.0, f"{kind} {name} is degenerate (std {np.std(arr)})"


def test_bert_padding_mask_masks(tmp_path):
    """Changing the tokens under attention_mask == 0 leaves the unmasked positions unchanged."""
    path = tmp_path / "bert.onnx"
    onnx.save(models.build_bert(), path)
    feeds = models.make_inputs("bert", 3, 17)
    ref = ort_run(path, feeds)["last_hidden_state"]
    changed = dict(feeds)
    ids = feeds["input_ids"].copy()
    ids[feeds["attention_mask"] == 0] = (ids[feeds["attention_mask"] == 0] + 7) % 100
    changed["input_ids"] = ids
    got = ort_run(path, changed)["last_hidden_state"]
    keep = feeds["attention_mask"] == 1
    assert (~keep).sum() > 0
    np.testing.assert_allclose(got[keep], ref[keep], rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[~keep], ref[~keep])


def test_gpt2_mask_is_causal(tmp_path):
    """Changing the last token changes only the last position's logits (both mask forms are causal)."""
    path = tmp_path / "gpt2.onnx"
    onnx.save(models.build_gpt2(), path)
    feeds = models.make_inputs("gpt2", 2, 17)
    ref = ort_run(path, feeds)["logits"]
    ids = feeds["input_ids"].copy()
    ids[:, -1] = (ids[:, -1] + 1) % 100
    got = ort_run(path, {"input_ids": ids})["logits"]
    np.testing.assert_allclose(got[:, :-1], ref[:, :-1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[:, -1], ref[:, -1])


def test_decomposed_layer_norm_matches_op():
    """The decomposed LayerNorm chain computes the same thing as the LayerNormalization op."""
    outs = {}
    for decomposed in (False, True):
        g = models.GraphBuilder(seed=5)
        y = g.layer_norm("ln", "x", 64, decomposed=decomposed)
        g.nodes.append(onnx.helper.make_node("Identity", [y], ["y"], name="/out"))
        m = g.model("ln", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5, 64])],
                    [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, 64])])
        onnx.checker.check_model(m, full_check=True)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal([2, 5, 64]).astype(np.float32) * 3 + 1
        outs[decomposed] = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(outs[True], outs[False], rtol=1e-4, atol=1e-4)
