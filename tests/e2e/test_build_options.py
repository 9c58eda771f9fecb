"""`kiln build` options stored in the engine: optimization profiles (chosen per run by `kiln run`,
shapes outside all of them refused with the ranges), --layer-precision (stored, shown by inspect;
the mixed-precision cuda part needs a GPU) and --verbose pass logs."""
import re

import pytest

from conftest import assert_error, assert_ok, describe, run_kiln

SAMPLE = "models/sample_cnn.onnx"
TWO_PROFILES = ["--profile", "image:1x3x32x32,2x3x32x32,4x3x32x32",
                "--profile", "image:8x3x32x32,8x3x32x32,16x3x32x32"]


@pytest.fixture(scope="module")
def profiled(kiln, tmp_path_factory):
    engine = tmp_path_factory.mktemp("profiles") / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine, *TWO_PROFILES))
    return engine


def test_inspect_shows_profiles(kiln, profiled):
    proc = run_kiln(kiln, "inspect", profiled, "--no-layers")
    assert_ok(proc)
    assert "optimization profiles: 2" in proc.stdout, describe(proc)
    assert "profile 0: image [1,3,32,32]..[4,3,32,32] (opt [2,3,32,32])" in proc.stdout, describe(proc)
    assert "profile 1: image [8,3,32,32]..[16,3,32,32] (opt [8,3,32,32])" in proc.stdout, describe(proc)


@pytest.mark.parametrize("batch, profile", [(1, 0), (4, 0), (8, 1), (16, 1)])
def test_run_picks_the_first_profile_that_holds(kiln, profiled, batch, profile):
    proc = run_kiln(kiln, "run", profiled, "--quiet", "--shapes", f"image:{batch}x3x32x32")
    assert_ok(proc)
    assert f"optimization profile: {profile}" in proc.stdout, describe(proc)


@pytest.mark.parametrize("batch", [5, 7, 17])
def test_shapes_outside_every_profile_are_refused(kiln, profiled, batch):
    err = assert_error(run_kiln(kiln, "run", profiled, "--quiet", "--shapes", f"image:{batch}x3x32x32"),
                       mentions=["outside every optimization profile", f"image[{batch},3,32,32]",
                                 "[1,3,32,32]..[4,3,32,32]", "[8,3,32,32]..[16,3,32,32]"])
    assert "profile 1" in err


def test_overlapping_profiles_first_wins(kiln, tmp_path):
    engine = tmp_path / "overlap.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine, "--profile", "image:1x3x32x32,4x3x32x32,8x3x32x32",
                       "--profile", "image:2x3x32x32"))
    proc = run_kiln(kiln, "run", engine, "--quiet", "--shapes", "image:2x3x32x32")
    assert_ok(proc)
    assert "optimization profile: 0" in proc.stdout, describe(proc)


def test_engine_without_profiles_accepts_any_batch(kiln, tmp_path):
    engine = tmp_path / "plain.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine))
    proc = run_kiln(kiln, "run", engine, "--quiet", "--shapes", "image:5x3x32x32")
    assert_ok(proc)
    assert "optimization profile" not in proc.stdout
    assert "optimization profiles: none" in run_kiln(kiln, "inspect", engine, "--no-layers").stdout


@pytest.mark.parametrize("spec, mentions", [
    ("input:1x3x32x32", ["no input 'input'"]),
    ("image:1x3x32,1x3x32,1x3x32", ["rank"]),
    ("image:1x4x32x32,1x4x32x32,2x4x32x32", ["always 3"]),
    ("image:4x3x32x32,2x3x32x32,8x3x32x32", ["min <= opt <= max"]),
])
def test_bad_profiles_fail_the_build(kiln, tmp_path, spec, mentions):
    assert_error(run_kiln(kiln, "build", SAMPLE, "-o", tmp_path / "x.kiln", "--profile", spec), mentions=mentions)
    assert not (tmp_path / "x.kiln").exists()


@pytest.mark.parametrize("args", [["--profile"], ["--profile", "image"], ["--profile", "image:1x3,1x3"],
                                  ["--profile", "image:1x3,1x3x4,2x3"], ["--profile", "image:1xx3"],
                                  ["--layer-precision", "softmax"], ["--layer-precision", "softmax:fp4"],
                                  ["--tuning-level", "4"], ["--tuning-level", "-1"], ["--tuning-level", "two"],
                                  ["--tuning-level", "22"], ["--tuning-level"], ["--timing-cache"],
                                  ["--tuning-budget-ms", "0"], ["--tuning-budget-ms", "-5"], ["--tuning-budget-ms", "1s"],
                                  ["--tuning-budget-ms"], ["--tuning-layer-budget-ms", "unbounded"],
                                  ["--tuning-workspace-mb", "65537"], ["--tuning-workspace-mb", ""]])
def test_bad_option_syntax_exits_2(kiln, tmp_path, args):
    assert_error(run_kiln(kiln, "build", SAMPLE, "-o", tmp_path / "x.kiln", *args), code=2)


def test_tuning_options_leave_cpu_engines_as_they_were(kiln, tmp_path):
    """The cpu target has no tactics: --tuning-level, --timing-cache and the tuning bounds change nothing it
    builds or shows."""
    plain, tuned, cache = tmp_path / "plain.kiln", tmp_path / "tuned.kiln", tmp_path / "timing.cache"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", plain))
    proc = run_kiln(kiln, "build", SAMPLE, "-o", tuned, "--tuning-level", "3", "--timing-cache", cache,
                    "--tuning-budget-ms", "none", "--tuning-layer-budget-ms", "50", "--tuning-workspace-mb", "64")
    assert_ok(proc)
    assert "\ntuning:" not in proc.stdout and "timing cache:" not in proc.stdout, describe(proc)
    assert not cache.exists()
    shown = [run_kiln(kiln, "inspect", engine) for engine in (plain, tuned)]
    for proc in shown:
        assert_ok(proc)
        assert "tuning-level" not in proc.stdout and "tactics" not in proc.stdout, describe(proc)
    strip = lambda text: [l for l in text.splitlines() if not l.startswith(("engine:", "built by:"))]
    assert strip(shown[0].stdout) == strip(shown[1].stdout)


def test_layer_precision_stored_and_shown_cpu(kiln, tmp_path):
    engine = tmp_path / "lp.kiln"
    assert_ok(run_kiln(kiln, "build", SAMPLE, "-o", engine, "--layer-precision", "op:Softmax:fp32",
                       "--layer-precision", "block*_conv:fp32"))
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    assert "--layer-precision op:Softmax:fp32 --layer-precision block*_conv:fp32" in proc.stdout, describe(proc)
    assert "precision: fp32, every layer" in proc.stdout, describe(proc)


def test_layer_precision_errors_cpu(kiln, tmp_path):
    out = tmp_path / "x.kiln"
    assert_error(run_kiln(kiln, "build", SAMPLE, "-o", out, "--layer-precision", "op:Softmax:fp16"),
                 mentions=["does not compute in fp16"])
    assert_error(run_kiln(kiln, "build", SAMPLE, "-o", out, "--layer-precision", "op:Attention:fp32"),
                 mentions=["'op:Attention' matches no layer"])


def test_layer_precision_cuda(kiln, tmp_path):
    engine = tmp_path / "mixed.kiln"
    proc = run_kiln(kiln, "build", SAMPLE, "-o", engine, "--target", "cuda", "--fp16", "--verbose",
                    "--layer-precision", "op:Softmax:fp32", "--layer-precision", "block2*:fp32")
    if proc.returncode != 0:
        pytest.skip("no cuda target or no GPU here: " + proc.stderr.strip().splitlines()[-1])
    assert "accumulates in fp32" in proc.stderr, describe(proc)
    proc = run_kiln(kiln, "inspect", engine)
    assert_ok(proc)
    assert re.search(r"fp32  softmax \(Softmax\)\s+<- overridden", proc.stdout), describe(proc)
    assert_ok(run_kiln(kiln, "compare", SAMPLE, engine))


def test_verbose_logs_every_pass_change(kiln, tmp_path):
    proc = run_kiln(kiln, "build", SAMPLE, "-o", tmp_path / "v.kiln", "--verbose")
    assert_ok(proc)
    log = proc.stderr
    assert "fuse_conv_bn: Conv 'block1_conv' + BatchNormalization 'block1_bn' -> Conv 'block1_conv'" in log, describe(proc)
    assert "fuse_epilogue: Conv 'block1_conv' + Relu 'block1_relu' -> FusedConv 'block1_conv' (Relu)" in log
    assert re.search(r"fuse_conv_bn: \d+ nodes -> \d+ nodes", log), describe(proc)
    assert "optimized: 15 nodes -> 9 nodes" in log
