"""kiln serve on an engine built with `kiln build --io-format fp16` (or from model.onnx with config.json's
"io_format": "fp16"): its metadata says FP16, it takes FP16 tensors (binary and JSON, through
tritonclient) and answers FP16, with the results of the float32-I/O engine on the same input within
float16 rounding; FP32 data for it is a 400 naming the dtypes; `kiln load --api kserve` sends it FP16
(the datatype from the model's metadata)."""
import json
import subprocess

import numpy as np
import pytest

from conftest import SAMPLE_CNN, serve, tensor_model


@pytest.fixture(scope="module")
def server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("fp16_repo")
    for name, extra in (("cnn16", ["--io-format", "fp16"]), ("cnn32", [])):
        (repo / name / "1").mkdir(parents=True)
        p = subprocess.run([kiln, "build", SAMPLE_CNN, "-o", str(repo / name / "1" / "model.kiln"), *extra],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        (repo / name / "config.json").write_text(json.dumps({"max_batch": 8, "max_queue_delay_us": 2000}))
    tensor_model(repo, "cnn16_onnx", {"max_batch": 8, "io_format": "fp16"})  # built at load
    with serve(kiln, repo) as s:
        yield s


@pytest.mark.parametrize("model", ["cnn16", "cnn16_onnx"])
def test_metadata_says_fp16(server, model):
    status, meta = server.json(f"/v2/models/{model}")
    assert status == 200
    assert meta["inputs"] == [{"name": "image", "datatype": "FP16", "shape": [-1, 3, 32, 32]}]
    assert meta["outputs"] == [{"name": "probs", "datatype": "FP16", "shape": [-1, 10]}]


@pytest.mark.parametrize("binary", [True, False])
def test_tritonclient_fp16_matches_fp32_io(server, binary):
    import tritonclient.http as httpclient
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    x = np.random.default_rng(11).standard_normal((3, 3, 32, 32)).astype(np.float16)
    results = {}
    for model, data, dtype in (("cnn16", x, "FP16"), ("cnn32", x.astype(np.float32), "FP32")):
        inp = httpclient.InferInput("image", list(x.shape), dtype)
        inp.set_data_from_numpy(data, binary_data=binary)
        out = httpclient.InferRequestedOutput("probs", binary_data=binary)
        results[model] = client.infer(model, [inp], outputs=[out]).as_numpy("probs")
    if binary:  # JSON numbers come back as float64 whatever the datatype
        assert results["cnn16"].dtype == np.float16
    np.testing.assert_allclose(results["cnn16"].astype(np.float32), results["cnn32"], rtol=1e-3, atol=2e-4)


def test_fp32_data_for_an_fp16_input_is_refused(server):
    x = np.zeros((1, 3, 32, 32), np.float32)
    req = {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}]}
    status, err = server.json("/v2/models/cnn16/infer", req)
    assert status == 400 and "float16 in the model" in err["error"] and "float32" in err["error"], err


def test_kiln_load_sends_fp16(kiln, server, tmp_path):
    out = tmp_path / "load.json"
    p = subprocess.run([kiln, "load", server.url, "--api", "kserve", "--model", "cnn16", "--binary",
                        "--shape", "image=4x3x32x32", "--concurrency", "2", "--duration", "1s", "--warmup", "0",
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    (step,) = json.loads(out.read_text())["steps"]
    assert step["failed"] == 0 and step["ok"] > 0, step
    m = server.metrics()
    assert m['kiln_batch_size_sum{model="cnn16",version="1"}'] >= 4 * step["ok"]
