#!/usr/bin/env python3
"""llm_sweep_report.py — the measuring and reporting half of bench/llm_serve_sweep.sh (Python standard
library only, so it runs on the GPU host as it is).

  timed --json FILE --weights FILE [--evict] -- COMMAND...
      Runs COMMAND (a `kiln generate` of one token), and records its wall time from start to exit,
      the largest resident set of the process (ru_maxrss, which counts the mapped checkpoint pages it
      touched) next to the weights file's size, and kiln's own timing line (load, TTFT). --evict first
      drops the weights file from the page cache (fsync, then posix_fadvise DONTNEED: no root needed),
      so the load reads the disk.
  summary --out DIR
      Reads DIR/cold_*.json, DIR/bench_llm.json (kiln bench --llm --export-json) and DIR/sweep.json
      (kiln load --json), prints the comparison of the server's saturated output tokens/s (the best
      step's tokens completed inside its measured window, per second) with `kiln bench --llm --saturate`, the TTFT / TPOT / goodput curve against the rate and the capacity
      answer ("p99 TTFT <= 500 ms at R req/s per GPU"), and writes DIR/summary.json.
"""
import argparse
import glob
import json
import os
import re
import resource
import subprocess
import sys
import time

GB = 1e9


def evict(path):
    """Drops path's pages from the page cache (dirty ones are written first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(a):
    if a.evict:
        evict(a.weights)
    t0 = time.monotonic()
    p = subprocess.run(a.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    wall = time.monotonic() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    line = next((l for l in p.stderr.splitlines() if "TTFT" in l and "load" in l), "")
    num = lambda pat: float(m.group(1)) if (m := re.search(pat, line)) else None
    weights = os.path.getsize(a.weights)
    r = {"command": a.command, "exit_status": p.returncode, "evicted": a.evict, "wall_s": wall,
         "load_ms": num(r"load ([\d.]+) ms"), "ttft_ms": num(r"TTFT ([\d.]+) ms"), "max_rss_bytes": rss,
         "weights_bytes": weights, "rss_above_weights_bytes": rss - weights, "timing_line": line,
         "stderr_tail": p.stderr[-2000:]}
    with open(a.json, "w") as f:
        json.dump(r, f, indent=1)
    print(f"{'disk-cold' if a.evict else 'page-cache-warm'} process to first token: {wall:.2f} s wall "
          f"(kiln: load {r['load_ms']} ms, TTFT {r['ttft_ms']} ms); max RSS {rss / GB:.2f} GB = weights file "
          f"{weights / GB:.2f} GB + {(rss - weights) / GB:.2f} GB; exit status {p.returncode}")
    if p.returncode:
        print(p.stderr[-2000:])
    return p.returncode


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ms(step, metric, pct):
    return step["latency_ms"][metric][pct]


def summary(a):
    out, s = a.out, {}
    for path in sorted(glob.glob(os.path.join(out, "cold_*.json"))):
        c = load(path)
        if c:
            s[os.path.basename(path)[:-5]] = {k: c[k] for k in ("wall_s", "load_ms", "ttft_ms", "max_rss_bytes",
                                                                  "weights_bytes", "rss_above_weights_bytes",
                                                                  "exit_status")}
            print(f"{os.path.basename(path)[:-5]:10} process to first token {c['wall_s']:6.2f} s (target <= 8 s); "
                  f"host RSS {c['rss_above_weights_bytes'] / GB:.2f} GB above the {c['weights_bytes'] / GB:.2f} GB "
                  f"file (target <= 1 GB); exit {c['exit_status']}")
    bench = load(os.path.join(out, "bench_llm.json"))
    ref = bench["saturated"]["output_tokens_per_s"] if bench and bench.get("saturated") else None
    if ref:
        sat = bench["saturated"]
        s["bench_saturated"] = {"output_tokens_per_s": ref, "requests": sat["requests"],
                                "concurrency": sat["concurrency"], "load_s": bench.get("load_s")}
        print(f"kiln bench --llm --saturate: {ref:,.0f} output tok/s ({sat['requests']} requests, "
              f"{sat['concurrency']} in flight; loaded in {bench.get('load_s', 0):.2f} s)")
    sweep = load(os.path.join(out, "sweep.json"))
    if not sweep:
        print("no sweep.json: the kiln load sweep did not finish")
        return write(out, s, 1)
    steps, rows = sweep["steps"], []
    print(f"{'rate':>6} {'done req/s':>10} {'ttft p50':>9} {'ttft p99':>9} {'tpot p50':>9} {'tpot p99':>9} "
          f"{'goodput':>8} {'out tok/s':>10} {'failed':>6}")
    for st in steps:
        row = {"rate": st["rate"], "completed_rate": st["window_completed_rate"], "ttft_p50_ms": ms(st, "ttft", "p50"),
               "ttft_p99_ms": ms(st, "ttft", "p99"), "tpot_p50_ms": ms(st, "tpot", "p50"),
               "tpot_p99_ms": ms(st, "tpot", "p99"), "goodput": st["goodput"],
               "output_tokens_per_s": st["window_output_token_rate"], "failed": st["failed"]}
        rows.append(row)
        print(f"{row['rate']:6g} {row['completed_rate']:10.2f} {row['ttft_p50_ms']:9.1f} {row['ttft_p99_ms']:9.1f} "
              f"{row['tpot_p50_ms']:9.2f} {row['tpot_p99_ms']:9.2f} {row['goodput'] * 100:7.2f}% "
              f"{row['output_tokens_per_s']:10,.0f} {row['failed']:6d}")
    s["sweep"] = rows
    best = max(rows, key=lambda r: r["output_tokens_per_s"])
    saturated = [r["rate"] for r in rows if r["completed_rate"] < 0.98 * r["rate"]]
    s["served_saturated"] = {"output_tokens_per_s": best["output_tokens_per_s"], "rate": best["rate"],
                             "first_saturated_rate": saturated[0] if saturated else None}
    line = (f"server: best {best['output_tokens_per_s']:,.0f} output tok/s (step at {best['rate']:g} req/s; "
            + (f"saturated from {saturated[0]:g} req/s on)" if saturated else "no step saturated it: raise RATES)"))
    if ref:
        s["served_saturated"]["share_of_bench"] = best["output_tokens_per_s"] / ref
        line += f" = {best['output_tokens_per_s'] / ref * 100:.1f}% of kiln bench --llm --saturate (target >= 95%)"
    print(line)
    cap = sweep.get("capacity") or {}
    meeting = [r for r in rows if r["ttft_p99_ms"] <= a.ttft_ms and r["failed"] == 0]
    if meeting:
        r = max(meeting, key=lambda r: r["rate"])
        s["capacity"] = {"rate_per_gpu": r["rate"], "ttft_p99_ms": r["ttft_p99_ms"],
                         "kiln_load_rate_per_server": cap.get("rate_per_server")}
        print(f"capacity: p99 TTFT <= {a.ttft_ms:g} ms at {r['rate']:g} req/s per GPU (p99 TTFT there "
              f"{r['ttft_p99_ms']:.0f} ms; kiln load's SLO answer: {cap.get('rate_per_server')} req/s)")
    else:
        s["capacity"] = None
        print(f"capacity: no step held p99 TTFT <= {a.ttft_ms:g} ms")
    return write(out, s, 0)


def write(out, s, rc):
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1)
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("timed")
    t.add_argument("--json", required=True)
    t.add_argument("--weights", required=True)
    t.add_argument("--evict", action="store_true")
    t.add_argument("command", nargs="+")
    m = sub.add_parser("summary")
    m.add_argument("--out", required=True)
    m.add_argument("--ttft-ms", type=float, default=500.0)
    a = ap.parse_args()
    sys.exit(timed(a) if a.cmd == "timed" else summary(a))


if __name__ == "__main__":
    main()
