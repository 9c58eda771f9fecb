"""kiln serve's lifecycle: a model loaded and unloaded 200 times through the API with flat memory,
a failed reload leaving the serving version in place, per-GPU engine variants with a clear error
when none loads, SIGTERM draining the requests in flight before exiting 0, and `kiln load` driving
the server end to end."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import SAMPLE_CNN, cnn_request, serve, tensor_model


@pytest.fixture(scope="module")
def engine(kiln, tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "cnn.kiln"
    subprocess.run([kiln, "build", SAMPLE_CNN, "-o", str(path)], check=True, capture_output=True, timeout=120)
    return path


def engine_model(repo, name, engine, config, filename="model.kiln"):
    vdir = repo / name / "1"
    vdir.mkdir(parents=True)
    os.symlink(engine, vdir / filename)
    (repo / name / "config.json").write_text(json.dumps(config))


def test_load_unload_200_times_flat_rss(kiln, engine, tmp_path):
    engine_model(tmp_path, "cnn", engine, {"max_batch": 2, "instances": 2})
    with serve(kiln, tmp_path) as s:
        req, _ = cnn_request(1)

        def cycle():
            assert s.json("/v2/repository/models/cnn/unload", b"", method="POST")[0] == 200
            assert s.json("/v2/repository/models/cnn/load", b"", method="POST")[0] == 200
            assert s.json("/v2/models/cnn/infer", req)[0] == 200

        for _ in range(20):
            cycle()
        before = s.rss_kb()
        for _ in range(180):
            cycle()
        after = s.rss_kb()
        assert after - before < 4096, f"RSS grew from {before} kB to {after} kB over 180 load/unload cycles"


def test_failed_reload_keeps_serving_version(kiln, tmp_path):
    tensor_model(tmp_path, "cnn", {"max_batch": 2})
    with serve(kiln, tmp_path) as s:
        (tmp_path / "cnn" / "config.json").write_text('{"max_batch": "eight"}')
        status, err = s.json("/v2/repository/models/cnn/load", b"", method="POST")
        assert status == 400 and "'max_batch' must be an integer" in err["error"]
        req, _ = cnn_request(1)
        assert s.json("/v2/models/cnn/infer", req)[0] == 200  # rollback: version 1 still serves
        (tmp_path / "cnn" / "config.json").write_text('{"max_batch": 2, "version_policy": {"latest": 1}}')
        (tmp_path / "cnn" / "2").mkdir()
        (tmp_path / "cnn" / "2" / "model.onnx").write_bytes(b"not an onnx model")
        status, err = s.json("/v2/repository/models/cnn/load", b"", method="POST")
        assert status != 200 and "version 2" in err["error"]
        status, out = s.json("/v2/models/cnn/infer", req)
        assert status == 200 and out["model_version"] == "1"


def test_gpu_variants_error_names_what_exists(kiln, engine, tmp_path):
    engine_model(tmp_path, "cnn", engine, {"max_batch": 2}, filename="model.sm90.kiln")
    (tmp_path / "cnn" / "1" / "model.sm80.kiln").write_bytes(b"KILNENG\0 truncated")
    with serve(kiln, tmp_path) as s:
        # the CPU engine saved as a variant loads; the corrupt one is passed over
        req, _ = cnn_request(1)
        assert s.json("/v2/models/cnn/infer", req)[0] == 200
        os.unlink(tmp_path / "cnn" / "1" / "model.sm90.kiln")
        status, err = s.json("/v2/repository/models/cnn/load", b"", method="POST")
        assert status != 200 and "model.sm80.kiln" in err["error"] and "no GPU variant" in err["error"]


def test_sigterm_drains_requests_in_flight(kiln, tmp_path):
    tensor_model(tmp_path, "slow", {"max_batch": 8, "max_queue_delay_us": 1500000})
    with serve(kiln, tmp_path) as s:
        req, _ = cnn_request(1)
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("r", s.json("/v2/models/slow/infer", req)))
        t.start()
        time.sleep(0.5)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        host, port = s.url.removeprefix("http://").split(":")
        with pytest.raises(OSError):  # no longer accepting
            socket.create_connection((host, int(port)), timeout=2).close()
        t.join(timeout=20)
        assert result["r"][0] == 200, result
        assert s.proc.wait(timeout=20) == 0


def test_kiln_load_drives_kiln_serve(kiln, tmp_path):
    tensor_model(tmp_path, "cnn", {"max_batch": 8, "max_queue_delay_us": 2000})
    with serve(kiln, tmp_path) as s:
        out = tmp_path / "load.json"
        p = subprocess.run([kiln, "load", s.url, "--api", "kserve", "--model", "cnn", "--binary",
                            "--sweep", "rate=20,40", "--duration", "2s", "--warmup", "0.5s", "--threads", "2",
                            "--json", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        steps = json.loads(out.read_text())["steps"]
        assert [st["rate"] for st in steps] == [20, 40]
        for st in steps:
            assert st["failed"] == 0 and st["ok"] == st["scheduled"] > 0, st
        m = s.metrics()
        assert m['kiln_requests_total{model="cnn",version="1",status="200"}'] >= 50


def test_repository_changes_are_picked_up(kiln, tmp_path):
    """With poll_repository_s, a new version is swapped in, a new model is loaded, a broken change
    keeps the serving version, and a removed model is unloaded."""
    import shutil
    repo = tmp_path / "repo"
    tensor_model(repo, "cnn", {"max_batch": 2})
    cfg = tmp_path / "server.json"
    cfg.write_text('{"poll_repository_s": 0.2}')

    def wait_for(check, what):
        deadline = time.time() + 15
        while time.time() < deadline:
            if check():
                return
            time.sleep(0.1)
        pytest.fail(f"the server did not pick up {what}")

    with serve(kiln, repo, "--config", cfg) as s:
        tensor_model(repo, "cnn", version=2)
        wait_for(lambda: s.json("/v2/models/cnn")[1].get("versions") == ["2"], "version 2")
        tensor_model(repo, "fresh", {"max_batch": 2})
        wait_for(lambda: s.json("/v2/models/fresh/ready")[0] == 200, "a new model")
        (repo / "cnn" / "3").mkdir()
        (repo / "cnn" / "3" / "model.onnx").write_bytes(b"garbage")
        time.sleep(1)
        req, _ = cnn_request(1)
        status, out = s.json("/v2/models/cnn/infer", req)
        assert status == 200 and out["model_version"] == "2"
        shutil.rmtree(repo / "fresh")
        wait_for(lambda: s.json("/v2/models/fresh/ready")[0] == 503, "a removed model")


def test_traffic_weights_split_unversioned_requests(kiln, engine, tmp_path):
    for v in (1, 2):
        (tmp_path / "cnn" / str(v)).mkdir(parents=True)
        os.symlink(engine, tmp_path / "cnn" / str(v) / "model.kiln")
    (tmp_path / "cnn" / "config.json").write_text(json.dumps(
        {"max_batch": 0, "version_policy": "all", "traffic": {"1": 80, "2": 20}}))
    with serve(kiln, tmp_path) as s:
        req, _ = cnn_request(1)
        versions = [s.json("/v2/models/cnn/infer", req)[1]["model_version"] for _ in range(200)]
        assert 20 <= versions.count("2") <= 60, versions.count("2")  # 40 expected
        assert s.json("/v2/models/cnn/versions/2/infer", req)[1]["model_version"] == "2"
