#!/usr/bin/env python3
"""Encode throughput of our tokenizer (tokenizer_bench) beside Hugging Face `tokenizers` on the
same text, single-threaded, best of N; prints both and the ratio.

HF runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, one `encode` call over the
whole text (no encode_batch), add_special_tokens=False; ours encodes the whole text in one call
too. Both get one untimed warm-up pass (both keep a word cache), so the figures are steady-state.
The token counts of both are printed and must agree (a cheap check that both did the same work).

usage: /opt/refenv/bin/python tokenizer_bench.py --bench BUILD/tests/bench/tokenizer_bench
           [--which llama3,qwen3,gpt2] [--text FILE | --mb 4] [--reps 5] [--data SHARED_TOKENIZERS]
Without --text, the text is the varied corpus of tests/tokenizer/hf_corpus_expected.json
repeated to --mb megabytes."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Tokenizer, decoders, pre_tokenizers  # noqa: E402  (after the env vars)
from tokenizers.models import BPE  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "tokenizers"))


def hf_tokenizer(which, data):
    if which == "gpt2":
        d = os.path.join(data, "gpt2-files")
        tok = Tokenizer(BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens(["<|endoftext|>"])
        return tok, d
    path = os.path.join(data, "hf", which, "tokenizer.json")
    return Tokenizer.from_file(path), path


def bench_hf(tok, text, reps):
    n = len(tok.encode(text, add_special_tokens=False).ids)  # warm-up (fills the BPE cache)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        enc = tok.encode(text, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
        n = len(enc.ids)
    return n, best


def bench_ours(binary, tok_path, text_path, reps):
    out = subprocess.run([binary, "--tokenizer", tok_path, "--text", text_path, "--reps", str(reps)],
                         check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    return int(fields["tokens"]), float(fields["best_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="path to the tokenizer_bench binary")
    ap.add_argument("--which", default="llama3,qwen3,gpt2")
    ap.add_argument("--text", help="text file to encode (default: the test corpus, repeated)")
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--data", default=DEFAULT_DATA)
    args = ap.parse_args()

    tmp = None
    if args.text:
        text_path = args.text
        with open(text_path, "r", encoding="utf-8", newline="") as f:
            text = f.read()
    else:
        with open(os.path.join(ROOT, "tests", "tokenizer", "hf_corpus_expected.json"),
                  encoding="utf-8") as f:
            corpus = "\n".join(json.load(f)["texts"]) + "\n"
        reps = max(1, int(args.mb * 1e6 / len(corpus.encode("utf-8"))))
        text = corpus * reps
        tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", newline="",
                                          delete=False)
        tmp.write(text)
        tmp.close()
        text_path = tmp.name
    nbytes = len(text.encode("utf-8"))
    mb = nbytes / 1e6
    print(f"text: {text_path} ({mb:.2f} MB), best of {args.reps}, one thread")
    print(f"{'tokenizer':10} {'ours MB/s':>10} {'HF MB/s':>10} {'ours/HF':>8} "
          f"{'tokens ours':>12} {'tokens HF':>12}")
    status = 0
    try:
        for which in args.which.split(","):
            tok, our_path = hf_tokenizer(which, args.data)
            n_ours, t_ours = bench_ours(args.bench, our_path, text_path, args.reps)
            n_hf, t_hf = bench_hf(tok, text, args.reps)
            print(f"{which:10} {mb / t_ours:10.2f} {mb / t_hf:10.2f} {t_hf / t_ours:8.2f} "
                  f"{n_ours:12d} {n_hf:12d}", flush=True)
            if n_ours != n_hf:
                print(f"  token counts differ for {which}!", file=sys.stderr)
                status = 1
    finally:
        if tmp:
            os.unlink(tmp.name)
    return status


if __name__ == "__main__":
    sys.exit(main())
