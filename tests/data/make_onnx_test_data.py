"""make_onnx_test_data.py — writes the small ONNX files that tests/unit/test_onnx_import.c reads.

Run from anywhere: python tests/data/make_onnx_test_data.py  (needs the onnx package). The values
here are mirrored in the C test; change both together.

  onnx_small.onnx     Conv(x, W, B) + Constant -> Add -> Relu, batch dim symbolic ("N"), with
                      initializers in raw_data (W), float_data (B), int32_data (float16) and
                      int64_data, Constant nodes (value, value_float, value_ints), a graph input
                      that is also an initializer, an unnamed node and value_info.
  onnx_external.onnx  MatMul(x, W) + B with W and B in onnx_external.bin (external data).
  onnx_if.onnx        If(cond) with two subgraphs that use values of the outer graph.
  onnx_tensor_raw.pb / onnx_tensor_typed.pb   TensorProto files (test-data format).
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def small_model():
    W = (np.arange(4 * 3 * 3 * 3, dtype=np.float32) * 0.01 - 0.5).reshape(4, 3, 3, 3)
    inits = [
        numpy_helper.from_array(W, "W"),  # raw_data
        helper.make_tensor("B", TensorProto.FLOAT, [4], [0.1, 0.2, 0.3, 0.4]),  # float_data
        # float16 in int32_data holds the bit patterns, one per int32
        TensorProto(name="half_init", data_type=TensorProto.FLOAT16, dims=[2],
                    int32_data=np.array([1.5, -2.0], dtype=np.float16).view(np.uint16).tolist()),
        helper.make_tensor("i64_init", TensorProto.INT64, [3], [-1, 0, 1 << 40]),  # int64_data
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["conv_out"], name="conv1", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[1, 1], group=1, auto_pad="NOTSET"),
        helper.make_node("Constant", [], ["addend"], name="const_addend",
                         value=helper.make_tensor("addend_t", TensorProto.FLOAT, [4, 1, 1], [1.0, 2.0, 3.0, 4.0])),
        helper.make_node("Constant", [], ["scale"], value_float=0.5),
        helper.make_node("Constant", [], ["shape_c"], value_ints=[1, 2, 3]),
        helper.make_node("Add", ["conv_out", "addend"], ["sum"], name="add1"),
        helper.make_node("Relu", ["sum"], ["y"]),  # unnamed: imported as "Relu_5"
    ]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8]),
         helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        initializer=inits,
        value_info=[helper.make_tensor_value_info("conv_out", TensorProto.FLOAT, ["N", 4, None, 8])])
    model = helper.make_model(graph, producer_name="kiln-tests", producer_version="1",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 2)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "onnx_small.onnx"))


def external_model():
    W = (np.arange(12, dtype=np.float32) - 6.0).reshape(3, 4)
    B = np.array([10, 20, 30, 40], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"], name="mm"),
         helper.make_node("Add", ["xw", "B"], ["y"], name="add")],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    model = helper.make_model(graph, producer_name="kiln-tests", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(HERE, "onnx_external.onnx")
    if os.path.exists(os.path.join(HERE, "onnx_external.bin")):
        os.remove(os.path.join(HERE, "onnx_external.bin"))
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="onnx_external.bin", size_threshold=0)
    os.chmod(os.path.join(HERE, "onnx_external.bin"), 0o644)
    onnx.checker.check_model(path)


def if_model():
    one = numpy_helper.from_array(np.ones([2], dtype=np.float32), "one")
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t_out"], name="then_add")], "then_branch",
                               [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"], name="else_id")], "else_branch",
                               [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], name="if1", then_branch=then_g, else_branch=else_g)],
        "if_graph",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[one])
    model = helper.make_model(graph, producer_name="kiln-tests", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "onnx_if.onnx"))


def tensor_files():
    t = numpy_helper.from_array(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32), "raw_t")
    with open(os.path.join(HERE, "onnx_tensor_raw.pb"), "wb") as f:
        f.write(t.SerializeToString())
    t = helper.make_tensor("typed_t", TensorProto.INT32, [4], [-7, 0, 7, 2147483647])
    with open(os.path.join(HERE, "onnx_tensor_typed.pb"), "wb") as f:
        f.write(t.SerializeToString())


if __name__ == "__main__":
    small_model()
    external_model()
    if_model()
    tensor_files()
