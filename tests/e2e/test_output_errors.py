"""Outputs that would destroy what a user owns: `kiln build`, `run`, `bench` refuse (exit 1, a message,
the file byte-identical) an output that is or resolves to an input (the model itself, through a
symbolic or hard link or `..`, its external data, any file of an --hf checkpoint, an --input .npy), and
one that is a FIFO, a device or a directory (without blocking on the FIFO); a symbolic link to another
file is written through; a build killed mid-write leaves no temporary once it or the next build ends."""
import glob
import os
import shutil
import signal
import stat
import subprocess
import time

import numpy as np
import onnx
import pytest

from conftest import assert_error, assert_ok, run_kiln

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
SAMPLE_CNN = os.path.join(REPO, "models", "sample_cnn.onnx")
KJV_GPT2 = os.path.join(REPO, "models", "kjv-gpt2")


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def model(tmp_path):
    """A copy of the sample CNN in tmp_path: (path, its bytes)."""
    path = tmp_path / "m.onnx"
    shutil.copyfile(SAMPLE_CNN, path)
    return str(path), read(path)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A copy of the kjv-gpt2 checkpoint directory: (path, {file name: bytes})."""
    path = tmp_path_factory.mktemp("ckpt") / "kjv-gpt2"
    shutil.copytree(KJV_GPT2, path)
    return str(path), {name: read(path / name) for name in os.listdir(path)}


def test_build_over_its_own_model_is_refused(kiln, model):
    path, original = model
    assert_error(run_kiln(kiln, "build", path, "-o", path), mentions=["refusing to write", "input file"])
    assert read(path) == original


def test_build_through_links_to_the_model_is_refused(kiln, model, tmp_path):
    path, original = model
    os.symlink("m.onnx", tmp_path / "engine.kiln")
    os.link(path, tmp_path / "hard.kiln")
    (tmp_path / "sub").mkdir()
    for out in [tmp_path / "engine.kiln", tmp_path / "hard.kiln", tmp_path / "sub" / ".." / "m.onnx"]:
        assert_error(run_kiln(kiln, "build", path, "-o", out), mentions=["input file"])
        assert read(path) == original
    assert os.path.islink(tmp_path / "engine.kiln")


def test_build_over_external_data_is_refused(kiln, tmp_path):
    m = onnx.load(SAMPLE_CNN)
    onnx.save_model(m, tmp_path / "ext.onnx", save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    weights = read(tmp_path / "weights.bin")
    assert_error(run_kiln(kiln, "build", tmp_path / "ext.onnx", "-o", tmp_path / "weights.bin"),
                 mentions=["weights.bin", "input file"])
    assert read(tmp_path / "weights.bin") == weights


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "vocab.json"])
def test_hf_build_into_the_checkpoint_is_refused(kiln, checkpoint, name):
    path, files = checkpoint
    assert_error(run_kiln(kiln, "build", "--hf", path, "-o", os.path.join(path, name)),
                 mentions=[name, "input file"])
    assert {n: read(os.path.join(path, n)) for n in os.listdir(path)} == files


def test_non_regular_outputs_are_refused(kiln, model, tmp_path):
    path, _ = model
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_error(run_kiln(kiln, "build", path, "-o", fifo, timeout=60), mentions=["FIFO"])
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert_error(run_kiln(kiln, "build", path, "-o", "/dev/null"), mentions=["character device"])
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert_error(run_kiln(kiln, "build", path, "-o", tmp_path), mentions=["directory"])


def test_symlink_output_writes_its_target(kiln, model, tmp_path):
    path, _ = model
    (tmp_path / "engines").mkdir()
    os.symlink("engines/v1.kiln", tmp_path / "current.kiln")
    assert_ok(run_kiln(kiln, "build", path, "-o", tmp_path / "current.kiln"))
    assert os.path.islink(tmp_path / "current.kiln")
    assert read(tmp_path / "engines" / "v1.kiln")[:8] == b"KILNENG1"
    assert not glob.glob(str(tmp_path / "**" / "*.kiln.tmp*"), recursive=True)


def test_other_outputs_follow_the_same_rules(kiln, model, tmp_path):
    path, original = model
    assert_error(run_kiln(kiln, "build", path, "--timing-cache", path, "-o", tmp_path / "x.kiln"),
                 mentions=["input file"])
    assert_error(run_kiln(kiln, "bench", path, "--duration", "0.05", "--warmup", "0", "--iterations", "1",
                          "--export-json", path), mentions=["input file"])
    assert read(path) == original
    out = tmp_path / "out"
    out.mkdir()
    np.save(out / "probs.npy", np.zeros([1, 3, 32, 32], np.float32))  # an input named as the output is
    before = read(out / "probs.npy")
    assert_error(run_kiln(kiln, "run", path, "--input", f"image={out / 'probs.npy'}", "--output-dir", out,
                          "--quiet"), mentions=["input file"])
    assert read(out / "probs.npy") == before
    assert_error(run_kiln(kiln, "run", path, "--output-dir", path, "--quiet"), mentions=["not a directory"])


def default_signals():
    """In the child before exec: SIGINT, SIGTERM and SIGHUP at their default actions (a shell may start
    the test runner with SIGINT ignored, which kiln then keeps ignoring)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def build_until_writing(kiln, checkpoint_dir, out, sig):
    """Starts `kiln build --hf` into out, sends sig as soon as its temporary file appears and returns
    (exit code, the temporary's path); None when the build finished before the temporary was seen."""
    proc = subprocess.Popen([kiln, "build", "--hf", checkpoint_dir, "-o", out], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=default_signals)
    tmp = f"{out}.kiln.tmp{proc.pid}"
    deadline = time.monotonic() + 60
    while proc.poll() is None and not os.path.exists(tmp) and time.monotonic() < deadline:
        time.sleep(0.0005)
    if proc.poll() is not None:
        return None
    proc.send_signal(sig)
    return proc.wait(timeout=60), tmp


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_the_write_removes_the_temporary(kiln, checkpoint, tmp_path, sig):
    out = str(tmp_path / "llm.kiln")
    for _ in range(5):
        got = build_until_writing(kiln, checkpoint[0], out, sig)
        if got:
            break
        os.unlink(out)
    else:
        pytest.skip("the build always finished before its temporary file could be seen")
    rc, tmp = got
    assert rc == -sig
    assert not os.path.exists(tmp) and not os.path.exists(out)


def test_next_build_removes_a_killed_builds_temporary(kiln, checkpoint, tmp_path):
    out = str(tmp_path / "llm.kiln")
    for _ in range(5):
        got = build_until_writing(kiln, checkpoint[0], out, signal.SIGKILL)
        if got:
            break
        os.unlink(out)
    else:
        pytest.skip("the build always finished before its temporary file could be seen")
    rc, tmp = got
    assert rc == -signal.SIGKILL and os.path.exists(tmp)
    assert_ok(run_kiln(kiln, "build", "--hf", checkpoint[0], "-o", out))
    assert not os.path.exists(tmp) and os.path.exists(out)
