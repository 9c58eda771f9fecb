"""Writes models/sample_cnn.onnx: the small image classifier that `make run` builds and runs.

Three Conv+BatchNormalization+Relu blocks (3->16->32->64 channels, 3x3, pad 1), a MaxPool after the
first two, then GlobalAveragePool, Flatten, Gemm (64->10) and Softmax. Input "image" is
float32[batch,3,32,32] with a symbolic batch dimension; output "probs" is float32[batch,10].
Weights are random with a fixed seed, so the file is the same on every run (about 100 KB).

usage: make_sample_model.py [OUT]   (default: models/sample_cnn.onnx in the repository)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
CHANNELS = [3, 16, 32, 64]
CLASSES = 10


def conv_bn_relu(rng, name, cin, cout, x, inits):
    """Appends one Conv(3x3, pad 1)+BatchNormalization+Relu block reading x; returns (nodes, output)."""
    w = rng.normal(0.0, np.sqrt(2.0 / (cin * 9)), size=(cout, cin, 3, 3)).astype(np.float32)
    b = rng.normal(0.0, 0.05, size=(cout,)).astype(np.float32)
    scale = rng.uniform(0.8, 1.2, size=(cout,)).astype(np.float32)
    bias = rng.normal(0.0, 0.1, size=(cout,)).astype(np.float32)
    mean = rng.normal(0.0, 0.1, size=(cout,)).astype(np.float32)
    var = rng.uniform(0.5, 1.5, size=(cout,)).astype(np.float32)
    for suffix, arr in (("w", w), ("b", b), ("bn_scale", scale), ("bn_bias", bias),
                        ("bn_mean", mean), ("bn_var", var)):
        inits.append(numpy_helper.from_array(arr, f"{name}_{suffix}"))
    nodes = [
        helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_conv"], name=f"{name}_conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization",
                         [f"{name}_conv", f"{name}_bn_scale", f"{name}_bn_bias", f"{name}_bn_mean",
                          f"{name}_bn_var"],
                         [f"{name}_bn"], name=f"{name}_bn", epsilon=1e-5),
        helper.make_node("Relu", [f"{name}_bn"], [f"{name}_relu"], name=f"{name}_relu"),
    ]
    return nodes, f"{name}_relu"


def build_model():
    """The sample CNN as a checked ModelProto."""
    rng = np.random.default_rng(20240601)
    nodes, inits = [], []
    x = "image"
    for i in range(3):
        block, x = conv_bn_relu(rng, f"block{i + 1}", CHANNELS[i], CHANNELS[i + 1], x, inits)
        nodes += block
        if i < 2:
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{i + 1}"], name=f"pool{i + 1}",
                                          kernel_shape=[2, 2], strides=[2, 2]))
            x = f"pool{i + 1}"
    fc_w = rng.normal(0.0, np.sqrt(1.0 / CHANNELS[-1]), size=(CLASSES, CHANNELS[-1])).astype(np.float32)
    fc_b = rng.normal(0.0, 0.05, size=(CLASSES,)).astype(np.float32)
    inits += [numpy_helper.from_array(fc_w, "fc_w"), numpy_helper.from_array(fc_b, "fc_b")]
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "sample_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="kiln make_sample_model.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(here, "..", "models", "sample_cnn.onnx"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    model = build_model()
    onnx.save(model, out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
