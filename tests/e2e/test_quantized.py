"""Quantized ONNX models on the CPU backend against onnxruntime: one node at a time (QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv over
random data, int8 and uint8, per-tensor, per-axis and blocked parameters, padded, strided, grouped and
dilated windows), then whole models quantized by onnxruntime itself: `quantize_static` in QDQ format
(per-channel weights) and `quantize_dynamic`, of the ResNet-style and BERT-style e2e models.

Tolerances: integer outputs must be identical to onnxruntime's; float outputs of single nodes within
1e-6 relative; whole quantized models within 1e-5 of max|onnxruntime| (float32 summation order in the
float layers between the quantized ones is the only difference)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from conftest import assert_ok, ort_run, read_outputs, relative_error, run_kiln, write_inputs

OPSET = 21
MODEL_TOLERANCE = 1e-5
FLOAT_NODE_TOLERANCE = 1e-6

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int16): TensorProto.INT16, np.dtype(np.uint16): TensorProto.UINT16}


def node_model(op, inputs, consts, outputs, **attrs):
    """A one-node model: inputs and consts are {name: array} (graph inputs / initializers, in the
    node's input order: inputs first, then consts); outputs is [(name, onnx dtype)]."""
    node = helper.make_node(op, list(inputs) + list(consts), [o for o, _ in outputs], **attrs)
    graph = helper.make_graph(
        [node], "q",
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, t, None) for o, t in outputs],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def run_both(kiln, tmp_path, model, feeds):
    """(kiln's outputs, onnxruntime's outputs) for model on feeds, as {name: array}."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    ref = ort_run(path, feeds)
    proc = run_kiln(kiln, "run", path, *write_inputs(tmp_path / "in", feeds), "--output-dir", tmp_path / "out")
    assert_ok(proc)
    return read_outputs(tmp_path / "out", list(ref)), ref


def assert_same(got, ref):
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, f"{name}: {g.dtype}{g.shape} vs {r.dtype}{r.shape}"
        if np.issubdtype(r.dtype, np.integer):
            diff = np.flatnonzero(g.astype(np.int64) != r.astype(np.int64))
            assert diff.size == 0, (f"{name}: {diff.size} of {r.size} elements differ, first at {diff[0]}: "
                                    f"kiln {g.flat[diff[0]]}, onnxruntime {r.flat[diff[0]]}")
        else:
            err = relative_error(g, r)
            assert err <= FLOAT_NODE_TOLERANCE, f"{name}: relative error {err:.3g}"


def rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


# ------------------------------------------------------------------ single nodes

@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_dequantize(kiln, tmp_path, dtype, mode):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal([2, 6, 5]) * 40).astype(np.float32)
    x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1e9]  # ties round to even; saturation
    attrs = {}
    if mode == "tensor":
        scale, zp = np.array(0.37, np.float32), np.array(3 if dtype != np.int16 else -7, dtype)
    elif mode == "axis":
        scale, zp = rng.uniform(0.1, 1, [6]).astype(np.float32), rand_q(rng, dtype, [6]) // 4
        attrs["axis"] = 1
    else:
        scale, zp = rng.uniform(0.1, 1, [2, 2, 5]).astype(np.float32), rand_q(rng, dtype, [2, 2, 5]) // 4
        attrs.update(axis=1, block_size=4)
    q = node_model("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, [("y", NP_TO_ONNX[np.dtype(dtype)])], **attrs)
    assert_same(*run_both(kiln, tmp_path / "q", q, {"x": x}))
    xq = rand_q(rng, dtype, x.shape)
    dq = node_model("DequantizeLinear", {"x": xq}, {"s": scale, "z": zp}, [("y", TensorProto.FLOAT)], **attrs)
    assert_same(*run_both(kiln, tmp_path / "dq", dq, {"x": xq}))


def test_dynamic_quantize_linear(kiln, tmp_path):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal([3, 7, 9]) * 3 + 1).astype(np.float32)
    m = node_model("DynamicQuantizeLinear", {"x": x}, {},
                   [("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("z", TensorProto.UINT8)])
    assert_same(*run_both(kiln, tmp_path, m, {"x": x}))


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("zp", ["none", "scalar", "vector"])
def test_matmul_integer(kiln, tmp_path, ta, tb, zp):
    rng = np.random.default_rng(5)
    a, b = rand_q(rng, ta, [2, 3, 5, 40]), rand_q(rng, tb, [40, 9])
    consts = {"b": b}
    if zp == "scalar":
        consts.update(za=rand_q(rng, ta, []), zb=rand_q(rng, tb, []))
    elif zp == "vector":  # onnxruntime takes a per-column b zero point
        consts.update(za=rand_q(rng, ta, []), zb=rand_q(rng, tb, [9]))
    m = node_model("MatMulInteger", {"a": a}, consts, [("y", TensorProto.INT32)])
    assert_same(*run_both(kiln, tmp_path, m, {"a": a}))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(kiln, tmp_path, dtype, per_column):
    rng = np.random.default_rng(6)
    a, b = rand_q(rng, dtype, [2, 7, 33]), rand_q(rng, dtype, [33, 12])
    n = 12 if per_column else 1
    bs = rng.uniform(0.002, 0.02, [n]).astype(np.float32).reshape([n] if per_column else [])
    bz = (rand_q(rng, dtype, [n]) // 8).reshape(bs.shape)
    consts = {"as": np.array(0.05, np.float32), "az": np.array(5, dtype), "b": b, "bs": bs, "bz": bz,
              "ys": np.array(0.9, np.float32), "yz": np.array(-3 if dtype == np.int8 else 120, dtype)}
    m = node_model("QLinearMatMul", {"a": a}, consts, [("y", NP_TO_ONNX[np.dtype(dtype)])])
    assert_same(*run_both(kiln, tmp_path, m, {"a": a}))


CONV_CASES = {
    "plain": dict(x=[2, 4, 9, 9], w=[6, 4, 3, 3], attrs={}),
    "pad-stride": dict(x=[1, 3, 10, 11], w=[5, 3, 3, 3], attrs=dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    "group-dilation": dict(x=[1, 4, 12, 12], w=[8, 2, 3, 3], attrs=dict(group=2, dilations=[2, 2], pads=[2, 2, 2, 2])),
    "depthwise-same": dict(x=[2, 6, 7, 7], w=[6, 1, 3, 3], attrs=dict(group=6, auto_pad="SAME_UPPER")),
    "1d": dict(x=[2, 3, 20], w=[4, 3, 5], attrs=dict(pads=[2, 1], strides=[3])),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_integer(kiln, tmp_path, case):
    c = CONV_CASES[case]
    rng = np.random.default_rng(7)
    x, w = rand_q(rng, np.uint8, c["x"]), rand_q(rng, np.uint8, c["w"])
    m = node_model("ConvInteger", {"x": x}, {"w": w, "xz": np.array(128, np.uint8), "wz": np.array(3, np.uint8)},
                   [("y", TensorProto.INT32)], **c["attrs"])
    assert_same(*run_both(kiln, tmp_path, m, {"x": x}))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_qlinear_conv(kiln, tmp_path, case, dtype):
    c = CONV_CASES[case]
    rng = np.random.default_rng(8)
    M = c["w"][0]
    x, w = rand_q(rng, dtype, c["x"]), rand_q(rng, np.int8, c["w"])
    consts = {"xs": np.array(0.03, np.float32), "xz": np.array(2, dtype), "w": w,
              "ws": rng.uniform(0.001, 0.01, [M]).astype(np.float32), "wz": np.zeros([M], np.int8),
              "ys": np.array(0.2, np.float32), "yz": np.array(1 if dtype == np.int8 else 100, dtype),
              "b": rng.integers(-2000, 2000, [M]).astype(np.int32)}
    m = node_model("QLinearConv", {"x": x}, consts, [("y", NP_TO_ONNX[np.dtype(dtype)])], **c["attrs"])
    assert_same(*run_both(kiln, tmp_path, m, {"x": x}))


# ------------------------------------------------------------------ models quantized by onnxruntime

class _Reader:
    """Calibration batches for quantize_static (seeds disjoint from the test inputs)."""

    def __init__(self, kind):
        self.batches = iter([models.make_inputs(kind, 2, 8 if kind == "bert" else None, seed=100 + i)
                             for i in range(3)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """{(kind, method): path} of the e2e models quantized by onnxruntime."""
    from onnxruntime.quantization import QuantFormat, quantize_dynamic, quantize_static
    d = tmp_path_factory.mktemp("quantized")
    out = {}
    for kind in ("resnet", "bert"):
        fp32 = d / f"{kind}.onnx"
        onnx.save(models.BUILDERS[kind](), fp32)
        out[kind, "static-qdq"] = d / f"{kind}_qdq.onnx"
        quantize_static(str(fp32), str(out[kind, "static-qdq"]), _Reader(kind), quant_format=QuantFormat.QDQ,
                        per_channel=True)
        out[kind, "dynamic"] = d / f"{kind}_dynamic.onnx"
        quantize_dynamic(str(fp32), str(out[kind, "dynamic"]))
    return out


EXPECTED_OPS = {"static-qdq": {"QuantizeLinear", "DequantizeLinear"},
                "dynamic": {"DynamicQuantizeLinear", "MatMulInteger"}}


def ort_optimized_run(path, feeds):
    """onnxruntime's outputs with all its graph optimizations (its own Q/DQ fusion into integer
    kernels)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


@pytest.mark.parametrize("kind", ["resnet", "bert"])
@pytest.mark.parametrize("method", ["static-qdq", "dynamic"])
def test_onnxruntime_quantized_model(kiln, tmp_path, quantized, kind, method):
    path = quantized[kind, method]
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert EXPECTED_OPS[method] <= ops, f"the quantized model lacks {EXPECTED_OPS[method] - ops}"
    feeds = models.make_inputs(kind, 3, 17 if kind == "bert" else None, seed=5)
    proc = run_kiln(kiln, "run", path, *write_inputs(tmp_path / "in", feeds), "--output-dir", tmp_path / "out")
    assert_ok(proc)
    for label, ref in (("as written", ort_run(path, feeds)), ("optimized", ort_optimized_run(path, feeds))):
        got = read_outputs(tmp_path / "out", list(ref))
        for name, r in ref.items():
            err = relative_error(got[name], r)
            assert err <= MODEL_TOLERANCE, \
                f"{name}: max|kiln-ort|/max|ort| = {err:.3g} > {MODEL_TOLERANCE:g} (onnxruntime {label})"


# ------------------------------------------------------------------ Q/DQ folded into integer layers

# Folded layers compute act(x_scale * w_scale * sum + bias) in float32 and round once, where
# onnxruntime (as written) sums dequantized floats, or (optimized) requantizes with one multiplier:
# an output within half a unit of a rounding boundary may land one unit apart.
FOLDED_MAX_UNITS = 1
FOLDED_MAX_OFF_FRACTION = 0.005


def folded_layers(kiln, path, tmp_path):
    """Builds path into an engine with --verbose; returns (engine path, [lines of fuse_qdq folds])."""
    engine = tmp_path / "model.kiln"
    proc = run_kiln(kiln, "build", path, "-o", engine, "--verbose")
    assert_ok(proc)
    return engine, [l for l in proc.stderr.splitlines() if "fuse_qdq:" in l and " nodes -> " not in l]


def qdq_layer_model(kind, dtype, act):
    """x (float) -> Q -> DQ -> Conv / MatMul / Gemm (int8 per-channel weights; Conv, Gemm: an int32
    bias through DQ) [-> act] -> Q -> DQ -> y, plus the layer's float result as a second output when act is None
    (which blocks the output fold: the layer then writes float32)."""
    rng = np.random.default_rng(9)
    qt = NP_TO_ONNX[np.dtype(dtype)]
    if kind == "conv":
        x_shape, w = [2, 8, 10, 10], rng.integers(-127, 128, [16, 8, 3, 3]).astype(np.int8)
        M, axis = 16, 0
    elif kind == "gemm":  # transB: weights [N, K], per-channel along axis 0
        x_shape, w = [6, 48], rng.integers(-127, 128, [24, 48]).astype(np.int8)
        M, axis = 24, 0
    else:
        x_shape, w = [2, 5, 48], rng.integers(-127, 128, [48, 24]).astype(np.int8)
        M, axis = 24, 1
    xs, ws = 0.05, rng.uniform(0.002, 0.01, [M]).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in {
        "xs": np.array(xs, np.float32), "xz": np.array(3 if dtype == np.int8 else 128, dtype), "w": w, "ws": ws,
        "wz": np.zeros([M], np.int8), "ys": np.array(0.3, np.float32), "yz": np.array(-2 if dtype == np.int8 else 120, dtype),
        "b": rng.integers(-3000, 3000, [M]).astype(np.int32), "bs": (ws * xs).astype(np.float32),
        "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis)]
    if kind == "conv":
        nodes += [helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
                  helper.make_node("Conv", ["xd", "wd", "bd"], ["l"], pads=[1, 1, 1, 1])]
    elif kind == "gemm":
        nodes += [helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
                  helper.make_node("Gemm", ["xd", "wd", "bd"], ["l"], transB=1)]
    else:
        nodes += [helper.make_node("MatMul", ["xd", "wd"], ["l"])]
    last = "l"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["l"], ["a"]))
        last = "a"
    elif act == "clip":
        nodes.append(helper.make_node("Clip", ["l", "lo", "hi"], ["a"]))
        last = "a"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if act is None:
        outputs.append(helper.make_tensor_value_info("l", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], outputs,
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    feeds = {"x": (rng.standard_normal(x_shape) * 2).astype(np.float32)}
    return model, feeds, qt


def assert_within_units(name, got, ref, unit):
    """got and ref (dequantized values of one scale `unit`) differ by at most FOLDED_MAX_UNITS units,
    and in at most FOLDED_MAX_OFF_FRACTION of the elements."""
    units = np.abs(got.astype(np.float64) - ref.astype(np.float64)) / unit
    assert units.max() <= FOLDED_MAX_UNITS + 1e-3, f"{name}: {units.max():.2f} units apart"
    off = float(np.mean(units > 1e-3))
    assert off <= FOLDED_MAX_OFF_FRACTION, f"{name}: {off:.2%} of the elements differ"


@pytest.mark.parametrize("act", [None, "relu", "clip"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("kind", ["conv", "matmul", "gemm"])
def test_folded_layer(kiln, tmp_path, kind, dtype, act):
    model, feeds, _ = qdq_layer_model(kind, dtype, act)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    engine, folds = folded_layers(kiln, path, tmp_path)
    op = "QConv" if kind == "conv" else "QMatMul"
    assert len(folds) == 1 and f"-> {op}" in folds[0], f"expected one {op} fold, the build logged {folds}"
    assert ("float32 output" in folds[0]) == (act is None), folds[0]
    if act:
        assert {"relu": "Relu", "clip": "Clip"}[act] in folds[0], folds[0]
    proc = run_kiln(kiln, "run", engine, *write_inputs(tmp_path / "in", feeds), "--output-dir", tmp_path / "out")
    assert_ok(proc)
    for label, ref in (("as written", ort_run(path, feeds)), ("optimized", ort_optimized_run(path, feeds))):
        got = read_outputs(tmp_path / "out", list(ref))
        assert_within_units(f"y ({label})", got["y"], ref["y"], 0.3)
        if "l" in ref:
            err = relative_error(got["l"], ref["l"])
            assert err <= 1e-5, f"the float32 layer output differs from onnxruntime ({label}) by {err:.3g}"


@pytest.fixture(scope="module")
def preprocessed_qdq(tmp_path_factory):
    """The ResNet-style model after onnxruntime's quantization pre-processing (BatchNormalization
    folded into the convolutions) quantized QDQ per channel, with uint8 and with symmetric int8
    activations: {activation dtype name: path}."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    d = tmp_path_factory.mktemp("preprocessed")
    onnx.save(models.build_resnet(), d / "resnet.onnx")
    quant_pre_process(str(d / "resnet.onnx"), str(d / "resnet_pre.onnx"), skip_symbolic_shape=True)
    out = {}
    for name, qtype, sym in (("uint8", QuantType.QUInt8, False), ("int8", QuantType.QInt8, True)):
        out[name] = d / f"resnet_{name}.onnx"
        quantize_static(str(d / "resnet_pre.onnx"), str(out[name]), _Reader("resnet"), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=qtype, extra_options={"ActivationSymmetric": sym})
    return out


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_folded_resnet(kiln, tmp_path, preprocessed_qdq, activations):
    path = preprocessed_qdq[activations]
    engine, folds = folded_layers(kiln, path, tmp_path)
    convs = sum(1 for n in onnx.load(path).graph.node if n.op_type == "Conv")
    assert sum("-> QConv" in l and f"{activations} output" in l for l in folds) == convs, \
        f"expected all {convs} convolutions folded with {activations} outputs, the build logged {folds}"
    feeds = models.make_inputs("resnet", 3, seed=5)
    proc = run_kiln(kiln, "run", engine, *write_inputs(tmp_path / "in", feeds), "--output-dir", tmp_path / "out")
    assert_ok(proc)
    for label, ref in (("as written", ort_run(path, feeds)), ("optimized", ort_optimized_run(path, feeds))):
        got = read_outputs(tmp_path / "out", list(ref))
        err = relative_error(got["output"], ref["output"])
        assert err <= MODEL_TOLERANCE, f"max|kiln-ort|/max|ort| = {err:.3g} > {MODEL_TOLERANCE:g} (onnxruntime {label})"


def test_folded_bert(kiln, tmp_path, quantized):
    path = quantized["bert", "static-qdq"]
    engine, folds = folded_layers(kiln, path, tmp_path)
    assert sum("-> QMatMul" in l for l in folds) == 13, \
        f"expected the 12 weight MatMuls and the pooler's Gemm folded, got {folds}"
    feeds = models.make_inputs("bert", 3, 17, seed=5)
    proc = run_kiln(kiln, "run", engine, *write_inputs(tmp_path / "in", feeds), "--output-dir", tmp_path / "out")
    assert_ok(proc)
    for label, ref in (("as written", ort_run(path, feeds)), ("optimized", ort_optimized_run(path, feeds))):
        got = read_outputs(tmp_path / "out", list(ref))
        for name, r in ref.items():
            err = relative_error(got[name], r)
            assert err <= MODEL_TOLERANCE, f"{name}: {err:.3g} > {MODEL_TOLERANCE:g} (onnxruntime {label})"
