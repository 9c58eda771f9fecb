"""`kiln bench` end to end on the CPU (no GPU needed): short runs of models/sample_cnn.onnx whose
console summary carries trtexec's lines, whose --export-json validates against docs/bench.schema.json
(with a minimal JSON-schema checker written here: type, required, properties, items, enum, const,
$ref, allOf/if/then) and holds consistent numbers, whose --report renders in headless Chromium (the
approach of test_report_render.py), a CPU sweep with one row per configuration (fp16 reported as
unsupported, not failing the sweep), stored ceilings that the next run reads, and bad arguments
that exit 2 naming the flag. GPU cases are in tests/gpu/bench_cuda.py (scripts/gpu-run kbench).
"""
import json
import os

import numpy as np
import pytest

from conftest import assert_error, assert_ok, run_kiln
from test_report_render import ChartCounter, chromium_binary, decode_png, run_chromium

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "sample_cnn.onnx")
SCHEMA = os.path.join(ROOT, "docs", "bench.schema.json")
SHORT = ["--duration", "0.25", "--warmup", "30", "--iterations", "5"]

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def type_ok(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def validate(value, schema, root, path="$"):
    """Errors (a list of text) of value against a JSON schema using the keywords kiln's schema uses."""
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return validate(value, node, root, path)
    errors = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, n) for n in names):
            return [f"{path}: {type(value).__name__} is not {'/'.join(names)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} != {schema['const']!r}")
    if isinstance(value, dict):
        errors += [f"{path}: missing key {k!r}" for k in schema.get("required", []) if k not in value]
        for k, sub in schema.get("properties", {}).items():
            if k in value:
                errors += validate(value[k], sub, root, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], root, f"{path}[{i}]")
    for part in schema.get("allOf", []):
        if "if" in part and not validate(value, part["if"], root, path):
            errors += validate(value, part["then"], root, path)
    return errors


@pytest.fixture(scope="module")
def schema():
    with open(SCHEMA, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def ceilings(kiln, tmp_path_factory):
    """A ceilings file measured once for this CPU."""
    path = tmp_path_factory.mktemp("ceilings") / "ceilings.json"
    proc = run_kiln(kiln, "bench", "--ceilings", "--ceilings-file", path)
    assert_ok(proc)
    assert "copy bandwidth" in proc.stdout and "TFLOP/s fp32" in proc.stdout
    doc = json.loads(path.read_text())
    (entry,) = doc["devices"].values()
    assert entry["mem_gbps"] > 0 and entry["tflops_fp32"] > 0
    return path


@pytest.fixture(scope="module")
def bench_run(kiln, ceilings, tmp_path_factory):
    """One profiled CPU benchmark with JSON and HTML reports."""
    out = tmp_path_factory.mktemp("bench")
    proc = run_kiln(kiln, "bench", MODEL, *SHORT, "--batch", "2", "--profile", "--ceilings-file", ceilings,
                    "--export-json", out / "bench.json", "--report", out / "bench.html")
    assert_ok(proc)
    with open(out / "bench.json", encoding="utf-8") as f:
        doc = json.load(f)
    return proc, doc, out / "bench.html"


def test_validator_rejects_what_it_should(schema):
    assert validate({"kind": "bench"}, schema, schema)  # missing keys
    assert validate(1.5, {"type": "integer"}, schema) and not validate(None, {"type": ["number", "null"]}, schema)
    assert validate({"kind": "bench", "results": {}}, {"allOf": schema["allOf"]}, schema)


def test_console_summary_has_trtexec_lines(bench_run):
    proc, _, _ = bench_run
    out = proc.stdout
    for line in ("=== Performance summary ===", "Throughput:", "Latency: min = ", "percentile(99%)", "percentile(99.9%)",
                 "stddev", "Enqueue Time: absent", "H2D Latency: absent", "D2H Latency: absent", "Total Host Walltime:",
                 "Methods: percentile nearest rank", "GPU: absent", "=== Memory (host) ===", "=== Diagnosis ===",
                 "=== Profile", "block2_conv", "=== Profile by op", "ceilings of"):
        assert line in out, f"{line!r} not in the output:\n{out}"


def test_json_validates_and_is_consistent(bench_run, schema):
    _, doc, _ = bench_run
    errors = validate(doc, schema, schema)
    assert not errors, "\n".join(errors[:20])
    res = doc["results"]
    assert doc["kind"] == "bench" and doc["model"]["target"] == "cpu" and doc["environment"]["gpu"] is None
    assert res["batch"] == 2 and res["queries"] == len(doc["queries"]) >= 5
    assert res["items_per_s"] == pytest.approx(2 * res["qps"])
    lat = res["latency_ms"]
    assert lat["n"] == res["queries"] and lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["max"]
    exact = sorted(q["latency_ms"] for q in doc["queries"])
    n = len(exact)
    assert lat["p99"] == exact[max(0, -(-99 * n // 100) - 1)]  # nearest rank
    assert res["enqueue_ms"] is None and res["h2d_ms"] is None and res["compute_ms"]["n"] == n
    assert doc["memory"]["weights_bytes"] > 0 and doc["memory"]["activations_bytes"] > 0
    assert doc["roofline"]["flops"] > 1e6 and doc["roofline"]["fraction_of_bandwidth"] is not None
    assert doc["diagnosis"]["bound"] in ("memory", "compute", "overhead")
    timed = [layer for layer in doc["layers"] if layer["time_ms"] is not None]
    assert len(timed) == len(doc["layers"]) and sum(layer["share"] for layer in timed) == pytest.approx(1, abs=1e-6)
    convs = [layer for layer in doc["layers"] if "Conv" in layer["op"]]
    assert convs and all(layer["flops"] > 0 for layer in convs)


def test_html_structure(bench_run):
    _, doc, html_path = bench_run
    html = html_path.read_text(encoding="utf-8")
    for needle in ("<script", "src=", "<link", "@import"):
        assert needle not in html
    p = ChartCounter()
    p.feed(html)
    assert {"latency-hist", "latency-cdf", "latency-over-time", "layers"} <= set(p.charts)
    assert p.charts["latency-hist"]["counts"].get("kiln-bar", 0) >= 1
    assert p.charts["layers"]["counts"].get("kiln-bar", 0) == len(doc["layers"])
    assert p.tables >= 1 and p.kv_blocks >= 1


def test_html_renders_in_chromium(bench_run, tmp_path):
    chromium_binary()
    _, _, html_path = bench_run
    shot = tmp_path / "bench.png"
    run_chromium([f"--screenshot={shot}", "--window-size=1200,2400", html_path.as_uri()], tmp_path)
    img = decode_png(shot.read_bytes())
    grey = img[..., :3].astype(np.float64).mean(axis=2)
    assert grey.var() > 100 and 0.005 < (grey < 200).mean() < 0.6, "the screenshot looks blank"
    dom = run_chromium(["--dump-dom", html_path.as_uri()], tmp_path).stdout.decode("utf-8")
    p = ChartCounter()
    p.feed(dom)
    assert {"latency-hist", "latency-cdf", "latency-over-time", "layers"} <= set(p.charts)


def test_cpu_sweep_one_row_per_config(kiln, schema, tmp_path):
    out = tmp_path / "sweep.json"
    proc = run_kiln(kiln, "bench", MODEL, *SHORT, "--sweep", "batch=1,3", "--sweep", "precision=fp32,fp16",
                    "--export-json", out, "--report", tmp_path / "sweep.html")
    assert_ok(proc)
    doc = json.loads(out.read_text())
    errors = validate(doc, schema, schema)
    assert not errors, "\n".join(errors[:20])
    rows = doc["sweep"]["rows"]
    assert [(r["precision"], r["batch"]) for r in rows] == [("fp32", 1), ("fp32", 3), ("fp16", 1), ("fp16", 3)]
    for r in rows[:2]:
        assert r["status"] == "ok" and r["qps"] > 0 and r["max_abs_err"] == 0 and r["gpu_util_pct"] is None
        assert r["p50_ms"] <= r["p99_ms"] and r["engine_bytes"] > 0
    for r in rows[2:]:
        assert r["status"] == "unsupported" and "fp16" in r["error"] and r["qps"] is None
    assert proc.stdout.count("unsupported:") == 2 and "=== Sweep (4 configurations) ===" in proc.stdout
    p = ChartCounter()
    p.feed((tmp_path / "sweep.html").read_text(encoding="utf-8"))
    assert p.charts["sweep-throughput-latency"]["counts"].get("kiln-point", 0) == 4


def test_engine_file_and_streams(kiln, tmp_path):
    engine = tmp_path / "cnn.kiln"
    assert_ok(run_kiln(kiln, "build", MODEL, "-o", engine))
    out = tmp_path / "b.json"
    proc = run_kiln(kiln, "bench", engine, *SHORT, "--streams", "2", "--graph", "off", "--no-transfers", "--export-json", out)
    assert_ok(proc)
    assert "--graph is ignored on the CPU" in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["model"]["build_s"] is None and doc["model"]["engine_bytes"] == engine.stat().st_size
    assert {q["stream"] for q in doc["queries"]} == {0, 1}


@pytest.mark.parametrize("args, mentions", [
    ([], ["engine or model file is required"]),
    ([MODEL, "--streams", "0"], ["--streams"]),
    ([MODEL, "--duration", "abc"], ["--duration"]),
    ([MODEL, "--graph", "maybe"], ["--graph"]),
    ([MODEL, "--target", "tpu"], ["--target"]),
    ([MODEL, "--sweep", "colour=red"], ["--sweep", "colour"]),
    ([MODEL, "--sweep", "batch=1,x"], ["--sweep", "batch"]),
    ([MODEL, "--fp16", "--bf16"], ["--fp16", "--bf16"]),
    ([MODEL, "--iterations"], ["--iterations", "needs a value"]),
    ([MODEL, "--frobnicate"], ["--frobnicate"]),
])
def test_bad_arguments_exit_2(kiln, args, mentions):
    proc = run_kiln(kiln, "bench", *args)
    assert_error(proc, mentions=mentions, code=2)
    assert "kiln: error:" in proc.stderr


def test_bad_shapes_and_batch_fail_cleanly(kiln):
    proc = run_kiln(kiln, "bench", MODEL, *SHORT, "--shapes", "nosuch:1x3x32x32")
    assert_error(proc, mentions=["--shapes", "nosuch"])
