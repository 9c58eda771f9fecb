"""Fixtures for the `kiln load` tests: the kiln binary (env KILN_BIN), the controllable test server
(tests/load/test_server.py, started once per session on a free port), and a helper that runs
`kiln load` with --json and returns the process and the parsed result.

Run:  KILN_BIN=build/kiln python -m pytest tests/load
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KILN_TIMEOUT_S = 120
CRASH_MARKERS = ("Segmentation", "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                 "runtime error:", "Assertion", "assertion failed", "core dumped", "Aborted")


@pytest.fixture(scope="session")
def kiln():
    """Absolute path of the kiln binary from env KILN_BIN (a missing one fails, never skips)."""
    path = os.environ.get("KILN_BIN")
    if not path:
        pytest.fail("KILN_BIN is not set: point it at the built `kiln` binary (e.g. KILN_BIN=build/kiln)")
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"KILN_BIN={path} is not an executable file")
    return path


@pytest.fixture(scope="session")
def server():
    """Base URL (http://127.0.0.1:PORT) of a running test_server.py; stopped after the session."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "test_server.py"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        pytest.fail(f"test_server.py did not start: {line!r} {proc.stderr.read()}")
    yield f"http://127.0.0.1:{int(line.split()[1])}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def describe(proc):
    """The command line, exit code and both streams, for assertion messages."""
    return (f"\n$ {' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}")


def assert_no_crash(proc):
    """kiln exited by itself (no signal) and printed no crash or sanitizer report."""
    assert proc.returncode >= 0, f"kiln was killed by signal {-proc.returncode}" + describe(proc)
    for marker in CRASH_MARKERS:
        assert marker not in proc.stdout + proc.stderr, f"crash marker {marker!r}" + describe(proc)


def run_load(kiln, tmp_path, *args, expect_rc=0, name="result"):
    """Runs `kiln load ARGS --json FILE -q`; checks the exit code (None: any clean exit) and returns
    (process, parsed JSON or None when no file was written)."""
    out = tmp_path / f"{name}.json"
    cmd = [kiln, "load", *map(str, args), "--json", str(out), "-q"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=KILN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not finish within {KILN_TIMEOUT_S} s")
    assert_no_crash(proc)
    if expect_rc is not None:
        assert proc.returncode == expect_rc, f"expected exit {expect_rc}" + describe(proc)
    doc = json.loads(out.read_text()) if out.exists() else None
    return proc, doc
