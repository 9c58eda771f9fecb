"""kiln serve against bad clients: malformed JSON, wrong types and shapes, unknown models, versions
and endpoints, oversized, truncated and slow requests. Each gets a 4xx with a message naming what is
wrong (or the connection is closed), and the server keeps answering."""
import json
import socket
import time

import pytest

from conftest import cnn_request, serve, tensor_model

CONFIG = {"max_body_bytes": 200000, "connection_timeout_s": 2}


@pytest.fixture(scope="module")
def server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    tensor_model(repo, "cnn", {"max_batch": 4})
    cfg = tmp_path_factory.mktemp("cfg") / "server.json"
    cfg.write_text(json.dumps(CONFIG))
    with serve(kiln, repo, "--config", cfg) as s:
        yield s
    assert s.proc.returncode == 0, "".join(s.log)


def infer(server, body, path="/v2/models/cnn/infer"):
    status, _, data = server.request(path, body if isinstance(body, bytes) else json.dumps(body).encode())
    return status, json.loads(data)["error"]


def good():
    req, _ = cnn_request(1)
    return req


@pytest.mark.parametrize("mutate, message", [
    (lambda r: b"{not json", "not valid JSON"),
    (lambda r: b"[]", "'inputs' list"),
    (lambda r: {"inputs": "image"}, "'inputs' list"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "name": 7}]}, "'name'"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "datatype": "FLOAT"}]}, "datatype 'FLOAT'"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "datatype": "INT64"}]}, "float32 in the model"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "shape": [1, 3, 32]}]}, "'data' has 3072 elements"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "shape": [1, 3, 16, 64]}]}, "dimension 2 is 32"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "shape": [1, -3, 32, 32]}]}, "non-negative integer"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "shape": "1x3x32x32"}]}, "'shape' list"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "data": ["a"] * 3072}]}, "not a number"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "data": 5}]}, "'data' list"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "data": [1e300] * 3072}]}, "(1e+300) is outside the range of"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "name": "pixels"}]}, "input 'image' of the model is missing"),
    (lambda r: {**r, "inputs": r["inputs"] * 2}, "appears twice"),
    (lambda r: {**r, "outputs": [{"name": "logits"}]}, "no output 'logits'"),
    (lambda r: {**r, "inputs": [{**r["inputs"][0], "shape": [5, 3, 32, 32], "data": [0.0] * 5 * 3072}]},
     "outside the model's 1..4"),
])
def test_bad_json_requests(server, mutate, message):
    status, error = infer(server, mutate(good()))
    assert status == 400 and message in error, error


def test_binary_size_mismatch(server):
    header = json.dumps({"inputs": [{"name": "image", "shape": [1, 3, 32, 32], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 100}}]}).encode()
    status, _, data = server.request("/v2/models/cnn/infer", header + b"\0" * 100,
                                     headers={"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and b"binary_data_size must be 12288" in data
    status, _, data = server.request("/v2/models/cnn/infer", header, headers={"Inference-Header-Content-Length": "99999"})
    assert status == 400 and b"Inference-Header-Content-Length" in data


def test_unknown_model_version_endpoint(server):
    assert infer(server, good(), "/v2/models/nosuch/infer") == (404, "unknown model 'nosuch'")
    status, error = infer(server, good(), "/v2/models/cnn/versions/9/infer")
    assert status == 404 and "no loaded version '9'" in error
    status, _, data = server.request("/v2/models/cnn/explode", b"{}")
    assert status == 404
    status, _, data = server.request("/nowhere")
    assert status == 404 and b"no endpoint" in data
    status, _, data = server.request("/v1/nowhere")
    assert status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    assert not any("nosuch" in k for k in server.metrics())  # unknown names never become label values


def test_oversized_body_is_413(server):
    body = b'{"inputs": [' + b" " * (CONFIG["max_body_bytes"] + 10) + b"]}"
    status, _, data = server.request("/v2/models/cnn/infer", body)
    assert status == 413 and b"larger than the server's limit" in data


def raw(server, payload, wait_s=5.0):
    """Sends payload on a fresh connection and returns everything the server answers until it closes."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as s:
        s.sendall(payload)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def test_oversized_chunked_body_is_413(server):
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(4)) + b"0\r\n\r\n"
    reply = raw(server, b"POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 413")


def test_truncated_and_slow_requests_are_closed(server):
    start = time.time()
    reply = raw(server, b"POST /v2/models/cnn/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"inp")
    assert reply == b"" and time.time() - start < CONFIG["connection_timeout_s"] + 3
    # slowloris: headers that never end
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        start = time.time()
        closed = False
        while time.time() - start < CONFIG["connection_timeout_s"] + 4:
            try:
                s.sendall(b"X-a: b\r\n") if time.time() - start < 1 else None
                if s.recv(1024) == b"":
                    closed = True
                    break
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
            except socket.timeout:
                break
        assert closed, "the server kept a slow client's connection open"
    # garbage that is not HTTP
    assert not raw(server, b"\x00\x01\x02 garbage\r\n\r\n").startswith(b"HTTP/1.1 200")


def test_wrong_method(server):
    status, _, data = server.request("/v2/models/cnn/infer", method="GET")
    assert status == 405
    status, _, _ = server.request("/v2/repository/index", method="GET")
    assert status == 405


def test_still_serving_after_abuse(server):
    req, _ = cnn_request(1)
    assert server.json("/v2/models/cnn/infer", req)[0] == 200
    assert server.proc.poll() is None
