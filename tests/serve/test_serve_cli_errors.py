"""`kiln serve`'s command line and start-up errors: each exits non-zero at once with a message naming
what is wrong (a missing repository, a bad keys file line, an unknown --config key, a taken port)."""
import hashlib
import socket
import subprocess

import pytest

from conftest import serve, tensor_model


def run(kiln, *args, timeout=30):
    return subprocess.run([kiln, "serve", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_usage_errors(kiln):
    p = run(kiln)
    assert p.returncode == 2 and "--repo DIR is required" in p.stderr
    p = run(kiln, "--repo", ".", "--port", "70000")
    assert p.returncode == 2 and "--port 70000" in p.stderr
    p = run(kiln, "--repo", ".", "--bogus")
    assert p.returncode == 2 and "unknown option '--bogus'" in p.stderr
    p = run(kiln, "--help")
    assert p.returncode == 0 and "--api-key" in p.stdout


@pytest.mark.parametrize("setup, message", [
    (lambda d: ["--repo", d / "missing"], "is not a directory"),
    (lambda d: ["--repo", d, "--keys", d / "nokeys.txt"], "keys file"),
    (lambda d: ["--repo", d, "--keys", write(d / "k.txt", "# ok\nnot-a-hash\n")], "k.txt:2: expected the 64 hex digits"),
    (lambda d: ["--repo", d, "--keys", write(d / "k.txt", hashlib.sha256(b"k").hexdigest() + " rps=fast\n")],
     "bad value 'fast' for rps"),
    (lambda d: ["--repo", d, "--config", write(d / "c.json", '{"max_body": 5}')], "unknown key 'max_body'"),
    (lambda d: ["--repo", d, "--config", write(d / "c.json", '{"drain_timeout_s": -1}')], "'drain_timeout_s' must be"),
    (lambda d: ["--repo", d, "--config", write(d / "c.json", "[")], "not a JSON object"),
    (lambda d: ["--repo", d, "--api-key", ""], "may not be empty"),
    (lambda d: ["--repo", d, "--host", "localhost"], "not an IPv4 address"),
])
def test_start_up_errors(kiln, tmp_path, setup, message):
    p = run(kiln, *setup(tmp_path))
    assert p.returncode == 1 and message in p.stderr, p.stderr


def write(path, text):
    path.write_text(text)
    return path


def test_port_in_use(kiln, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        p = run(kiln, "--repo", tmp_path, "--port", s.getsockname()[1])
        assert p.returncode == 1 and "cannot listen on 127.0.0.1" in p.stderr


def test_bad_model_config_leaves_the_others_serving(kiln, tmp_path):
    tensor_model(tmp_path, "good", {"max_batch": 2})
    tensor_model(tmp_path, "typo", {"max_bach": 2})
    with serve(kiln, tmp_path) as s:
        assert "unknown key 'max_bach'" in "".join(s.log)
        assert s.json("/v2/models/good")[0] == 200
        status, err = s.json("/v2/models/typo/ready")
        assert status == 503
