"""`kiln load` on bad input: unreachable, refusing, unresolvable, slow and misbehaving servers are
counted as errors by kind (never a crash), and bad command lines exit 2 with a clear message. This
file also runs in the sanitizer build (tests/CMakeLists.txt), which checks that no sanitizer report
appears.
"""
import socket
import subprocess

import pytest

from conftest import assert_no_crash, describe, run_load


def free_port():
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TRANSPORTS = ["native", "curl"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_refused_connections_are_counted(kiln, tmp_path, transport):
    proc, doc = run_load(kiln, tmp_path, f"http://127.0.0.1:{free_port()}/", "--requests", 5, "--warmup", 0,
                         "--transport", transport, expect_rc=1)
    step = doc["steps"][0]
    assert step["failed"] == 5 and step["errors"]["refused"] == 5 and step["ok"] == 0
    assert "every request failed" in proc.stderr and "refused" in proc.stdout


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_unresolvable_host_is_counted(kiln, tmp_path, transport):
    _, doc = run_load(kiln, tmp_path, "http://kiln-load-test.invalid/", "--requests", 2, "--warmup", 0,
                      "--timeout", "5s", "--transport", transport, expect_rc=1)
    step = doc["steps"][0]
    assert step["failed"] == 2 and step["errors"]["resolve"] + step["errors"]["timeout"] == 2


@pytest.mark.parametrize("url", ["htp:/nowhere", "not a url", "ftp://127.0.0.1/x", "http://"])
def test_bad_url_is_a_usage_error(kiln, tmp_path, url):
    proc, doc = run_load(kiln, tmp_path, url, "--requests", 1, expect_rc=2)
    assert "kiln: error: URL" in proc.stderr and doc is None, describe(proc)


@pytest.mark.parametrize("path,api,extra", [
    ("/malformed/v1/chat/completions", "openai-chat", []),
    ("/malformed/v1/chat/completions", "openai-chat", ["--stream"]),
    ("/malformed/v1/completions", "openai-completions", ["--stream"]),
    ("/garbage", "http", []),
    ("/garbage", "http", ["--transport", "curl"]),
    ("/malformed/v1/chat/completions", "openai-chat", ["--stream", "--transport", "curl"]),
])
def test_malformed_responses_are_counted(kiln, server, tmp_path, path, api, extra):
    args = ["--api", api, "--requests", 4, "--warmup", 0, *extra]
    if api != "http":
        args += ["--model", "m", "--output-len", 3]
    proc, doc = run_load(kiln, tmp_path, server + path, *args, expect_rc=1)
    step = doc["steps"][0]
    assert step["failed"] == 4 and step["errors"]["malformed"] == 4, describe(proc)
    assert step["first_error"].startswith("malformed: ")


def test_http_errors_are_counted_by_status(kiln, server, tmp_path):
    _, doc = run_load(kiln, tmp_path, f"{server}/status?code=503", "--requests", 3, "--warmup", 0, expect_rc=1)
    step = doc["steps"][0]
    assert step["errors"]["http_status"] == 3 and step["status_codes"] == {"503": 3}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeouts_are_counted(kiln, server, tmp_path, transport):
    _, doc = run_load(kiln, tmp_path, f"{server}/delay?ms=3000", "--requests", 2, "--concurrency", 2,
                      "--warmup", 0, "--timeout", "300ms", "--transport", transport, expect_rc=1)
    assert doc["steps"][0]["errors"]["timeout"] == 2


def test_missing_kserve_model_is_a_clear_error(kiln, server, tmp_path):
    proc, doc = run_load(kiln, tmp_path, f"{server}/nothing", "--api", "kserve", "--model", "m", "--requests", 1,
                         expect_rc=1)
    assert "metadata" in proc.stderr and "404" in proc.stderr and doc is None, describe(proc)


BAD_ARGS = [
    (["--rate", "10", "--concurrency", "2"], "exclude each other"),
    (["--rate", "-3"], "--rate"),
    (["--duration", "soon"], "not a duration"),
    (["--sweep", "speed=1,2"], "--sweep"),
    (["--sweep", "concurrency=1,2.5"], "whole number"),
    (["--sweep", "rate=10", "--stop-when", "p99<5ms"], "--stop-when"),
    (["--stop-when", "p99>5ms"], "applies to a --sweep"),
    (["--slo", "ttft=fast"], "--slo ttft"),
    (["--slo", "speed=1s"], "unknown term"),
    (["--input-len", "uniform:10"], "length distribution"),
    (["--api", "grpc"], "--api"),
    (["--bogus"], "unknown option"),
    (["--rate"], "needs a value"),
    (["--target-rate", "100"], "needs an --slo"),
    (["--stream"], "--stream is for the OpenAI APIs"),
    (["--api", "openai-chat", "--model", "m", "--extra", "[1]"], "--extra must be a JSON object"),
    (["--shape", "x"], "--shape"),
    (["--transport", "quic"], "--transport"),
    (["--threads", "0"], "--threads"),
    (["--threads", "65"], "--threads"),
    (["--threads", "2.5"], "--threads"),
]


@pytest.mark.parametrize("args,message", BAD_ARGS)
def test_bad_arguments_exit_2_with_a_message(kiln, server, args, message):
    proc = subprocess.run([kiln, "load", server, *args], capture_output=True, text=True, timeout=60)
    assert_no_crash(proc)
    assert proc.returncode == 2, describe(proc)
    assert "kiln: error:" in proc.stderr and message in proc.stderr, describe(proc)


def test_no_url_and_compare_misuse(kiln, tmp_path):
    proc = subprocess.run([kiln, "load"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no URL" in proc.stderr
    proc = subprocess.run([kiln, "load", "compare", "only-one.json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"hello": 1}')
    proc = subprocess.run([kiln, "load", "compare", str(bogus), str(bogus)], capture_output=True, text=True, timeout=60)
    assert_no_crash(proc)
    assert proc.returncode == 1 and "not a kiln load result" in proc.stderr
    bogus.write_text('{"kiln_load_format": 1, "steps": [{"ok": "x"}, 3]')
    proc = subprocess.run([kiln, "load", "compare", str(bogus), str(bogus)], capture_output=True, text=True, timeout=60)
    assert_no_crash(proc)
    assert proc.returncode == 1 and "invalid JSON" in proc.stderr
    bogus.write_text('{"kiln_load_format": 1, "steps": [{"ok": "x", "latency_ms": 5}, 3, null], "capacity": 1}')
    proc = subprocess.run([kiln, "load", "compare", str(bogus), str(bogus)], capture_output=True, text=True, timeout=60)
    assert_no_crash(proc)
    assert proc.returncode == 0, describe(proc)  # odd values are shown as missing, never trusted


def test_help_documents_every_flag(kiln):
    proc = subprocess.run([kiln, "load", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for flag in ("--api", "--model", "--model-version", "--stream", "--header", "--method", "--data", "--body",
                 "--rate", "--poisson", "--concurrency", "--connections", "--threads", "--duration", "--requests", "--warmup",
                 "--timeout", "--seed", "--sweep", "--stop-when", "--slo", "--goodput", "--target-rate",
                 "--input-len", "--output-len", "--prompts", "--ignore-eos", "--extra", "--input", "--shape",
                 "--binary", "--transport", "--scrape", "--metrics-url", "--metrics-match", "--scrape-interval", "--json", "--csv",
                 "--report", "--quiet", "compare"):
        assert flag in proc.stdout, f"{flag} is not documented in kiln load --help"


def test_model_discovery_failure_keeps_the_cause(kiln, tmp_path):
    """Without --model, kiln load asks GET /v1/models; when the server refuses the connection the
    message says so once, with curl's reason, and exits 1 (not a usage error)."""
    port = free_port()
    proc, doc = run_load(kiln, tmp_path, f"http://127.0.0.1:{port}/v1/chat/completions", "--api", "openai-chat",
                         "--requests", 1, expect_rc=1)
    err = proc.stderr
    assert err.count("no --model given") == 1, describe(proc)
    assert f"127.0.0.1:{port}/v1/models" in err and "refused" in err.lower(), describe(proc)
    assert doc is None
