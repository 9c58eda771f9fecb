"""Fixtures for the `kiln serve` tests: the kiln binary (env KILN_BIN), a server started on a free
port of 127.0.0.1 (`kiln serve --port 0` prints the port it bound), and model repositories built in
temporary directories from models/sample_cnn.onnx (tensor) and models/kjv-gpt2 (LLM).

Run:  KILN_BIN=build/kiln python -m pytest tests/serve
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_CNN = os.path.join(ROOT, "models", "sample_cnn.onnx")
KJV_GPT2 = os.path.join(ROOT, "models", "kjv-gpt2")
START_TIMEOUT_S = 60
CRASH_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "Segmentation",
                 "Aborted", "assertion failed")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, never a proxy


@pytest.fixture(scope="session")
def kiln():
    """Absolute path of the kiln binary from env KILN_BIN (a missing one fails, never skips)."""
    path = os.environ.get("KILN_BIN")
    if not path:
        pytest.fail("KILN_BIN is not set: point it at the built `kiln` binary (e.g. KILN_BIN=build/kiln)")
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"KILN_BIN={path} is not an executable file")
    if subprocess.run([path, "serve", "--help"], capture_output=True).returncode != 0:
        pytest.skip("this kiln was built without `kiln serve` (libmicrohttpd-dev or libcjson-dev missing)")
    return path


class Server:
    """A running `kiln serve`: its base URL, process, and stderr read so far."""

    def __init__(self, proc, url, log):
        self.proc, self.url, self.log = proc, url, log

    def request(self, path, body=None, method=None, headers=None, timeout=30):
        """(status, headers, body bytes) of one HTTP request; never raises on HTTP errors."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with OPENER.open(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def json(self, path, body=None, method=None, headers=None, timeout=30):
        status, _, data = self.request(path, body, method, headers, timeout)
        return status, json.loads(data) if data else None

    def metrics(self):
        """{'name{labels}': value} of /metrics."""
        _, _, data = self.request("/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


@contextlib.contextmanager
def serve(kiln, repo, *args, env=None):
    """Starts `kiln serve --repo repo --port 0 ARGS`, yields a Server, and stops it with SIGTERM."""
    proc = subprocess.Popen([kiln, "serve", "--repo", str(repo), "--port", "0", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    log, deadline = [], time.time() + START_TIMEOUT_S
    url = None
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            url = m.group(1)
            break
    if not url:
        proc.kill()
        pytest.fail("kiln serve did not start:\n" + "".join(log) + proc.stderr.read())
    server = Server(proc, url, log)
    try:
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.log.extend(proc.stderr.read().splitlines(keepends=True))
        proc.stdout.close()
        proc.stderr.close()
    log = "".join(server.log)
    for marker in CRASH_MARKERS:
        assert marker not in log, f"kiln serve reported {marker!r}:\n{log[-6000:]}"


def tensor_model(repo, name="cnn", config=None, version=1):
    """repo/name/version/model.onnx (sample_cnn) and repo/name/config.json."""
    vdir = os.path.join(repo, name, str(version))
    os.makedirs(vdir, exist_ok=True)
    shutil.copy(SAMPLE_CNN, os.path.join(vdir, "model.onnx"))
    if config is not None:
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump(config, f)


def cnn_request(rows=1, seed=0):
    """A KServe JSON request for sample_cnn (image: rows x 3 x 32 x 32) and its numpy input."""
    import numpy as np
    x = np.random.default_rng(seed).standard_normal((rows, 3, 32, 32)).astype(np.float32)
    return {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.flatten().tolist()}]}, x


def reference_probs(x):
    """sample_cnn's output for x from onnxruntime."""
    import onnxruntime as ort
    sess = ort.InferenceSession(SAMPLE_CNN, providers=["CPUExecutionProvider"])
    return sess.run(None, {"image": x})[0]
