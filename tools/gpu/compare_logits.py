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
    toks = [json.load(open(p))["outputs"][0]["output_ids"] for p in (a.cpu_gen, a.cuda_gen)]
    first = next((i for i, (x, y) in enumerate(zip(*toks)) if x != y), None)
    ok = bool(np.isfinite(g).all()) and diff <= a.tol * scale
    print(f"{a.name}: {'PASS' if ok else 'FAIL'} max|cuda-cpu| {diff:.3g} (max|logit| {scale:.3g}, "
          f"rel {diff / scale:.2e}), argmax agreement {argmax_agree:.3f}, greedy tokens "
          + ("identical" if first is None else f"differ from step {first}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
