"""Shared fixtures and helpers for the end-to-end tests: locating the `kiln` binary (env KILN_BIN),
running it with a timeout, asserting that a failure was clean (an exit code, a message, no crash or
sanitizer report), and comparing kiln's outputs with onnxruntime's.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e
"""
import os
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

KILN_TIMEOUT_S = 300
CRASH_MARKERS = ("Segmentation", "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                 "runtime error:", "Assertion", "core dumped", "Aborted", "stack smashing")


@pytest.fixture(scope="session")
def kiln():
    """Absolute path of the kiln binary from env KILN_BIN; fails the test when it is not set or not
    executable (so a misconfigured run does not pass by skipping)."""
    path = os.environ.get("KILN_BIN")
    if not path:
        pytest.fail("KILN_BIN is not set: point it at the built `kiln` binary (e.g. KILN_BIN=build/kiln)")
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"KILN_BIN={path} is not an executable file")
    return path


def run_kiln(kiln, *args, timeout=KILN_TIMEOUT_S):
    """Runs kiln with args; returns the CompletedProcess (stdout/stderr as text). A hang is a failure."""
    try:
        return subprocess.run([kiln, *map(str, args)], capture_output=True, text=True, errors="replace",
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kiln {' '.join(map(str, args))} did not finish within {timeout} s")


def describe(proc):
    """The command line, exit code and both streams, for assertion messages."""
    return (f"\n$ {' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
            f"\n--- stderr\n{proc.stderr[-4000:]}")


def assert_no_crash(proc):
    """kiln exited by itself (not killed by a signal) and printed no crash or sanitizer report."""
    assert proc.returncode >= 0, f"kiln was killed by signal {-proc.returncode}" + describe(proc)
    text = proc.stdout + proc.stderr
    for marker in CRASH_MARKERS:
        assert marker not in text, f"crash marker {marker!r} in kiln's output" + describe(proc)


def assert_ok(proc):
    """kiln succeeded: exit 0, no crash."""
    assert_no_crash(proc)
    assert proc.returncode == 0, "kiln failed" + describe(proc)


def without_dirs(text, args):
    """text with the directory part of every path among args (or after the '=' of NAME=PATH) replaced
    by "<dir>", so that checks on a message are not satisfied by words in pytest's tmp_path names."""
    dirs = {os.path.dirname(a.rsplit("=", 1)[-1]) for a in args[1:] if "/" in a}
    for d in sorted(dirs - {""}, key=len, reverse=True):
        text = text.replace(d, "<dir>")
    return text


def assert_error(proc, mentions=(), any_of=(), code=1):
    """kiln failed cleanly with exit `code`, a "kiln: error:" message on stderr (for code 1) that
    contains every string in `mentions` and, when `any_of` is given, at least one of those (all
    compared case-insensitively, with the directories of path arguments blanked out)."""
    assert_no_crash(proc)
    assert proc.returncode == code, f"expected exit {code}" + describe(proc)
    err = proc.stderr
    if code == 1:
        assert "kiln: error:" in err, "no 'kiln: error:' message on stderr" + describe(proc)
    else:
        assert err.strip(), "no message on stderr" + describe(proc)
    low = without_dirs(err, proc.args).lower()
    for m in mentions:
        assert str(m).lower() in low, f"the error message does not mention {m!r}" + describe(proc)
    if any_of:
        assert any(str(m).lower() in low for m in any_of), \
            f"the error message mentions none of {list(any_of)}" + describe(proc)
    return err


def ort_run(model_path, feeds):
    """onnxruntime's outputs for feeds (CPUExecutionProvider, graph optimizations off so the
    reference is the graph as written): a dict name -> array."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def write_inputs(directory, feeds):
    """Saves each input as directory/<name>.npy; returns the ["--input", "name=path", ...] arguments."""
    os.makedirs(directory, exist_ok=True)
    args = []
    for name, arr in feeds.items():
        path = os.path.join(directory, f"{name}.npy")
        np.save(path, arr)
        args += ["--input", f"{name}={path}"]
    return args


def read_outputs(directory, names):
    """Loads directory/<name>.npy for each output name (asserting each exists)."""
    out = {}
    for name in names:
        path = os.path.join(directory, f"{name}.npy")
        assert os.path.isfile(path), f"kiln run wrote no {path} (files: {sorted(os.listdir(directory))})"
        out[name] = np.load(path)
    return out


def relative_error(got, ref):
    """max|got - ref| / max|ref| (max|got - ref| when ref is all zeros)."""
    diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return diff / scale if scale > 0 else diff
