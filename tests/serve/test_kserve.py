"""kiln serve's KServe v2 endpoints on sample_cnn: metadata, health, readiness, inference in JSON and
binary (raw HTTP and tritonclient), the dynamic batcher joining concurrent requests, the repository
extension, and the metrics and status page they feed; on a model with 600 KB rows: batches of
megabytes split back to their requests, binary bodies received into the model's landing memory and
run from there (only for a request with a valid key when keys are set), the stage durations, and a
client that half-closes its socket mid-request."""
import concurrent.futures
import json
import socket
import struct
import time

import numpy as np
import pytest

from conftest import cnn_request, reference_probs, serve, tensor_model

BATCHING = {"max_batch": 8, "preferred_batch_sizes": [4, 8], "max_queue_delay_us": 20000, "instances": 2}


@pytest.fixture(scope="module")
def server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    tensor_model(repo, "cnn", BATCHING)
    tensor_model(repo, "cnn_v", {"max_batch": 0, "version_policy": {"latest": 2}, "aliases": ["cnn-alias"]}, version=1)
    tensor_model(repo, "cnn_v", version=3)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "notes.txt").write_text("no model here")
    with serve(kiln, repo) as s:
        yield s


def test_server_metadata_and_health(server):
    status, meta = server.json("/v2")
    assert status == 200 and meta["name"] == "kiln"
    assert {"binary_tensor_data", "model_repository"} <= set(meta["extensions"])
    assert server.json("/v2/health/live") == (200, {"live": True})
    assert server.json("/v2/health/ready")[0] == 200


def test_model_metadata(server):
    status, meta = server.json("/v2/models/cnn")
    assert status == 200
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert meta["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 10]}]
    assert server.json("/v2/models/cnn/versions/1")[0] == 200
    assert server.json("/v2/models/cnn/ready") == (200, {"name": "cnn", "ready": True})


def test_versions_policy_and_alias(server):
    status, meta = server.json("/v2/models/cnn_v")
    assert status == 200 and meta["versions"] == ["1", "3"]
    req, x = cnn_request(1, seed=3)
    status, out = server.json("/v2/models/cnn-alias/versions/1/infer", req)
    assert status == 200 and out["model_version"] == "1"
    status, out = server.json("/v2/models/cnn_v/infer", req)
    assert status == 200 and out["model_version"] == "3"
    status, err = server.json("/v2/models/cnn_v/versions/2/infer", req)
    assert status == 404 and "version '2'" in err["error"]


def test_json_infer_matches_onnxruntime(server):
    req, x = cnn_request(3, seed=1)
    req["id"] = "abc"
    status, out = server.json("/v2/models/cnn/infer", req)
    assert status == 200, out
    assert out["model_name"] == "cnn" and out["model_version"] == "1" and out["id"] == "abc"
    (probs,) = out["outputs"]
    assert probs["name"] == "probs" and probs["datatype"] == "FP32" and probs["shape"] == [3, 10]
    np.testing.assert_allclose(np.array(probs["data"]).reshape(3, 10), reference_probs(x), rtol=1e-4, atol=1e-5)


def test_nested_json_data(server):
    req, x = cnn_request(1, seed=2)
    req["inputs"][0]["data"] = x.tolist()
    status, out = server.json("/v2/models/cnn/infer", req)
    assert status == 200
    np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(1, 10), reference_probs(x), rtol=1e-4, atol=1e-5)


def test_binary_infer_raw(server):
    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32)
    header = json.dumps({"inputs": [{"name": "image", "shape": [2, 3, 32, 32], "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "probs", "parameters": {"binary_data": True}}]}).encode()
    status, headers, body = server.request("/v2/models/cnn/infer", header + x.tobytes(), headers={
        "Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    assert status == 200
    jlen = int(headers["Inference-Header-Content-Length"])
    meta = json.loads(body[:jlen])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 2 * 10 * 4
    got = np.frombuffer(body[jlen:], dtype=np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, reference_probs(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient(server, binary):
    import tritonclient.http as httpclient
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("cnn")
    x = np.random.default_rng(5).standard_normal((4, 3, 32, 32)).astype(np.float32)
    inp = httpclient.InferInput("image", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("probs", binary_data=binary)
    result = client.infer("cnn", [inp], outputs=[out])
    np.testing.assert_allclose(result.as_numpy("probs"), reference_probs(x), rtol=1e-4, atol=1e-5)
    assert client.get_model_metadata("cnn")["inputs"][0]["name"] == "image"


def test_dynamic_batcher_joins_concurrent_requests(server):
    def one(seed):
        req, x = cnn_request(1, seed=100 + seed)
        status, out = server.json("/v2/models/cnn/infer", req)
        assert status == 200
        return np.array(out["outputs"][0]["data"]).reshape(1, 10), x

    label = 'model="cnn",version="1"'
    before = server.metrics()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(32)))
    for got, x in results:  # every request got its own rows back
        np.testing.assert_allclose(got, reference_probs(x), rtol=1e-4, atol=1e-5)
    after = server.metrics()
    delta = lambda key: after.get(key, 0) - before.get(key, 0)
    assert delta(f"kiln_batch_size_sum{{{label}}}") == 32  # every row ran once
    runs = delta(f"kiln_batch_size_count{{{label}}}")
    assert runs < 32, f"no request shared a run: 32 requests took {runs} runs"


def pool_model(repo, config):
    """repo/pool/1/model.onnx: GlobalAveragePool of rows x 3 x 224 x 224 floats (600 KB a row, little
    computation: the server's byte path is what it exercises) and repo/pool/config.json."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3, 1, 1])
    graph = helper.make_graph([helper.make_node("GlobalAveragePool", ["input"], ["output"])], "pool", [x], [y])
    (repo / "pool" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), repo / "pool" / "1" / "model.onnx")
    (repo / "pool" / "config.json").write_text(json.dumps(config))


def binary_request(x):
    header = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    return header, header + x.tobytes()


@pytest.fixture(scope="module")
def pool_server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("pool_repo")
    pool_model(repo, {"max_batch": 8, "max_queue_delay_us": 20000, "instances": 1})
    with serve(kiln, repo, "--access-log", str(repo / "access.log")) as s:
        s.access_log = repo / "access.log"
        yield s


def test_large_binary_requests_batched_back_to_their_rows(pool_server):
    # batches of megabytes: the requests' threads copy their rows into the batch, two runs in flight
    def one(seed):
        x = np.random.default_rng(seed).standard_normal((2, 3, 224, 224)).astype(np.float32)
        header, body = binary_request(x)
        status, headers, data = pool_server.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header))})
        assert status == 200, data[:300]
        jlen = int(headers["Inference-Header-Content-Length"])
        return np.frombuffer(data[jlen:], dtype=np.float32).reshape(2, 3, 1, 1), x

    label = 'model="pool",version="1"'
    before = pool_server.metrics()
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, range(24)))
    for got, x in results:
        np.testing.assert_allclose(got, x.mean(axis=(2, 3), keepdims=True), rtol=1e-4, atol=1e-5)
    after = pool_server.metrics()
    runs = after[f"kiln_batch_size_count{{{label}}}"] - before.get(f"kiln_batch_size_count{{{label}}}", 0)
    assert after[f"kiln_batch_size_sum{{{label}}}"] - before.get(f"kiln_batch_size_sum{{{label}}}", 0) == 48
    assert runs < 24, f"no request shared a run: 24 requests took {runs} runs"


STAGES = ("receive", "parse", "queue", "input", "compute", "output")


def test_stage_durations_add_up(pool_server):
    """Every tensor inference that ran is timed by stage in /metrics and in its access-log record;
    the stages follow one another, so their durations add up to the request's."""
    label = 'model="pool",version="1"'
    stage = lambda name, k: f'kiln_request_stage_duration_seconds_{k}{{{label},stage="{name}"}}'
    before = pool_server.metrics()
    x = np.ones((4, 3, 224, 224), np.float32)
    header, body = binary_request(x)
    for _ in range(3):
        status, _, data = pool_server.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header))})
        assert status == 200, data[:300]
    deadline = time.time() + 5  # recorded when each request completes, after its answer went out
    while True:
        after = pool_server.metrics()
        delta = lambda key: after.get(key, 0) - before.get(key, 0)
        if delta(f"kiln_request_duration_seconds_count{{{label}}}") == 3 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert all(delta(stage(name, "count")) == 3 for name in STAGES), after
    staged = sum(delta(stage(name, "sum")) for name in STAGES)
    total = delta(f"kiln_request_duration_seconds_sum{{{label}}}")
    assert staged == pytest.approx(total, rel=1e-6, abs=1e-6) and total > 0
    assert delta(stage("receive", "sum")) > 0 and delta(stage("compute", "sum")) > 0
    status, _, _ = pool_server.request("/v2/models/pool/infer", b"{}")  # refused: no stages to show
    assert status == 400
    deadline = time.time() + 5  # a record is written when its connection's request completes
    while time.time() < deadline:
        records = [json.loads(line) for line in pool_server.access_log.read_text().splitlines()]
        if records and records[-1]["status"] == 400:
            break
        time.sleep(0.05)
    last = records[-1]
    ran = [r for r in records if r["path"] == "/v2/models/pool/infer" and r["status"] == 200][-3:]
    for r in ran:
        assert tuple(r["stages_ms"]) == STAGES and min(r["stages_ms"].values()) >= 0
        assert sum(r["stages_ms"].values()) == pytest.approx(r["ms"], abs=0.01)
    assert last["status"] == 400 and "stages_ms" not in last

def test_half_closed_request_is_a_disconnect(pool_server):
    host, port = pool_server.url.removeprefix("http://").split(":")
    x = np.zeros((1, 3, 224, 224), np.float32)
    header, body = binary_request(x)
    head = b"POST /v2/models/pool/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: %d\r\n" \
           b"Content-Length: %d\r\n\r\n" % (len(header), len(body))
    # the client stops writing a third of the way into the body: the server closes at once (not after
    # its idle timeout), answers nothing, and logs the request as not completed
    s = socket.create_connection((host, int(port)))
    s.sendall(head + body[:len(body) // 3])
    s.shutdown(socket.SHUT_WR)
    s.settimeout(10)
    t0 = time.time()
    assert s.recv(65536) == b"", "a request cut short by its client got an answer"
    assert time.time() - t0 < 5
    s.close()
    assert pool_server.json("/v2/health/ready")[0] == 200
    deadline = time.time() + 5
    while time.time() < deadline:
        lines = [json.loads(line) for line in pool_server.access_log.read_text().splitlines()]
        cut = [r for r in lines if r["path"] == "/v2/models/pool/infer" and not r["completed"]]
        if cut:
            break
        time.sleep(0.05)
    assert cut and cut[0]["bytes_in"] < len(body), lines[-3:]


def test_binary_bodies_land_where_they_run(pool_server):
    """A binary body's tensor bytes are received straight into the model's landing memory (8 batches
    of 8 rows here): a request that runs alone runs from there (no copy into the staging) and gets its
    rows back. Every request gives its room back, the one cut short above too: the ring goes round
    more than once without a refusal."""
    label = 'model="pool",version="1"'
    before = pool_server.metrics()
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32)
        header, body = binary_request(x)
        status, headers, data = pool_server.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header))})
        assert status == 200, data[:300]
        got = np.frombuffer(data[int(headers["Inference-Header-Content-Length"]):], dtype=np.float32)
        np.testing.assert_allclose(got.reshape(1, 3, 1, 1), x.mean(axis=(2, 3), keepdims=True), rtol=1e-4, atol=1e-5)
    after = pool_server.metrics()
    delta = lambda key: after.get(key, 0) - before.get(key, 0)
    assert delta(f"kiln_batch_size_count{{{label}}}") == 4
    assert delta(f"kiln_batch_direct_runs_total{{{label}}}") == 4
    for _ in range(80):  # 80 rows through a ring of 64
        status, _, data = pool_server.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header))})
        assert status == 200, data[:300]
    assert pool_server.metrics()[f"kiln_landing_misses_total{{{label}}}"] == 0

def test_openai_models_list_no_tensor_models(pool_server):
    status, listing = pool_server.json("/v1/models")
    assert status == 200 and listing == {"object": "list", "data": []}


def test_repository_index_load_unload(server):
    status, index = server.json("/v2/repository/index", b"", method="POST")
    assert status == 200
    by_name = {(e["name"], e.get("version")): e for e in index}
    assert by_name[("cnn", "1")]["state"] == "READY"
    assert by_name[("broken", None)]["state"] == "UNAVAILABLE"
    assert "notes.txt" in by_name[("broken", None)]["reason"]  # the error names what the directory holds

    assert server.json("/v2/repository/models/cnn_v/unload", b"", method="POST")[0] == 200
    assert server.json("/v2/models/cnn_v/ready")[0] == 503
    req, _ = cnn_request(1)
    status, err = server.json("/v2/models/cnn_v/infer", req)
    assert status == 503 and "not loaded" in err["error"]
    assert server.json("/v2/repository/models/cnn_v/load", b"", method="POST")[0] == 200
    assert server.json("/v2/models/cnn_v/infer", req)[0] == 200

    status, err = server.json("/v2/repository/models/broken/load", b"", method="POST")
    assert status == 400 and "holds no model" in err["error"]
    status, err = server.json("/v2/repository/models/nosuch/load", b"", method="POST")
    assert status == 400 and "not in the repository" in err["error"]


def test_metrics_and_status_page(server):
    req, _ = cnn_request(1)
    assert server.json("/v2/models/cnn/infer", req)[0] == 200
    m = server.metrics()
    assert m['kiln_requests_total{model="cnn",version="1",status="200"}'] >= 1
    assert m['kiln_queue_depth{model="cnn",version="1"}'] == 0
    assert m['kiln_instances{model="cnn",version="1",state="up"}'] == 2
    assert 'kiln_compute_duration_seconds_count{model="cnn",version="1"}' in m
    status, headers, page = server.request("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    page = page.decode()
    assert "<svg" in page and "cnn" in page and "broken" in page
    assert "http://" not in page.replace(server.url, "") and "<script" not in page  # no external assets


def test_status_page_renders_in_chromium(server, tmp_path):
    """Headless Chromium loads the status page (no external assets) into a DOM with the rate chart and
    a latency chart per model."""
    import shutil
    import subprocess
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if not chromium:
        pytest.skip("chromium is not installed (apt-get install chromium; `make apt-deps` does it)")
    req, _ = cnn_request(1)
    assert server.json("/v2/models/cnn/infer", req)[0] == 200
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", server.url + "/"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    dom = proc.stdout.decode()
    assert "<polyline" in dom and dom.count("<svg") >= 2 and "<td>cnn</td>" in dom and "mean" in dom


def test_only_a_keyed_request_takes_landing_memory(kiln, tmp_path):
    """With API keys, a binary body lands in the model's page-locked memory only when its request names
    a valid key (checked when the headers arrive): an unknown client's body is buffered and refused
    with 401 after it, holding nothing the model's other clients need."""
    pool_model(tmp_path, {"max_batch": 8, "max_queue_delay_us": 1000, "instances": 1})
    label = 'model="pool",version="1"'
    x = np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)
    header, body = binary_request(x)
    with serve(kiln, tmp_path, "--api-key", "sesame", "--open-health") as s:
        status, _, data = s.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header)), "Authorization": "Bearer wrong"})
        assert status == 401, data[:300]
        assert s.metrics().get(f"kiln_batch_direct_runs_total{{{label}}}", 0) == 0
        status, _, data = s.request("/v2/models/pool/infer", body, headers={
            "Inference-Header-Content-Length": str(len(header)), "Authorization": "Bearer sesame"})
        assert status == 200, data[:300]
        assert s.metrics()[f"kiln_batch_direct_runs_total{{{label}}}"] == 1
