"""The channels-last layout (pass layout_channels_last, forced on for the cpu with KILN_CHANNELS_LAST=1)
through `kiln build` + `kiln run` on the convolution models: the synthetic ResNet of models.py and the
MobileNets PyTorch exported (tests/data/torch). The laid-out engine must lay its convolutions out (the
verbose build log says so), agree with the engine built without the layout (it only moves data:
1e-5) and with onnxruntime (1e-4, as the other e2e tests)."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest

import models
from conftest import ort_run, read_outputs, relative_error, write_inputs

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "torch")
MANIFEST = json.load(open(os.path.join(DATA, "manifest.json")))["models"]
MOBILENETS = sorted(k for k, v in MANIFEST.items() if "file" in v and k.startswith("mobilenet"))
SAME_TOLERANCE = 1e-5  # laid out vs not laid out
ORT_TOLERANCE = 1e-4   # laid out vs onnxruntime


def kiln_env(kiln, args, channels_last):
    """Runs kiln with KILN_CHANNELS_LAST set to channels_last; returns the CompletedProcess."""
    env = dict(os.environ, KILN_CHANNELS_LAST=channels_last)
    proc = subprocess.run([kiln, *map(str, args)], capture_output=True, text=True, errors="replace", env=env,
                          timeout=600)
    assert proc.returncode == 0, f"kiln {' '.join(map(str, args))}: {proc.stderr[-2000:]}"
    return proc


def build_and_run(kiln, model_path, feeds, workdir, channels_last):
    """Builds model_path (verbose) with the layout on ("1") or off ("0") and runs it on feeds; returns
    (number of convolutions the build laid out, the output directory)."""
    engine = workdir / f"model-{channels_last}.kiln"
    proc = kiln_env(kiln, ["build", model_path, "-o", engine, "--verbose"], channels_last)
    log = proc.stdout + proc.stderr
    laid_out = sum("layout_channels_last: " in line and "channels-last between" in line for line in log.splitlines())
    out_dir = workdir / f"out-{channels_last}"
    kiln_env(kiln, ["run", engine, *write_inputs(workdir / "inputs", feeds), "--output-dir", out_dir, "--quiet"],
             channels_last)
    return laid_out, out_dir


def check_model(kiln, model_path, feeds, workdir):
    ref = ort_run(model_path, feeds)
    n_on, out_on = build_and_run(kiln, model_path, feeds, workdir, "1")
    n_off, out_off = build_and_run(kiln, model_path, feeds, workdir, "0")
    assert n_on > 0, "KILN_CHANNELS_LAST=1: the build laid out no convolution"
    assert n_off == 0, f"KILN_CHANNELS_LAST=0: the build laid out {n_off} convolutions"
    on, off = read_outputs(out_on, list(ref)), read_outputs(out_off, list(ref))
    for name, r in ref.items():
        assert on[name].shape == r.shape and on[name].dtype == r.dtype, name
        same = relative_error(on[name], off[name])
        assert same <= SAME_TOLERANCE, f"{name}: laid out vs not laid out {same:.3g} > {SAME_TOLERANCE:g}"
        err = relative_error(on[name], r)
        assert err <= ORT_TOLERANCE, f"{name}: laid out vs onnxruntime {err:.3g} > {ORT_TOLERANCE:g}"


@pytest.mark.parametrize("batch", [1, 3])
def test_resnet_channels_last(kiln, tmp_path, batch):
    model_path = tmp_path / "resnet.onnx"
    onnx.save(models.BUILDERS["resnet"](), model_path)
    check_model(kiln, model_path, models.make_inputs("resnet", batch), tmp_path)


@pytest.mark.parametrize("key", MOBILENETS)
def test_mobilenet_channels_last(kiln, tmp_path, key):
    feeds = {"image": np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype(np.float32)}
    check_model(kiln, os.path.join(DATA, MANIFEST[key]["file"]), feeds, tmp_path)
