"""Models exported by PyTorch's own ONNX exporters (TorchScript-based and dynamo-based, default
opsets; see export_torch_models.py) run through `kiln build` + `kiln run` and agree with onnxruntime."""
import json
import os
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

KILN = os.environ.get("KILN_BIN", "build/kiln")
DATA = os.path.join(os.path.dirname(__file__), "..", "data", "torch")
MANIFEST = json.load(open(os.path.join(DATA, "manifest.json")))["models"]
EXPORTED = sorted(k for k, v in MANIFEST.items() if "file" in v)
TOLERANCE = 1e-4  # max |kiln - ort| / max |ort|, float32


def make_inputs(key, batch, seq, rng):
    if key.startswith("mobilenet"):
        return {"image": rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)}
    ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
    if key.startswith("bert"):
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2:] = 0  # padding in the last sequence
        return {"input_ids": ids, "attention_mask": mask}
    return {"input_ids": ids}


def test_every_export_of_the_manifest_is_accounted_for():
    # GPT-2 and Llama cannot be exported by the TorchScript exporter (aten::diff); all others must be.
    failed = sorted(k for k, v in MANIFEST.items() if "error" in v)
    assert failed == ["gpt2_torchscript", "llama_torchscript"], failed
    assert len(EXPORTED) == 8


@pytest.mark.parametrize("key", EXPORTED)
@pytest.mark.parametrize("batch,seq", [(2, 16), (1, 7), (3, 11)])
def test_torch_export_matches_onnxruntime(key, batch, seq, tmp_path):
    model = os.path.join(DATA, MANIFEST[key]["file"])
    engine = tmp_path / "model.kiln"
    r = subprocess.run([KILN, "build", model, "-o", str(engine)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    inputs = make_inputs(key, batch, seq, np.random.default_rng(batch * 100 + seq))
    args = [KILN, "run", str(engine), "--output-dir", str(tmp_path / "out"), "--quiet"]
    for name, arr in inputs.items():
        np.save(tmp_path / f"{name}.npy", arr)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = sess.run(None, inputs)
    for out, ref in zip(sess.get_outputs(), expected):
        got = np.load(tmp_path / "out" / f"{out.name}.npy")
        assert got.shape == ref.shape and got.dtype == ref.dtype
        err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)
        assert err <= TOLERANCE, f"{key} {out.name}: relative error {err:.3g}"
