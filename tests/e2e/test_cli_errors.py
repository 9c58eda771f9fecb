"""Bad input through the `kiln` CLI: every case must fail with exit 1 (2 for usage errors), a
"kiln: error:" message that names the problem, and no crash (no signal, no sanitizer report).
Covers missing and non-ONNX files, truncated models, unsupported ops and opsets, bad `kiln run`
inputs, corrupted and mismatched engines, and the command line itself."""
import os
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import assert_error, assert_no_crash, assert_ok, read_outputs, run_kiln

SUBCOMMANDS = ["build", "run", "inspect", "compare", "bench", "generate", "perplexity", "load"]


def tiny_model(opset=17):
    """scaled = Relu(pixel_values * scale_factor): pixel_values float [batch, 4], scale_factor float [1]."""
    nodes = [helper.make_node("Mul", ["pixel_values", "scale_factor"], ["prod"], name="/Mul"),
             helper.make_node("Relu", ["prod"], ["scaled"], name="/Relu")]
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("scaled", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def weighted_model():
    """out = MatMul(x, W) + b with a 64x64 initializer, so an engine has a sizeable weight section."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal([64, 64]).astype(np.float32), "W")
    b = onnx.numpy_helper.from_array(rng.standard_normal([64]).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"], name="/MatMul"),
             helper.make_node("Add", ["xw", "b"], ["out"], name="/Add")]
    graph = helper.make_graph(nodes, "weighted",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 64])],
                              initializer=[w, b])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def files(kiln, tmp_path_factory):
    """A directory with tiny.onnx, tiny.kiln, weighted.onnx, weighted.kiln and good input files."""
    d = tmp_path_factory.mktemp("cli")
    onnx.save(tiny_model(), d / "tiny.onnx")
    onnx.save(weighted_model(), d / "weighted.onnx")
    for name in ("tiny", "weighted"):
        assert_ok(run_kiln(kiln, "build", d / f"{name}.onnx", "-o", d / f"{name}.kiln"))
    np.save(d / "pixels.npy", np.arange(8, dtype=np.float32).reshape(2, 4) - 3)
    np.save(d / "scale.npy", np.array([2.0], dtype=np.float32))
    return d


def good_inputs(d):
    return ["--input", f"pixel_values={d / 'pixels.npy'}", "--input", f"scale_factor={d / 'scale.npy'}"]


def test_good_run_works(kiln, files, tmp_path):
    """The baseline for the run-error cases below: the tiny engine runs and computes the right thing."""
    assert_ok(run_kiln(kiln, "run", files / "tiny.kiln", *good_inputs(files), "--output-dir", tmp_path))
    got = read_outputs(tmp_path, ["scaled"])["scaled"]
    np.testing.assert_array_equal(got, np.maximum((np.arange(8, dtype=np.float32).reshape(2, 4) - 3) * 2, 0))


# ------------------------------------------------------------------ missing and non-ONNX files

@pytest.mark.parametrize("cmd", ["build", "inspect", "run"])
def test_missing_file(kiln, tmp_path, cmd):
    path = tmp_path / "does_not_exist.onnx"
    args = [cmd, path] + (["-o", tmp_path / "x.kiln"] if cmd == "build" else [])
    assert_error(run_kiln(kiln, *args), mentions=["does_not_exist.onnx"])


NOT_ONNX = {
    "text": b"this is not an onnx model\nbut a text file\n",
    "random": np.random.default_rng(1).integers(0, 256, size=4096, dtype=np.uint8).tobytes(),
    "empty": b"",
    "zeros": bytes(1000),
    "npy": None,  # a valid .npy file, which is not a model
}


@pytest.mark.parametrize("cmd", ["build", "inspect", "run"])
@pytest.mark.parametrize("kind", sorted(NOT_ONNX) + ["directory"])
def test_not_a_model(kiln, tmp_path, cmd, kind):
    if kind == "directory":
        path = tmp_path / "adir.onnx"
        path.mkdir()
    else:
        path = tmp_path / f"{kind}.onnx"
        if kind == "npy":
            np.save(tmp_path / "tmp.npy", np.ones([3, 3], np.float32))
            os.rename(tmp_path / "tmp.npy", path)
        else:
            path.write_bytes(NOT_ONNX[kind])
    args = [cmd, path] + (["-o", tmp_path / "x.kiln"] if cmd == "build" else [])
    assert_error(run_kiln(kiln, *args), mentions=[path.name])
    assert not (tmp_path / "x.kiln").exists(), "a failed build left an engine file behind"


@pytest.mark.parametrize("cmd", ["build", "inspect"])
@pytest.mark.parametrize("fraction", [0.0001, 0.01, 0.25, 0.5, 0.9, 0.999])
def test_truncated_model(kiln, tmp_path, cmd, fraction):
    data = weighted_model().SerializeToString()
    cut = max(1, int(len(data) * fraction))
    path = tmp_path / f"cut_{cut}.onnx"
    path.write_bytes(data[:cut])
    args = [cmd, path] + (["-o", tmp_path / "x.kiln"] if cmd == "build" else [])
    assert_error(run_kiln(kiln, *args), mentions=[path.name], any_of=["truncated", "past the end", "ends"])


# ------------------------------------------------------------------ unsupported ops and opsets

def unsupported_model():
    """Relu -> FrobnicateXYZ (made-up, default domain) -> Relu -> MyCustomOp (domain com.example.custom)
    -> Relu: two unsupported nodes among supported ones."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="/first/Relu"),
             helper.make_node("FrobnicateXYZ", ["a"], ["b"], name="/mystery/Frobnicate"),
             helper.make_node("Relu", ["b"], ["c"], name="/second/Relu"),
             helper.make_node("MyCustomOp", ["c"], ["d"], name="/custom/MyCustomOp", domain="com.example.custom"),
             helper.make_node("Relu", ["d"], ["y"], name="/third/Relu")]
    graph = helper.make_graph(nodes, "unsupported",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.example.custom", 3)])
    m.ir_version = 8
    return m


UNSUPPORTED_NAMES = ["FrobnicateXYZ", "/mystery/Frobnicate", "MyCustomOp", "/custom/MyCustomOp",
                     "com.example.custom"]


def test_inspect_lists_all_unsupported_nodes(kiln, tmp_path):
    path = tmp_path / "unsupported.onnx"
    onnx.save(unsupported_model(), path)
    proc = run_kiln(kiln, "inspect", path)
    assert_no_crash(proc)
    assert proc.returncode in (0, 1), "inspect must not treat unsupported ops as a usage error"
    text = proc.stdout + proc.stderr
    for s in UNSUPPORTED_NAMES:
        assert s in text, f"inspect does not list {s!r}:\n{text}"
    # the opsets: 17 for the default domain node, 3 for the custom domain one
    lines = text.splitlines()
    frob = [ln for ln in lines if "FrobnicateXYZ" in ln]
    custom = [ln for ln in lines if "MyCustomOp" in ln]
    assert any("17" in ln for ln in frob), f"no opset 17 on the FrobnicateXYZ line:\n{text}"
    assert any("3" in ln for ln in custom), f"no opset 3 on the MyCustomOp line:\n{text}"
    assert not any("Relu" in ln and "unsupported" in ln.lower() for ln in lines), \
        f"inspect calls Relu unsupported:\n{text}"


def test_build_fails_naming_unsupported_nodes(kiln, tmp_path):
    path = tmp_path / "unsupported.onnx"
    onnx.save(unsupported_model(), path)
    proc = run_kiln(kiln, "build", path, "-o", tmp_path / "u.kiln")
    assert_error(proc, mentions=UNSUPPORTED_NAMES)
    assert not (tmp_path / "u.kiln").exists()


@pytest.mark.parametrize("cmd", ["build", "inspect"])
def test_opset_too_new(kiln, tmp_path, cmd):
    path = tmp_path / "future.onnx"
    onnx.save(tiny_model(opset=99), path)
    args = [cmd, path] + (["-o", tmp_path / "x.kiln"] if cmd == "build" else [])
    proc = run_kiln(kiln, *args)
    if cmd == "build":
        assert_error(proc, mentions=["99", "opset"], any_of=["Mul", "Relu"])
    else:
        assert_no_crash(proc)
        assert proc.returncode in (0, 1)
        text = (proc.stdout + proc.stderr).lower()
        assert "99" in text and "opset" in text, f"inspect does not flag opset 99:\n{proc.stdout}{proc.stderr}"


def test_no_opset_import(kiln, tmp_path):
    m = tiny_model()
    del m.opset_import[:]
    path = tmp_path / "no_opset.onnx"
    onnx.save(m, path)
    assert_error(run_kiln(kiln, "build", path, "-o", tmp_path / "x.kiln"), mentions=["opset"])


def broken_graph(kind):
    """A structurally invalid graph: a node reading a value nothing defines, a cycle, or a graph output
    that no node produces."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    if kind == "undefined-value":
        nodes = [helper.make_node("Add", ["x", "ghost_value"], ["y"], name="/Add")]
    elif kind == "cycle":
        nodes = [helper.make_node("Add", ["x", "loop_b"], ["loop_a"], name="/A"),
                 helper.make_node("Relu", ["loop_a"], ["loop_b"], name="/B"),
                 helper.make_node("Relu", ["loop_b"], ["y"], name="/C")]
    else:
        nodes = [helper.make_node("Relu", ["x"], ["z"], name="/Relu")]
    m = helper.make_model(helper.make_graph(nodes, kind, [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("kind,mentions,any_of", [("undefined-value", ["ghost_value"], []),
                                                   ("cycle", ["cycle"], ["/A", "/B", "loop_a", "loop_b"]),
                                                   ("unproduced-output", ["'y'"], [])])
def test_invalid_graph(kiln, tmp_path, kind, mentions, any_of):
    path = tmp_path / "broken.onnx"
    onnx.save(broken_graph(kind), path)
    proc = run_kiln(kiln, "build", path, "-o", tmp_path / "x.kiln")
    assert_error(proc, mentions=mentions, any_of=any_of)
    proc = run_kiln(kiln, "inspect", path)
    assert_no_crash(proc)
    assert proc.returncode in (0, 1)


# ------------------------------------------------------------------ kiln run: bad inputs

def test_run_wrong_input_name(kiln, files, tmp_path):
    np.save(tmp_path / "p.npy", np.zeros([2, 4], np.float32))
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_valuez={tmp_path / 'p.npy'}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=["pixel_valuez"])


@pytest.mark.parametrize("shape,why", [([8], "rank"), ([2, 4, 1], "rank"), ([2, 5], "dim"), ([], "rank")],
                         ids=["rank1", "rank3", "static-dim", "scalar"])
def test_run_wrong_shape(kiln, files, tmp_path, shape, why):
    np.save(tmp_path / "p.npy", np.zeros(shape, np.float32))
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={tmp_path / 'p.npy'}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=["pixel_values"], any_of=["shape", "rank", "dim"])
    if why == "dim":
        assert "4" in proc.stderr and "5" in proc.stderr, "the message should give expected and actual dims"


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float16, np.int32, np.bool_])
def test_run_wrong_dtype(kiln, files, tmp_path, dtype):
    np.save(tmp_path / "p.npy", np.zeros([2, 4], dtype))
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={tmp_path / 'p.npy'}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=["pixel_values"], any_of=["dtype", "type"])
    assert "float" in proc.stderr.lower(), "the message should say the expected type (float32)"


def test_run_missing_input(kiln, files, tmp_path):
    """Only one of the two inputs given: an error naming the missing one (no silent random fill)."""
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={files / 'pixels.npy'}",
                    "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=["scale_factor"])


def test_run_duplicate_input(kiln, files, tmp_path):
    proc = run_kiln(kiln, "run", files / "tiny.kiln", *good_inputs(files), "--input",
                    f"pixel_values={files / 'pixels.npy'}", "--output-dir", tmp_path / "o")
    assert_no_crash(proc)
    assert proc.returncode in (1, 2), "binding pixel_values twice must be refused"
    assert "pixel_values" in proc.stderr


def npy_header(dtype_descr, shape, fortran=False):
    """A version 1.0 .npy header (magic, length, dict padded to a multiple of 64)."""
    d = f"{{'descr': '{dtype_descr}', 'fortran_order': {fortran}, 'shape': {tuple(shape)}, }}"
    pad = 64 - (10 + len(d) + 1) % 64
    d = d + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()


BAD_NPY = {
    "text": b"1.0 2.0 3.0\n",
    "empty": b"",
    "bad-magic": b"\x93NUMPZ\x01\x00" + npy_header("<f4", (2, 4))[8:] + bytes(32),
    "truncated-header": npy_header("<f4", (2, 4))[:20],
    "truncated-data": npy_header("<f4", (2, 4)) + bytes(31),
    "bad-dict": b"\x93NUMPY\x01\x00" + struct.pack("<H", 54) + b"{'descr': '<f4', 'shape': (2, 4) garbage garbage }  \n"
                + bytes(32),
    "header-len-huge": b"\x93NUMPY\x01\x00" + struct.pack("<H", 65535) + b"{'descr': '<f4'",
    "big-endian": npy_header(">f4", (2, 4)) + bytes(32),
    "fortran": npy_header("<f4", (2, 4), fortran=True) + bytes(32),
    "negative-dim": npy_header("<f4", (2, -4)) + bytes(32),
    "object": npy_header("|O", (2, 4)) + bytes(64),
}


@pytest.mark.parametrize("kind", sorted(BAD_NPY))
def test_run_malformed_npy(kiln, files, tmp_path, kind):
    path = tmp_path / f"bad_{kind}.npy"
    path.write_bytes(BAD_NPY[kind])
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={path}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=[path.name])


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_run_unreadable_npy(kiln, files, tmp_path, kind):
    path = tmp_path / f"{kind}.npy"
    if kind == "directory":
        path.mkdir()
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={path}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=[path.name])


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read a file without read permission")
def test_run_npy_without_permission(kiln, files, tmp_path):
    path = tmp_path / "noperm.npy"
    np.save(path, np.zeros([2, 4], np.float32))
    path.chmod(0)
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", f"pixel_values={path}",
                    "--input", f"scale_factor={files / 'scale.npy'}", "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=[path.name])


@pytest.mark.parametrize("spec", ["pixel_values", "=x.npy", "pixel_values="], ids=["no-equals", "no-name", "no-file"])
def test_run_malformed_input_flag(kiln, files, tmp_path, spec):
    proc = run_kiln(kiln, "run", files / "tiny.kiln", "--input", spec, "--output-dir", tmp_path / "o")
    assert_no_crash(proc)
    assert proc.returncode in (1, 2), f"--input {spec!r} must be refused"
    assert proc.stderr.strip()


def test_run_output_dir_is_a_file(kiln, files, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    proc = run_kiln(kiln, "run", files / "tiny.kiln", *good_inputs(files), "--output-dir", blocker)
    assert_error(proc, mentions=["blocker"])


def test_build_output_in_missing_directory(kiln, files, tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "e.kiln"
    assert_error(run_kiln(kiln, "build", files / "tiny.onnx", "-o", out), mentions=["e.kiln"])


# ------------------------------------------------------------------ corrupted and mismatched engines

def engine_bytes(files):
    return (files / "weighted.kiln").read_bytes()


@pytest.mark.parametrize("where", [0.25, 0.5, 0.75, 0.98])
def test_engine_byte_flipped(kiln, files, tmp_path, where):
    data = bytearray(engine_bytes(files))
    pos = int(len(data) * where)
    data[pos] ^= 0xFF
    path = tmp_path / f"flipped_{pos}.kiln"
    path.write_bytes(bytes(data))
    for cmd in ("run", "inspect"):
        args = [cmd, path] + (["--output-dir", tmp_path / "o"] if cmd == "run" else [])
        assert_error(run_kiln(kiln, *args), mentions=[path.name])


@pytest.mark.parametrize("cut", [1, 7, 8, 16, 64, 0.5, -1])
def test_engine_truncated(kiln, files, tmp_path, cut):
    data = engine_bytes(files)
    n = int(len(data) * cut) if isinstance(cut, float) else (len(data) + cut if cut < 0 else cut)
    path = tmp_path / f"cut_{n}.kiln"
    path.write_bytes(data[:n])
    for cmd in ("run", "inspect"):
        args = [cmd, path] + (["--output-dir", tmp_path / "o"] if cmd == "run" else [])
        # even when too short to hold the magic, a *.kiln file is an engine and is reported as one
        assert_error(run_kiln(kiln, *args), mentions=[path.name], any_of=["truncated", "engine"])


def test_engine_magic_changed(kiln, files, tmp_path):
    data = bytearray(engine_bytes(files))
    assert bytes(data[:8]) == b"KILNENG1", "the engine does not start with the documented magic"
    data[:8] = b"KILNENG9"
    path = tmp_path / "changed.kiln"
    path.write_bytes(bytes(data))
    for cmd in ("run", "inspect"):
        args = [cmd, path] + (["--output-dir", tmp_path / "o"] if cmd == "run" else [])
        # the message must say what is wrong (not an engine / bad magic), not an ONNX parse error
        assert_error(run_kiln(kiln, *args), mentions=[path.name], any_of=["magic", "not a kiln engine"])


def crc32c(data):
    """CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# Engine header layout (docs/engine-format.md, src/engine/engine_layout.h): the format version is a
# little-endian u32 at offset 8, the kiln version a char[32] at 64, the section table (entries of
# u32 id, u32 crc, u64 offset, u64 size; graph first, then weights) at 1008, and a CRC-32C of bytes
# [0, 1276) at 1276.
FORMAT_VERSION_OFFSET = 8
KILN_VERSION_OFFSET = 64
SECTION_TABLE_OFFSET = 1008
SECTION_ENTRY_SIZE = 24
HEADER_CRC_OFFSET = 1276


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def resealed(data):
    """data with the header CRC recomputed (so only the deliberate change is wrong)."""
    struct.pack_into("<I", data, HEADER_CRC_OFFSET, crc32c(data[:HEADER_CRC_OFFSET]))
    return bytes(data)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 8, 999, 0])
def test_engine_version_changed(kiln, files, tmp_path, version):
    """The format version field set to another version, with the header checksum recomputed so that
    only the version is wrong: refused as a mismatch that names the version and says to rebuild."""
    data = bytearray(engine_bytes(files))
    assert struct.unpack_from("<I", data, FORMAT_VERSION_OFFSET)[0] == 7, "format version 7 expected at offset 8"
    assert struct.unpack_from("<I", data, HEADER_CRC_OFFSET)[0] == crc32c(data[:HEADER_CRC_OFFSET]), \
        "the header checksum is not where docs/engine-format.md says"
    struct.pack_into("<I", data, FORMAT_VERSION_OFFSET, version)
    path = tmp_path / f"modified_{version}.kiln"
    path.write_bytes(resealed(data))
    for cmd in ("run", "inspect"):
        args = [cmd, path] + (["--output-dir", tmp_path / "o"] if cmd == "run" else [])
        assert_error(run_kiln(kiln, *args), mentions=["version", "rebuild", str(version)])


def test_engine_built_by_other_kiln_version(kiln, files, tmp_path):
    """kiln version field (offset 64, char[32]) of another major.minor: a mismatch saying to rebuild."""
    data = bytearray(engine_bytes(files))
    data[KILN_VERSION_OFFSET:KILN_VERSION_OFFSET + 32] = b"9.8.0".ljust(32, b"\0")
    path = tmp_path / "other.kiln"
    path.write_bytes(resealed(data))
    assert_error(run_kiln(kiln, "run", path, "--output-dir", tmp_path / "o"), mentions=["9.8", "rebuild"])


def test_engine_padding_byte_flipped(kiln, files, tmp_path):
    """A non-zero byte in the padding between the header and the weights section is corruption too."""
    data = bytearray(engine_bytes(files))
    weights_off = struct.unpack_from("<Q", data, SECTION_TABLE_OFFSET + SECTION_ENTRY_SIZE + 8)[0]
    assert HEADER_CRC_OFFSET + 4 < weights_off, "the test engine has no padding to corrupt"
    data[(HEADER_CRC_OFFSET + 4 + weights_off) // 2] = 0x5A
    path = tmp_path / "padded.kiln"
    path.write_bytes(bytes(data))
    assert_error(run_kiln(kiln, "run", path, "--output-dir", tmp_path / "o"), mentions=[path.name],
                 any_of=["corrupt", "padding"])


def test_engine_reserved_header_byte_set(kiln, files, tmp_path):
    data = bytearray(engine_bytes(files))
    data[40] = 1
    path = tmp_path / "reserved.kiln"
    path.write_bytes(resealed(data))
    assert_error(run_kiln(kiln, "run", path, "--output-dir", tmp_path / "o"), mentions=[path.name],
                 any_of=["corrupt", "reserved"])


def test_engine_trailing_bytes(kiln, files, tmp_path):
    path = tmp_path / "trailing.kiln"
    path.write_bytes(engine_bytes(files) + b"extra")
    assert_error(run_kiln(kiln, "run", path, "--output-dir", tmp_path / "o"), mentions=[path.name])


def test_engine_version_changed_without_reseal(kiln, files, tmp_path):
    """Only the version bytes changed (header checksum now wrong): still refused cleanly."""
    data = bytearray(engine_bytes(files))
    struct.pack_into("<I", data, FORMAT_VERSION_OFFSET, 999)
    path = tmp_path / "future_unsealed.kiln"
    path.write_bytes(bytes(data))
    assert_error(run_kiln(kiln, "run", path, "--output-dir", tmp_path / "o"), mentions=[path.name])


def test_onnx_model_named_kiln(kiln, tmp_path):
    """An ONNX model saved as .kiln is recognised or refused cleanly (never a crash)."""
    onnx.save(tiny_model(), tmp_path / "m.kiln")
    proc = run_kiln(kiln, "inspect", tmp_path / "m.kiln")
    assert_no_crash(proc)
    assert proc.returncode in (0, 1)


# ------------------------------------------------------------------ the command line

def test_no_arguments(kiln):
    proc = run_kiln(kiln)
    assert_no_crash(proc)
    assert proc.returncode == 2
    assert "usage" in (proc.stdout + proc.stderr).lower()


def test_unknown_subcommand(kiln):
    assert_error(run_kiln(kiln, "frobnicate"), mentions=["frobnicate"], code=2)


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_unknown_flag(kiln, files, cmd):
    assert_error(run_kiln(kiln, cmd, files / "tiny.onnx", "--bogus-flag"), mentions=["--bogus-flag"], code=2)


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_missing_positional(kiln, cmd):
    proc = run_kiln(kiln, cmd)
    assert_no_crash(proc)
    assert proc.returncode == 2, f"`kiln {cmd}` without a file is a usage error"
    assert proc.stderr.strip()


@pytest.mark.parametrize("args", [["build", "m.onnx", "-o"], ["run", "e.kiln", "--input"],
                                  ["run", "e.kiln", "--output-dir"], ["run", "e.kiln", "--seed"],
                                  ["run", "e.kiln", "--seed", "notanumber"]],
                         ids=["build-o", "run-input", "run-output-dir", "run-seed", "run-seed-nan"])
def test_flag_missing_value(kiln, tmp_path, args):
    proc = run_kiln(kiln, *args)
    assert_no_crash(proc)
    assert proc.returncode == 2, "a flag without its value is a usage error"
    assert proc.stderr.strip()


@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_subcommand_help(kiln, cmd):
    proc = run_kiln(kiln, cmd, "--help")
    assert_ok(proc)
    assert "usage" in proc.stdout.lower() and cmd in proc.stdout, proc.stdout


def test_top_level_help(kiln):
    proc = run_kiln(kiln, "--help")
    assert_ok(proc)
    for cmd in SUBCOMMANDS:
        assert cmd in proc.stdout


def test_version(kiln):
    proc = run_kiln(kiln, "--version")
    assert_ok(proc)
    assert "0.1.0" in proc.stdout
