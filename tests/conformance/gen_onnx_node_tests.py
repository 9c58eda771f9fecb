"""Writes the ONNX project's node test cases (shipped inside the `onnx` wheel as code) to disk in the
ONNX repository's layout, for kiln's conformance runner:

    OUTDIR/<case>/model.onnx
    OUTDIR/<case>/test_data_set_N/input_K.pb, output_K.pb

usage: gen_onnx_node_tests.py OUTDIR
"""
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases


def to_proto(value, name):
    """TensorProto for a numpy array or a TensorProto (some cases, e.g. Cast's, give protos for the
    types numpy lacks); sequences and optionals are not written: kiln does not run them."""
    if isinstance(value, onnx.TensorProto):
        proto = onnx.TensorProto()
        proto.CopyFrom(value)
        proto.name = name
        return proto
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return numpy_helper.from_array(np.asarray(value), name)
    return None


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    warnings.simplefilter("ignore")
    written = 0
    for case in collect_testcases(None):
        d = os.path.join(out, case.name)
        os.makedirs(d, exist_ok=True)
        onnx.save(case.model, os.path.join(d, "model.onnx"))
        g = case.model.graph
        ok = True
        for n, (inputs, outputs) in enumerate(case.data_sets or []):
            ds = os.path.join(d, f"test_data_set_{n}")
            os.makedirs(ds, exist_ok=True)
            for kind, arrays, infos in (("input", inputs, g.input), ("output", outputs, g.output)):
                for k, a in enumerate(arrays):
                    p = to_proto(a, infos[k].name if k < len(infos) else "")
                    if p is None:
                        ok = False
                        continue
                    with open(os.path.join(ds, f"{kind}_{k}.pb"), "wb") as f:
                        f.write(p.SerializeToString())
        if ok:
            written += 1
        if case.rtol is not None or case.atol is not None:
            with open(os.path.join(d, "tolerance.txt"), "w") as f:
                f.write(f"{case.rtol if case.rtol is not None else 1e-3} {case.atol if case.atol is not None else 1e-7}\n")
    print(f"wrote {written} ONNX node test cases to {out}")


if __name__ == "__main__":
    main()
