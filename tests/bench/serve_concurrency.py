#!/usr/bin/env python3
"""Serving throughput at several concurrency levels: one `llmrt serve`, one `llmrt bench-serve`
run per level, a summary table (output tok/s, TTFT, TPOT, speedup over the first level).

  tests/bench/serve_concurrency.py --llmrt build/tools/llmrt --plan .cache/smollm2-135m-instruct.plan.fb \
      [--concurrency 1,4,16] [--prompts-per-slot 2] [--input-len 64] [--output-len 32] \
      [--serve-args "--kv-cache-memory 1GiB"] [--out-dir /tmp/bench-serve]

Batched decode reads each weight once per step for all running sequences, so aggregate output
tok/s should grow with concurrency until compute bound (the serving issue asks for >= 3x at 16
versus 1 on the CPU backend). Figures depend on the machine and its load; nothing is asserted.
"""

import argparse
import json
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


def start_server(llmrt, plan, extra):
    cmd = [llmrt, "serve", plan, "--port", "0", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    url, lines = [], []
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip())
            m = re.search(r"listening on (http://\S+)", line)
            if m and not url:
                url.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(600) or not url:
        proc.kill()
        sys.exit("llmrt serve did not start:\n" + "\n".join(lines[-20:]))
    for _ in range(600):
        try:
            with urllib.request.urlopen(url[0] + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        time.sleep(0.2)
    print("\n".join(lines), file=sys.stderr)
    return proc, url[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llmrt", default="build/tools/llmrt")
    p.add_argument("--plan", required=True)
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--prompts-per-slot", type=int, default=2, help="requests per level = this x concurrency")
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=1000, help="random prompt ids are drawn from [0, N)")
    p.add_argument("--serve-args", default="")
    p.add_argument("--out-dir", default="/tmp/bench-serve")
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    server, url = start_server(args.llmrt, args.plan, shlex.split(args.serve_args))
    rows = []
    try:
        for c in levels:
            out = out_dir / f"c{c}.json"
            cmd = [args.llmrt, "bench-serve", "--url", url, "--num-prompts", str(c * args.prompts_per_slot),
                   "--max-concurrency", str(c), "--random-input-len", str(args.input_len),
                   "--random-output-len", str(args.output_len), "--json-out", str(out)]
            cmd += ["--vocab-size", str(args.vocab_size)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            print(proc.stdout)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
            if out.exists():
                rows.append((c, json.loads(out.read_text())))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)

    if not rows:
        sys.exit("no results")
    base = rows[0][1]["output_throughput"] or 1e-9
    res = rows[0][1].get("clock_resolution_ns", "?")
    print(f"input {args.input_len} tokens, output {args.output_len} tokens; timer resolution {res} ns")
    print("| concurrency | requests (ok/failed) | output tok/s | mean TTFT ms | median TTFT ms | mean TPOT ms "
          "| median TPOT ms | output tok/s vs first |")
    print("|---|---|---|---|---|---|---|---|")
    for c, j in rows:
        print(f"| {c} | {j['completed']}/{j['failed']} | {j['output_throughput']:.2f} | {j['mean_ttft_ms']:.1f} "
              f"| {j['median_ttft_ms']:.1f} | {j['mean_tpot_ms']:.1f} | {j['median_tpot_ms']:.1f} "
              f"| {j['output_throughput'] / base:.2f}x |")


if __name__ == "__main__":
    main()
