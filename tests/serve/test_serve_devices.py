"""kiln serve's instances across devices and its clients that leave early, on sample_cnn (CPU): a
"devices" list refused for a cpu model, one instance set per entry of "devices" (with the test hook
KILN_SERVE_CPU_DEVICES=1, all on the CPU) shown per device in /metrics and on the status page, an
LLM engine per device with each request sent to the least loaded one, and a
KServe request whose client closes its socket while the request waits in the batcher's queue taken
out unrun."""
import concurrent.futures
import json
import shutil
import socket
import threading
import time

import numpy as np
import pytest

from conftest import KJV_GPT2, cnn_request, reference_probs, serve, tensor_model


def test_devices_list_is_refused_for_a_cpu_model(kiln, tmp_path):
    tensor_model(tmp_path, "cnn", {"devices": [0, 1]})
    with serve(kiln, tmp_path) as s:
        status, err = s.json("/v2/models/cnn/infer", cnn_request(1)[0])
        assert status == 503
        assert "'devices' applies to target \"cuda\" (this model's target is \"cpu\")" in err["error"]


def test_one_instance_set_per_device(kiln, tmp_path):
    tensor_model(tmp_path, "cnn", {"devices": [0, 1], "instances": 2, "max_batch": 1, "max_queue_delay_us": 0})
    with serve(kiln, tmp_path, "--access-log", str(tmp_path / "access.log"),
               env={"KILN_SERVE_CPU_DEVICES": "1"}) as s:
        def one(seed):
            req, x = cnn_request(1, seed)
            status, body = s.json("/v2/models/cnn/infer", req)
            assert status == 200, body
            return np.array(body["outputs"][0]["data"], np.float32).reshape(1, 10), x

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(48)))
        for got, x in results:
            np.testing.assert_allclose(got, reference_probs(x), rtol=1e-4, atol=1e-5)
        m = s.metrics()
        label = 'model="cnn",version="1"'
        up = {k: v for k, v in m.items() if k.startswith(f"kiln_instance_up{{{label}")}
        assert up == {f'kiln_instance_up{{{label},instance="{k}",device="{k % 2}"}}': 1 for k in range(4)}, up
        runs = [m[f'kiln_instance_runs_total{{{label},instance="{k}",device="{k % 2}"}}'] for k in range(4)]
        assert sum(runs) == 48, runs
        _, _, page = s.request("/")
        assert b"instance 3 on device 1: up" in page and b"4 up of 4" in page


@pytest.mark.parametrize("how", ["close", "half-close"])
def test_client_gone_while_queued_is_not_run(kiln, tmp_path, how):
    """The client closes its socket (or half-closes it: before it writes, the server cannot tell the
    two apart) while its request waits 1.5 s for companions: the request leaves the queue within the
    server's look at the socket (20 ms), unrun, unanswered, and counted as 499."""
    tensor_model(tmp_path, "slow", {"max_batch": 8, "max_queue_delay_us": 1500000})
    with serve(kiln, tmp_path) as s:
        host, port = s.url.removeprefix("http://").split(":")
        body = json.dumps(cnn_request(1)[0]).encode()
        conn = socket.create_connection((host, int(port)))
        conn.sendall(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        label = 'model="slow",version="1"'
        deadline = time.time() + 5
        while s.metrics().get(f"kiln_queue_depth{{{label}}}") != 1 and time.time() < deadline:
            time.sleep(0.02)
        assert s.metrics()[f"kiln_queue_depth{{{label}}}"] == 1
        gone_at = time.time()
        if how == "close":
            conn.close()
        else:
            conn.shutdown(socket.SHUT_WR)
        while s.metrics().get(f"kiln_queue_abandoned_total{{{label}}}") != 1 and time.time() < deadline:
            time.sleep(0.01)
        left_after = time.time() - gone_at
        if how == "half-close":
            conn.settimeout(10)
            assert conn.recv(65536) == b"", "a request whose client half-closed was answered"
            conn.close()
        m = s.metrics()
        assert m[f"kiln_queue_abandoned_total{{{label}}}"] == 1
        assert left_after < 0.5, f"the request left the queue {left_after:.2f} s after its client"
        assert m[f"kiln_queue_depth{{{label}}}"] == 0
        assert m.get(f"kiln_batch_size_count{{{label}}}", 0) == 0, "the abandoned request was run"
        assert m[f'kiln_requests_total{{{label},status="499"}}'] == 1
        # the model still serves (a request waits out the delay alone)
        status, _ = s.json("/v2/models/slow/infer", cnn_request(1)[0])
        assert status == 200


def test_llm_request_goes_to_the_least_loaded_device(kiln, tmp_path):
    """kjv-gpt2 on two (CPU) devices: while a long request runs on the first device's engine, the
    next request goes to the second's."""
    shutil.copytree(KJV_GPT2, tmp_path / "kjv" / "1")
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"devices": [0, 1], "max_seqs": 2}))
    with serve(kiln, tmp_path, env={"KILN_SERVE_CPU_DEVICES": "1"}) as s:
        label = 'model="kjv",version="1"'

        def submitted():
            m = s.metrics()
            return [m[f'kiln_llm_device_requests_submitted_total{{{label},device="{d}"}}'] for d in (0, 1)]

        long_req = {"model": "kjv", "prompt": "In the beginning", "max_tokens": 240, "ignore_eos": True,
                    "temperature": 0}
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("long", s.json("/v1/completions", long_req, timeout=120)))
        t.start()
        deadline = time.time() + 30
        while submitted() != [1, 0] and time.time() < deadline:
            time.sleep(0.02)
        assert submitted() == [1, 0]
        short = {"model": "kjv", "prompt": "And God said", "max_tokens": 4, "temperature": 0}
        status, body = s.json("/v1/completions", short)
        assert status == 200 and body["usage"]["completion_tokens"] == 4
        assert submitted() == [1, 1], "the second request did not go to the idle device"
        m = s.metrics()
        assert m[f'kiln_llm_device_requests{{{label},device="0",state="running"}}'] + \
            m[f'kiln_llm_device_requests{{{label},device="0",state="waiting"}}'] == 1
        t.join()
        assert result["long"][0] == 200 and result["long"][1]["usage"]["completion_tokens"] == 240
        assert s.json("/v1/completions", short)[0] == 200
        assert sum(submitted()) == 3
        _, _, page = s.request("/")
        assert b"2 engine loops" in page and b"device 1: 0 waiting / 0 running" in page
