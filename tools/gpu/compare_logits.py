"""Compares the CUDA backend's logits with the CPU backend's (tools/gpu/run_checks.sh).

    compare_logits.py CPU.npy CUDA.npy CPU.gen.json CUDA.gen.json --name N --tol 1e-3

Exit 1 when max |cuda - cpu| > tol * max |cpu| at any prompt position. Greedy continuations are
reported (first differing step), not judged: near-ties may legitimately flip.
"""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cpu")
    ap.add_argument("cuda")
    ap.add_argument("cpu_gen")
    ap.add_argument("cuda_gen")
    ap.add_argument("--name", default="")
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    c, g = np.load(a.cpu).astype(np.float64), np.load(a.cuda).astype(np.float64)
    if c.shape != g.shape:
        print(f"{a.name}: FAIL shapes differ {c.shape} vs {g.shape}")
        return 1
    diff = np.abs(c - g).max()
    scale = max(1.0, np.abs(c).max())
    argmax_agree = float((c.argmax(-1) == g.argmax(-1)).mean())
    outs = [json.load(open(p))["outputs"] for p in (a.cpu_gen, a.cuda_gen)]
    if len(outs[0]) != len(outs[1]):
        print(f"{a.name}: FAIL {len(outs[0])} CPU outputs vs {len(outs[1])} CUDA outputs")
        return 1
    # the first step at which any sequence's greedy tokens differ
    firsts = [next((i for i, (x, y) in enumerate(zip(co["output_ids"], go["output_ids"])) if x != y), None)
              for co, go in zip(*outs)]
    differing = [f for f in firsts if f is not None]
    first = min(differing) if differing else None
    lengths = [len(o["output_ids"]) for o in outs[1]]
    ok = bool(np.isfinite(g).all()) and diff <= a.tol * scale
    print(f"{a.name}: {'PASS' if ok else 'FAIL'} max|cuda-cpu| {diff:.3g} (max|logit| {scale:.3g}, "
          f"rel {diff / scale:.2e}), argmax agreement {argmax_agree:.3f}, greedy tokens "
          + ("identical" if first is None else f"differ from step {first}")
          + (f" ({len(outs[0])} sequences)" if len(outs[0]) > 1 else ""))
    if any(n != m for n, m in zip(lengths, (len(o["output_ids"]) for o in outs[0]))):
        print(f"{a.name}: FAIL CUDA generated {lengths} tokens, CPU {[len(o['output_ids']) for o in outs[0]]}")
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
