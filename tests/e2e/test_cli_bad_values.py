"""Values at and beyond their limits through the `kiln` CLI: engine headers with fields no calendar
holds, model attributes and checkpoint configs whose sizes overflow or exceed what the file holds, a
KV cache larger than the host, out-of-range options, and the messages a user meets for them. Every
case must end cleanly (no signal, no sanitizer report; this file also runs in the sanitizer build)
with a message naming what is wrong.

Run:  KILN_BIN=build/kiln python -m pytest tests/e2e/test_cli_bad_values.py
"""
import json
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import assert_error, assert_ok, read_outputs, run_kiln, write_inputs
from llm_checkpoints import make_gpt2, make_llama
from test_cli_errors import resealed, tiny_model
from test_generate import VOCAB, write_tokenizer

CREATED_OFFSET = 24         # u64 creation time (docs/engine-format.md, "Header")
FORMAT_VERSION_OFFSET = 8   # u32 format version


@pytest.fixture(scope="module")
def engines(kiln, tmp_path_factory):
    """A directory with tiny.onnx, tiny.kiln (a graph engine) and llm.kiln (a tiny GPT-2 engine)."""
    d = tmp_path_factory.mktemp("bad_values")
    onnx.save(tiny_model(), d / "tiny.onnx")
    assert_ok(run_kiln(kiln, "build", d / "tiny.onnx", "-o", d / "tiny.kiln"))
    make_gpt2(d / "gpt2", vocab=64, n_positions=32)
    assert_ok(run_kiln(kiln, "build", "--hf", d / "gpt2", "-o", d / "llm.kiln"))
    return d


def patched(src, dst, offset, fmt, value):
    """dst: the engine src with the header field at offset set to value (struct format fmt), resealed."""
    data = bytearray(src.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    dst.write_bytes(resealed(data))
    return dst


@pytest.mark.parametrize("engine", ["tiny.kiln", "llm.kiln"])
@pytest.mark.parametrize("created", [1 << 62, (1 << 64) - 1, 1 << 40])
def test_inspect_creation_time_beyond_the_calendar(kiln, engines, tmp_path, engine, created):
    """A creation time of 2^62 s made gmtime return NULL into strftime (a crash); now it is shown raw."""
    path = patched(engines / engine, tmp_path / engine, CREATED_OFFSET, "<Q", created)
    proc = run_kiln(kiln, "inspect", path, "--no-layers")
    assert_ok(proc)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("built by:"))
    assert str(created) in line or "UTC" in line, proc.stdout
    if created >= 1 << 62:
        assert f"invalid date ({created} seconds since 1970)" in line, proc.stdout


# ------------------------------------------------------------------ sizes beyond 64 bits

BIG = 1 << 62


def one_node_model(path, op, attrs=None, consts=(), x_shape=(1, 1, 4, 4), n_out=1, opset=17):
    """y = op(x, *consts) with x float [x_shape] (dims may be names) and int64 or float initializers."""
    names = ["x"] + [c.name for c in consts]
    outs = ["y"] + [f"y{k}" for k in range(1, n_out)]
    node = helper.make_node(op, names, outs, name=f"/{op}", **(attrs or {}))
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                              initializer=list(consts))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


W3 = numpy_helper.from_array(np.ones([1, 1, 3, 3], np.float32), "W")
OVERFLOWING = {
    # Conv with pads of 2^40: each output dim is 2^41, their product wrapped before the size check
    "conv_pads": ("Conv", dict(pads=[1 << 40] * 4), [W3]),
    "conv_pads_2^62": ("Conv", dict(pads=[BIG] * 4), [W3]),
    "conv_dilations": ("Conv", dict(dilations=[BIG, BIG]), [W3]),
    "conv_transpose_strides": ("ConvTranspose", dict(strides=[BIG, BIG]), [W3]),
    "max_pool": ("MaxPool", dict(kernel_shape=[BIG, BIG], pads=[BIG] * 4, strides=[BIG, BIG], ceil_mode=1), []),
    # AveragePool with pads of 2^40: the pooling plan multiplied the 2^41 output dims
    "average_pool": ("AveragePool", dict(kernel_shape=[2, 2], pads=[1 << 40] * 4, ceil_mode=1), []),
    "depth_to_space": ("DepthToSpace", dict(blocksize=1 << 32), []),
    "space_to_depth": ("SpaceToDepth", dict(blocksize=1 << 32), []),
    "expand": ("Expand", {}, [i64("s", [BIG, BIG, 1, 1])]),
    "tile": ("Tile", {}, [i64("r", [1, 1, BIG, BIG])]),
    "pad": ("Pad", {}, [i64("p", [0, 0, BIG, BIG, 0, 0, BIG, BIG])]),
    "resize_scales": ("Resize", {}, [numpy_helper.from_array(np.array([], np.float32), "roi"),
                                     numpy_helper.from_array(np.array([1, 1, 1e30, 1e30], np.float32), "sc")]),
    "reshape": ("Reshape", {}, [i64("s", [BIG, BIG, -1])]),
}


@pytest.mark.parametrize("shapes", ["static", "dynamic"])
@pytest.mark.parametrize("case", sorted(OVERFLOWING))
def test_sizes_beyond_64_bits(kiln, tmp_path, case, shapes):
    """Attributes and constant inputs whose sizes overflow int64 (UBSan's signed overflow in the Conv
    and Slice kernels and shape inference, SIGFPE for a blocksize of 2^32): a clean error naming the
    node, at build time when the shapes are static, at run time otherwise."""
    op, attrs, consts = OVERFLOWING[case]
    x_shape, dims = ((1, 1, 4, 4), []) if shapes == "static" else ((1, 1, "h", "w"), ["--dim", "h=4", "--dim", "w=4"])
    model = one_node_model(tmp_path / f"{case}.onnx", op, attrs, consts, x_shape)
    proc = run_kiln(kiln, "run", model, *dims, "--output-dir", tmp_path / "o")
    assert_error(proc, mentions=[f"/{op}"])


def test_slice_with_extreme_starts_and_steps(kiln, tmp_path):
    """Slice with starts 2^62, ends -2^62 and steps -2^63 is valid: one element per sliced axis (the
    kernel's stride is_i * step overflowed)."""
    model = one_node_model(tmp_path / "slice.onnx", "Slice", {},
                           [i64("st", [BIG, BIG]), i64("en", [-BIG, -BIG]), i64("ax", [2, 3]),
                            i64("sp", [-(1 << 63), -(1 << 63)])], x_shape=(1, 1, "h", "w"))
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    assert_ok(run_kiln(kiln, "run", model, *write_inputs(tmp_path / "in", {"x": x}), "--output-dir", tmp_path / "o"))
    got = read_outputs(tmp_path / "o", ["y"])["y"]
    np.testing.assert_array_equal(got, x[:, :, BIG:-BIG:-(1 << 63), BIG:-BIG:-(1 << 63)])


def test_static_output_too_large_is_refused_at_build(kiln, tmp_path):
    """A static output of more than 2^40 elements can never run: the build says which node and output."""
    model = one_node_model(tmp_path / "cos.onnx", "Expand", {}, [i64("s", [1 << 20, 1 << 20, 4, 4])])
    assert_error(run_kiln(kiln, "build", model, "-o", tmp_path / "e.kiln"),
                 mentions=["/Expand", "output 'y'", "[1048576,1048576,4,4]", "2^40"])
    assert not (tmp_path / "e.kiln").exists()
    # inspect printed "none: kiln can run every node" and exited 0 for a graph a build refuses
    proc = run_kiln(kiln, "inspect", model, "--no-layers")
    assert_error(proc, mentions=["/Expand", "2^40"])
    assert "can run every node" not in proc.stdout and "cannot run: shape inference" in proc.stdout, proc.stdout


def test_kv_budget_beyond_the_host(kiln, tmp_path):
    """--kv-budget-mb 1000000000 (a petabyte) asked calloc for 0x1fffffffc000 bytes (ASan: allocation
    size too big); now refused, saying how much it needs and what the host has."""
    make_gpt2(tmp_path, vocab=VOCAB, n_positions=32)
    write_tokenizer(tmp_path)
    proc = run_kiln(kiln, "generate", tmp_path, "--prompt", "the cat", "--max-tokens", 2, "--kv-budget-mb", 1000000000)
    assert_error(proc, mentions=["KV cache", "GiB", "host"])


# ------------------------------------------------------------------ input options naming what exists

@pytest.mark.parametrize("cmd", ["run", "compare"])
@pytest.mark.parametrize("args,mentions", [
    (["--shapes", "bogus:1x4"], ["bogus", "'pixel_values'", "'scale_factor'"]),
    (["--shapes", "pixel_values:2x4,bogus:1"], ["bogus", "'pixel_values'"]),
    (["--dim", "nosuch=3"], ["nosuch", "'batch'"]),
    (["--input", "nosuch=x.npy"], ["nosuch", "'pixel_values'"]),
])
def test_input_options_name_what_exists(kiln, engines, cmd, args, mentions):
    """--shapes, --dim and --input naming an input or dim the model lacks were silently ignored."""
    assert_error(run_kiln(kiln, cmd, engines / "tiny.onnx", *args), mentions=mentions)


@pytest.mark.parametrize("args,mentions", [
    (["run", "--shapes", "pixel_values:2000000000x1000"], ["'pixel_values'", "[2000000000,1000]", "2^40"]),
    (["run", "--dim", "batch=1099511627776"], ["'pixel_values'", "2^40"]),
    (["bench", "--batch", "1000000000000000"], ["'pixel_values'", "[1000000000000000,4]", "2^40"]),
    (["bench", "--shapes", "pixel_values:99999999999999999999x4"], ["'pixel_values'", "2^40"]),
])
def test_input_too_large_names_the_input(kiln, engines, args, mentions):
    """"tensor of > 2^40 elements" named no input."""
    cmd, *rest = args
    quick = ["-q"] if cmd == "run" else ["--duration", "0", "--warmup", "0", "--iterations", "1"]
    assert_error(run_kiln(kiln, cmd, engines / "tiny.onnx", *rest, *quick), mentions=mentions)


@pytest.mark.parametrize("args,mentions", [
    (["--iterations", "0"], ["--iterations", "1 to 100000000"]),
    (["--iterations", "-3"], ["--iterations", "1 to 100000000"]),
    (["--iterations", "1000000000000"], ["--iterations", "1 to 100000000"]),
    (["--warmup", "1000000000000"], ["--warmup", "0 to 100000000"]),
    (["--dim", "batch=99999999999999999999"], ["--dim batch", "0 to 2^40"]),
    (["--dim", "batch=-1"], ["--dim batch", "0 to 2^40"]),
    (["--seed", "99999999999999999999"], ["--seed", "from 0 to"]),
])
def test_run_numbers_out_of_range_say_the_range(kiln, engines, args, mentions):
    """0, negative and huge counts are refused with the accepted range, not a type error."""
    assert_error(run_kiln(kiln, "run", engines / "tiny.onnx", *args), mentions=mentions, code=2)


# ------------------------------------------------------------------ what the messages tell a user to do

@pytest.mark.parametrize("field,fmt,value,mentions", [
    (FORMAT_VERSION_OFFSET, "<I", 2, ["format version 2", "kiln build --hf DIR -o"]),
    (64, "32s", b"9.8.0", ["kiln 9.8.0", "kiln build --hf gpt2 -o"]),
], ids=["format-version", "kiln-version"])
def test_llm_engine_mismatch_says_to_rebuild_with_hf(kiln, engines, tmp_path, field, fmt, value, mentions):
    """An LLM engine of another version was told to rebuild with `kiln build MODEL.onnx`."""
    path = patched(engines / "llm.kiln", tmp_path / "old.kiln", field, fmt, value)
    for cmd in (["generate", path, "--prompt", "x"], ["inspect", path]):
        err = assert_error(run_kiln(kiln, *cmd), mentions=mentions)
        assert "MODEL.onnx" not in err


def test_build_hf_help(kiln):
    """`kiln build --help` advertises `kiln build --hf --help`: it prints the --hf usage."""
    proc = run_kiln(kiln, "build", "--help")
    assert_ok(proc)
    assert "kiln build --hf --help" in proc.stdout
    proc = run_kiln(kiln, "build", "--hf", "--help")
    assert_ok(proc)
    assert proc.stdout.startswith("usage: kiln build --hf DIR"), proc.stdout


@pytest.mark.parametrize("kind,mentions", [
    ("engine", ["this is a kiln engine, not an ONNX model", "kiln run"]),
    ("safetensors", ["this is a safetensors file", "not an ONNX model", "kiln build --hf"]),
    ("npy", ["NumPy", "not an ONNX model"]),
])
def test_other_formats_given_as_onnx(kiln, engines, tmp_path, kind, mentions):
    """A kiln engine, a safetensors file or a .npy array named *.onnx got protobuf wording ("wire type
    ... at byte 3"); the format is recognised by its first bytes instead."""
    path = tmp_path / f"{kind}.onnx"
    if kind == "engine":
        path.write_bytes((engines / "tiny.kiln").read_bytes())
    elif kind == "safetensors":
        path.write_bytes((engines / "gpt2" / "model.safetensors").read_bytes())
    else:
        np.save(tmp_path / "a.npy", np.ones([2, 2], np.float32))
        path.write_bytes((tmp_path / "a.npy").read_bytes())
    assert_error(run_kiln(kiln, "build", path, "-o", tmp_path / "x.kiln"), mentions=[path.name, *mentions])
    if kind == "engine":  # run and inspect recognise an engine by its magic and read it as one
        assert_ok(run_kiln(kiln, "inspect", path))
    else:
        assert_error(run_kiln(kiln, "inspect", path), mentions=[path.name, *mentions])


def cyclic_model(path, loop):
    """x -> /Pre (Neg) -> the nodes of loop in a ring (each reads /Pre's output and its predecessor's
    output; a ring of one reads itself) -> out."""
    nodes = [helper.make_node("Neg", ["x"], ["pre"], name="/Pre")]
    for k, name in enumerate(loop):
        nodes.append(helper.make_node("Add", ["pre", f"v{(k - 1) % len(loop)}"], [f"v{k}"], name=name))
    graph = helper.make_graph(nodes, "cyclic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(f"v{len(loop) - 1}", TensorProto.FLOAT, [2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("loop", [["/Self"], ["/A", "/B"], ["/A", "/B", "/C"]], ids=["self", "two", "three"])
def test_inspect_reports_a_cycle(kiln, tmp_path, loop):
    """kiln inspect called a cyclic graph runnable ("none: kiln can run every node", exit 0); now it
    names the nodes of the cycle in order and exits 1, as kiln build does."""
    path = cyclic_model(tmp_path / "cyclic.onnx", loop)
    ring = " -> ".join(f"'{n}' (Add)" for n in loop + loop[:1])
    proc = run_kiln(kiln, "inspect", path)
    assert_error(proc, mentions=[f"a cycle of {len(loop)} node", ring])
    assert "can run every node" not in proc.stdout and "cannot run" in proc.stdout, proc.stdout
    assert_error(run_kiln(kiln, "build", path, "-o", tmp_path / "c.kiln"), mentions=[ring])


@pytest.mark.parametrize("args,mentions", [
    (["bench", "{onnx}", "--iterations", "0"], ["--iterations", "from 1 to"]),
    (["bench", "{onnx}", "--streams", "1000"], ["--streams", "from 1 to 256"]),
    (["bench", "{onnx}", "--batch", "1e18"], ["--batch", "from 1 to"]),
    (["bench", "{onnx}", "--duration", "1e12"], ["--duration", "from 0 to"]),
    (["bench", "{onnx}", "--sweep", "batch=1,100000000"], ["--sweep batch", "from 1 to 1048576"]),
    (["generate", "{onnx}", "--prompt", "x", "--seed", "99999999999999999999"], ["--seed", "from 0 to"]),
    (["build", "{onnx}", "--device", "5000"], ["--device", "from 0 to 1024", "5000"]),
    (["build", "{onnx}", "--profile", "pixel_values:99999999999999999999x4"], ["--profile", "0 to 2^40"]),
    (["compare", "{onnx}", "--atol", ""], ["--atol", "finite non-negative number"]),
    (["compare", "{onnx}", "--rtol", "-1"], ["--rtol", "finite non-negative number"]),
], ids=lambda v: "-".join(v[:3]) if isinstance(v, list) else None)
def test_numbers_out_of_range_say_the_range(kiln, engines, args, mentions):
    """Every subcommand's counts refuse 0, negative and huge values with the accepted range."""
    args = [str(engines / "tiny.onnx") if a == "{onnx}" else a for a in args]
    assert_error(run_kiln(kiln, *args), mentions=mentions, code=2)


def weights(name, shape):
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


@pytest.mark.parametrize("case", ["conv_group", "conv_transpose_group", "attention_kv_repeat"])
def test_channel_products_beyond_64_bits(kiln, tmp_path, case):
    """Shape inference multiplied weight dims by group (2^62) and heads by kv_repeat (2^62) unchecked."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])]
    opsets = [helper.make_opsetid("", 17)]
    if case == "conv_group":
        node, inits, mentions = helper.make_node("Conv", ["x", "W"], ["y"], name="/Conv", group=BIG), [weights("W", [2, 2, 1, 1])], ["group"]
    elif case == "conv_transpose_group":
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 0, 4, 4])]
        node, inits, mentions = (helper.make_node("ConvTranspose", ["x", "W"], ["y"], name="/ConvTranspose", group=BIG),
                                 [weights("W", [0, 2, 1, 1])], ["group", "overflow"])
    else:
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, h, 8]) for n, h in (("q", 4), ("k", 2), ("v", 2))]
        node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="/Attention", domain="kiln", kv_repeat=BIG, layout=1)
        inits, mentions = [], ["kv_repeat", "from 1 to 65536"]
        opsets.append(helper.make_opsetid("kiln", 1))
    graph = helper.make_graph([node], case, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    assert_error(run_kiln(kiln, "build", tmp_path / "m.onnx", "-o", tmp_path / "m.kiln"), mentions=[node.name, *mentions])


@pytest.mark.parametrize("key,mentions", [
    ("vocab_size", ["transformer.wte.weight", "expected shape [2147483647, 64]"]),
    ("n_positions", ["transformer.wpe.weight", "expected shape [2147483647, 64]"]),
    ("n_inner", ["mlp.c_fc.weight", "2147483647"]),
    ("n_layer", ["transformer.h.2147483646.ln_1.weight", "missing"]),
])
def test_checkpoint_config_sizes_beyond_the_weights(kiln, tmp_path, key, mentions):
    """config.json sizes of 2^31 - 1 were allocated for (ASan: 0x7fffffff00 bytes) before the tensors'
    shapes were checked against them; the weights in the file bound them now."""
    make_gpt2(tmp_path, vocab=VOCAB, n_positions=32, n_embd=64)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg[key] = (1 << 31) - 1
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_error(run_kiln(kiln, "build", "--hf", tmp_path, "-o", tmp_path / "m.kiln"), mentions=mentions)


def test_context_length_of_2_31(kiln, tmp_path):
    """A Llama max_position_embeddings of 2^31 - 1 (RoPE: no table to bound it) is a valid context
    length; the scheduler's block count overflowed on it (UBSan)."""
    make_llama(tmp_path, vocab=VOCAB, max_pos=(1 << 31) - 1)
    write_tokenizer(tmp_path)
    assert_ok(run_kiln(kiln, "generate", tmp_path, "--prompt", "the cat", "--max-tokens", 2))


@pytest.mark.parametrize("args,mentions", [
    (["--batch", "4096", "--input-len", "1048576", "--output-len", "8"], ["4294967296 prompt tokens in one step"]),
    # 2047 sequences of 2^21 tokens at 512 bytes each: a 2 TiB KV cache
    (["--batch", "2047", "--input-len", "1048576", "--output-len", "1048576"], ["KV cache", "GiB", "host"]),
], ids=["prefill-tokens", "kv-cache"])
def test_bench_llm_workload_beyond_the_host(kiln, tmp_path, args, mentions):
    """On a model with a 2^31 - 1 context, kiln bench --llm's batch x input length overflowed an int
    (UBSan), and a KV cache for it is refused as larger than the host."""
    make_llama(tmp_path, vocab=VOCAB, max_pos=(1 << 31) - 1)
    assert_error(run_kiln(kiln, "bench", "--llm", tmp_path, *args), mentions=mentions)


def test_build_of_a_checkpoint_directory_points_to_hf(kiln, engines, tmp_path):
    """`kiln build DIR` on a Hugging Face checkpoint says how it is built instead of "is a directory"."""
    r = run_kiln(kiln, "build", engines / "gpt2", "-o", tmp_path / "x.kiln")
    assert_error(r, ("is a directory", "kiln build --hf"), code=2)
    assert not (tmp_path / "x.kiln").exists()
