"""The report writers of src/stats/ seen from outside: the sample files that
`test_stats --write-sample DIR` writes (tests/unit/report_sample.c) must parse with Python's own json
and csv modules to exactly the intended values, the HTML must be self-contained, and headless Chromium
must render it: a screenshot that is not blank (PNG decoded here with zlib/struct/numpy, no Pillow) and
a DOM in which every chart is an <svg class="kiln-chart KIND"> with the stated number of bars, lines
and points. The Chromium tests skip with a message when no chromium binary is installed.

The test_stats binary comes from env KILN_TEST_STATS (set by CTest), else from the build directory of
KILN_BIN (build/tests/test_stats).
"""
import csv
import json
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import numpy as np
import pytest

CHROMIUM_TIMEOUT_S = 120

# svg id -> (chart class, {element class: count}) as report_sample.c writes them
EXPECTED_CHARTS = {
    "latency-hist": ("kiln-hist", {"kiln-bar": 40, "kiln-line": 0}),
    "latency-cdf": ("kiln-cdf", {"kiln-line": 2, "kiln-legend-item": 2, "kiln-series": 2}),
    "linear-cdf": ("kiln-cdf", {"kiln-line": 1, "kiln-legend-item": 1}),
    "throughput": ("kiln-line-chart", {"kiln-line": 3, "kiln-legend-item": 3, "kiln-series": 3}),
    "sweep": ("kiln-scatter", {"kiln-point": 12, "kiln-line": 2, "kiln-legend-item": 2}),
    "layers": ("kiln-barh", {"kiln-bar": 12, "kiln-bar-label": 12}),
    "small-hist": ("kiln-hist", {"kiln-bar": 10}),
}


def stats_binary():
    path = os.environ.get("KILN_TEST_STATS")
    if not path and os.environ.get("KILN_BIN"):
        path = os.path.join(os.path.dirname(os.path.abspath(os.environ["KILN_BIN"])), "tests", "test_stats")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"test_stats binary not found (KILN_TEST_STATS={os.environ.get('KILN_TEST_STATS')!r}, "
                    f"KILN_BIN={os.environ.get('KILN_BIN')!r}): build the test_stats target")
    return path


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report_sample")
    proc = subprocess.run([stats_binary(), "--write-sample", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"test_stats --write-sample failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_json_parses_to_the_written_values(sample_dir):
    with open(sample_dir / "sample.json", encoding="utf-8") as f:  # strict UTF-8: no invalid bytes
        doc = json.load(f)
    assert doc == {
        "quote_backslash": 'say "hi" \\ bye',
        "controls": "a\nb\tc\rd\be\ff\x01g\x1fh",
        "nul": "x\x00y",
        "unicode": "caf\u00e9 \u20ac \U0001F600 \u2028",
        "invalid_utf8": "a\ufffdb\ufffdc\ufffd\ufffd\ufffdd",
        "nan": None, "inf": None, "neg_inf": None,
        "tenth": 0.1, "big": 1e300, "tiny": 5e-324,
        "int_min": -2**63,
        "yes": True,
        "null_string": None,
        "nested": [[], {}, 1, None],
    }


def test_csv_parses_to_the_written_cells(sample_dir):
    with open(sample_dir / "sample.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows == [["name", "value", "note"], ["plain", "1.5", "a,b"], ['say "x"', "", "two\nlines"],
                    [" padded ", "-42", ""]]


def test_html_is_self_contained(sample_dir):
    html = (sample_dir / "sample.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for needle in ("<script", "src=", "href=", "url(", "@import", "<link"):
        assert needle not in html, f"{needle!r} in the report: it must not load anything"
    without_xmlns = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://127.0.0.1" in without_xmlns  # the sample's own text, escaped, is the only URL
    assert without_xmlns.count("http") == 1
    assert "<title>kiln report sample &lt;&amp;&gt;</title>" in html


class ChartCounter(HTMLParser):
    """Counts, per <svg class="kiln-chart ..."> (by id), the elements of each class inside it, and
    the report's tables and key/value blocks."""

    def __init__(self):
        super().__init__()
        self.charts = {}  # id -> {"classes": [...], "counts": {class: n}}
        self.current = None
        self.tables = 0
        self.kv_blocks = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "table" and "kiln-table" in classes:
            self.tables += 1
        if tag == "dl" and "kiln-kv" in classes:
            self.kv_blocks += 1
        if tag == "svg" and "kiln-chart" in classes:
            self.current = self.charts.setdefault(a.get("id"), {"classes": classes, "counts": {}})
        elif self.current is not None:
            for c in classes:
                self.current["counts"][c] = self.current["counts"].get(c, 0) + 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None


def check_structure(html):
    p = ChartCounter()
    p.feed(html)
    assert set(p.charts) == set(EXPECTED_CHARTS), f"chart ids: {sorted(p.charts)}"
    for cid, (kind, want) in EXPECTED_CHARTS.items():
        chart = p.charts[cid]
        assert kind in chart["classes"], f"{cid}: classes {chart['classes']}"
        for cls, n in want.items():
            assert chart["counts"].get(cls, 0) == n, f"{cid}: {chart['counts'].get(cls, 0)} .{cls}, expected {n}"
        # every chart has two axes with ticks and labels
        if kind != "kiln-barh":
            assert chart["counts"].get("kiln-axis", 0) == 2, f"{cid}: axes {chart['counts'].get('kiln-axis')}"
        assert chart["counts"].get("kiln-tick", 0) >= 3 and chart["counts"].get("kiln-tick-label", 0) >= 3
        assert chart["counts"].get("kiln-chart-title", 0) == 1
    assert p.tables == 2 and p.kv_blocks == 2
    return p


def test_html_structure_in_the_file(sample_dir):
    check_structure((sample_dir / "sample.html").read_text(encoding="utf-8"))


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (apt-get install chromium; `make apt-deps` does it): "
                "the HTML report is not rendered")


def run_chromium(args, tmp_path):
    cmd = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S} s: {' '.join(cmd)}")
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')[-3000:]}"
    return proc


def decode_png(data):
    """The pixels of an 8-bit grey/RGB/RGBA, non-interlaced PNG as a (height, width, channels) uint8
    array (filters undone per the PNG specification)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    assert depth == 8 and channels and interlace == 0, f"unsupported PNG layout {header}"
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    assert len(raw) == height * (stride + 1), "PNG data length does not match its header"
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        ftype, line = rows[y, 0], rows[y, 1:]
        if ftype == 0:
            cur = line.copy()
        elif ftype == 2:  # Up
            cur = line + prev
        elif ftype == 1:  # Sub: running sum per channel
            cur = (np.cumsum(line.reshape(width, channels).astype(np.int64), axis=0) % 256).astype(np.uint8).ravel()
        elif ftype in (3, 4):  # Average, Paeth: sequential along the row
            cur_l, line_l, up_l = [0] * stride, line.tolist(), prev.tolist()
            for i in range(stride):
                a = cur_l[i - channels] if i >= channels else 0
                b = up_l[i]
                if ftype == 3:
                    pred = (a + b) >> 1
                else:
                    c = up_l[i - channels] if i >= channels else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur_l[i] = (line_l[i] + pred) & 0xFF
            cur = np.array(cur_l, dtype=np.uint8)
        else:
            raise AssertionError(f"bad PNG filter type {ftype} in row {y}")
        out[y] = cur
        prev = cur
    return out.reshape(height, width, channels)


def test_png_decoder_on_a_known_image():
    """The decoder itself, on a 3x2 RGB image written here with every filter type."""
    pixels = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]], [[10, 20, 30], [40, 50, 60], [70, 80, 90]]],
                      dtype=np.uint8)
    raw = bytearray()
    prev = np.zeros(9, dtype=np.int64)
    for y, ftype in enumerate((1, 4)):
        line = pixels[y].ravel().astype(np.int64)
        enc = []
        for i in range(9):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            pred = a if ftype == 1 else (a if pa <= pb and pa <= pc else (b if pb <= pc else c))
            enc.append(int(line[i] - pred) & 0xFF)
        raw += bytes([ftype] + enc)
        prev = line

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))
    assert np.array_equal(decode_png(png), pixels)


def test_chromium_renders_a_nonblank_page(sample_dir, tmp_path):
    shot = tmp_path / "report.png"
    run_chromium([f"--screenshot={shot}", "--window-size=1200,2000", (sample_dir / "sample.html").as_uri()], tmp_path)
    img = decode_png(shot.read_bytes())
    assert img.shape[:2] == (2000, 1200), f"screenshot size {img.shape}"
    grey = img[..., :3].astype(np.float64).mean(axis=2)
    variance = float(grey.var())
    inked = float((grey < 200).mean())  # text, axes, bars and lines are dark; the page is light
    colours = len(np.unique(img[..., :3].reshape(-1, 3), axis=0))
    print(f"screenshot: pixel variance {variance:.1f}, {inked:.2%} dark pixels, {colours} colours")
    assert variance > 100, f"screenshot looks blank (variance {variance:.1f})"
    assert 0.01 < inked < 0.6, f"implausible share of dark pixels {inked:.2%}"
    assert colours > 20
    # the chart colour (#1f77b4, histogram bars) is on screen
    blue = np.all(np.abs(img[..., :3].astype(np.int64) - [0x1f, 0x77, 0xb4]) <= 2, axis=2).mean()
    assert blue > 0.005, f"only {blue:.3%} of the pixels have the bar colour"


def test_chromium_dom_has_every_chart(sample_dir, tmp_path):
    proc = run_chromium(["--dump-dom", (sample_dir / "sample.html").as_uri()], tmp_path)
    check_structure(proc.stdout.decode("utf-8"))
