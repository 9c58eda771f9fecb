"""CPU weights stored packed in the engine (docs/engine-format.md, "Packed CPU weights"): `kiln build`
stores the Conv / MatMul / Gemm weights of a cpu engine packed (the Winograd Convs' transforms too)
and `kiln inspect` says so and for which instruction set; an engine built with
KILN_CPU_PACKED_WEIGHTS=0 stores them plain; both give the same outputs bit for bit (same kernels)
at a batch the packed matrix products take."""
import numpy as np
import onnx
import pytest

import models
from conftest import assert_ok, read_outputs, run_kiln


@pytest.fixture(scope="module")
def built(kiln, tmp_path_factory):
    """(packed engine, plain engine, model proto, directory) for the e2e ResNet."""
    d = tmp_path_factory.mktemp("packed-weights")
    model = models.BUILDERS["resnet"]()
    onnx.save(model, d / "model.onnx")
    assert_ok(run_kiln(kiln, "build", d / "model.onnx", "-o", d / "packed.kiln"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CPU_PACKED_WEIGHTS", "0")
        assert_ok(run_kiln(kiln, "build", d / "model.onnx", "-o", d / "plain.kiln"))
    return d / "packed.kiln", d / "plain.kiln", model, d


def test_inspect_says_packed(kiln, built):
    packed, plain, _, _ = built
    proc = run_kiln(kiln, "inspect", packed)
    assert_ok(proc)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("packed weights:")), "")
    assert "tensors" in line and "packed on" in line, f"no packed-weights line:\n{proc.stdout}"
    assert any(isa in line for isa in ("avx512", "avx2", "portable")), line
    assert "(matmul)" in line and "(conv rows)" in line, line
    assert "of them Winograd transforms" in line and "(winograd rows)" in line, line  # its 3x3 16-channel Convs
    proc = run_kiln(kiln, "inspect", plain)
    assert_ok(proc)
    assert "packed weights: none stored" in proc.stdout, proc.stdout


def test_packed_and_plain_agree(kiln, built):
    packed, plain, model, d = built
    names = [o.name for o in model.graph.output]
    outs = {}
    for tag, engine in (("packed", packed), ("plain", plain)):
        proc = run_kiln(kiln, "run", engine, "--dim", "batch=8", "--seed", 5, "--quiet", "--output-dir", d / tag)
        assert_ok(proc)
        outs[tag] = read_outputs(d / tag, names)
    for name in names:
        assert np.all(np.isfinite(outs["packed"][name]))
        assert outs["packed"][name].tobytes() == outs["plain"][name].tobytes(), name
