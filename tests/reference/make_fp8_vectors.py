#!/usr/bin/env python3
"""FP8 E4M3 conversion vectors from ml_dtypes (float8_e4m3fn, Google's numpy dtypes; no code here
converts): the fp8 KV cache's element type (runtime/quant/quant_format.h: e4m3_to_float,
float_to_e4m3; the CUDA kernels' copies in codegen/KernelSource.cpp).

Writes tests/fixtures/fp8/e4m3_vectors.json:
  decode: for each code 0..255 the f32 bits of its value (NaN codes: null)
  encode: [f32 bits, code] pairs, |x| < 464 (ml_dtypes turns what rounds past 448 into NaN; the
          cache saturates to 448 there as CUDA's satfinite conversion does, a unit test's case):
          every finite value, the midpoints between neighbours (ties, to even) and one f32 step
          either side of each, 2000 seeded draws over the whole range, signed zeros.

    python3 -m venv /tmp/fp8env && /tmp/fp8env/bin/pip install ml_dtypes==0.7.0 numpy==2.4.6
    /tmp/fp8env/bin/python tests/reference/make_fp8_vectors.py
"""
import json
import os

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "fp8", "e4m3_vectors.json")


def bits(x):
    return int(np.float32(x).view(np.uint32))


def main():
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(E4M3).astype(np.float32)
    decode = [None if np.isnan(v) else bits(v) for v in values]

    finite = np.unique(values[~np.isnan(values)])  # sorted, -448 .. 448
    mids = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    inputs = [finite, mids.astype(np.float32)]
    for m in mids.astype(np.float32):
        inputs.append(np.array([np.nextafter(m, np.float32(-np.inf)), np.nextafter(m, np.float32(np.inf))],
                               dtype=np.float32))
    rng = np.random.default_rng(20261207)
    inputs.append((rng.uniform(-1, 1, 1000) * 460).astype(np.float32))
    inputs.append((np.sign(rng.uniform(-1, 1, 1000)) * np.exp2(rng.uniform(-14, 8.8, 1000))).astype(np.float32))
    inputs.append(np.array([0.0, -0.0, 463.99997, -463.99997, 1e-30, -1e-30], dtype=np.float32))
    x = np.concatenate(inputs).astype(np.float32)
    x = x[np.abs(x) < 464]
    enc = x.astype(E4M3).view(np.uint8)
    encode = [[bits(v), int(c)] for v, c in zip(x, enc)]

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"source": f"ml_dtypes {ml_dtypes.__version__} float8_e4m3fn", "decode": decode,
                   "encode": encode}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: 256 codes, {len(encode)} conversions")


if __name__ == "__main__":
    main()
