#!/usr/bin/env python3
"""Writes quant_ref.gguf: ggml-quantized tensors next to their f32 dequantization, both
produced by the independent `gguf` Python package (gguf.quants), so the C++ dequantizers are
checked against an implementation nobody here wrote.

    /opt/refenv/bin/python tests/frontend/data/make_quant_ref.py tests/frontend/data/quant_ref.gguf

For each type T in Q8_0, Q4_0, Q4_1, F16, BF16: tensor "T" (shape [4, 64] in numpy order) and
"T.expected" (F32, the reference dequantization of "T").
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import quants


def main(out_path: str) -> None:
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(out_path, arch="llama")
    w.add_name("quant-ref")
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.F16, Q.BF16):
        data = (rng.standard_normal((4, 64)) * rng.uniform(0.01, 3.0)).astype(np.float32)
        data[0, :5] = [0.0, -0.0, 1e-8, -65504.0, 3.5]  # zeros, a subnormal-ish and an edge
        if qtype == Q.F16:
            packed = data.astype(np.float16)
            expected = packed.astype(np.float32)
            w.add_tensor(qtype.name, packed)
        else:
            packed = quants.quantize(data, qtype)
            expected = quants.dequantize(packed, qtype).astype(np.float32)
            w.add_tensor(qtype.name, packed, raw_shape=packed.shape, raw_dtype=qtype)
        w.add_tensor(qtype.name + ".expected", expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
