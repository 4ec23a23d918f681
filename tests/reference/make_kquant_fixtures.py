#!/usr/bin/env python3
"""GGUF files with llama.cpp's k-quants (and Q5_0 / Q5_1, IQ4_NL / IQ4_XS), and llama.cpp's logits on them.

The model: a tiny Llama with random weights (seeded), rows of 256 and 512 elements so that every
linear weight can take a k-quant (ggml's super-blocks are 256 wide), an SPM vocabulary of the 256
byte tokens, 3 specials and 5 pieces. Written in F32 with the `gguf` package, then quantized by llama.cpp
itself (llama_model_quantize, whose per-tensor choices make the usual mixes: Q4_K_M is Q4_K with
Q6_K for the output and some attn_v / ffn_down, Q3_K_M adds Q4_K and Q5_K, and so on).

For every quantized file, tests/fixtures/kquant/ gets:
  <name>.gguf                   the file llama.cpp wrote (committed: tens of KB to half a MB)
  reference.json ["files"][name]:
    "tensors": {gguf name: {"type", "fnv1a64"}}: each tensor dequantized by the gguf package
        (gguf.quants.dequantize, numpy) to f32, in GGUF order, hashed (FNV-1a 64 over its
        little-endian bytes): our import must give these values bit for bit.
    "f32_logits" <name>.f32.npy: llama.cpp's logits at every position of each sequence, run on
        an F32 copy of the file (every tensor dequantized as above): the exact model our
        reference contract computes (llama.cpp then multiplies in f32 too).
    "quant_logits" <name>.quant.npy: llama.cpp's logits on the quantized file itself (its
        quantized dot products: activations in 8 bits), for our fast contract.
  Each .npy is float32 [sequences, positions, vocab].

Reference: llama.cpp through llama-cpp-python==0.3.36 (tests/reference/requirements-llamacpp.txt,
its own environment, e.g. /opt/llamaenv), n_ctx 256, logits_all, 2 threads, F32 KV cache,
flash attention off, no extra buffer types (no weight repacking, no AMX).

Usage: /opt/llamaenv/bin/python tests/reference/make_kquant_fixtures.py [--out DIR] [--only NAME ...]
(--only: those mixes alone, the others' entries of an existing reference.json kept)
"""

import argparse
import ctypes
import inspect
import json
import os
import tempfile

import numpy as np

SEED = 20261207
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 256, 512, 1, 4, 2
HEAD_DIM = HIDDEN // HEADS
# llama.cpp's llama_ftype values (llama.h)
FTYPES = {"q4_k_m": 15, "q5_k_m": 17, "q5_0": 8, "q5_1": 9, "q3_k_m": 12, "iq4_nl": 25, "iq4_xs": 30,
          "q2_k": 10}
SEQUENCES = [
    [1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 200, 31, 7],
    [1, 3, 250, 4, 4, 4, 90, 91, 92, 93, 150, 160, 170, 180, 190, 5, 258, 66],
]


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def vocab():
    # 264 = 33 x 8 rows (llama.cpp's CPU backend repacks quantized weights in tiles of 8 rows:
    # 259 rows crashed its decode).
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["▁a", "▁b", "▁c", "▁d", "▁e"]
    types = [2, 3, 3] + [6] * 256 + [1] * 5  # unknown, control, control, byte, normal
    return tokens, [0.0] * len(tokens), types


def write_f32_model(path: str) -> None:
    import gguf

    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("tiny-kquant")
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # ALL_F32
    tokens, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    nv = len(tokens)

    def lin(name, rows, cols, scale=1.0):
        w.add_tensor(name, (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32))

    w.add_tensor("token_embd.weight", rng.standard_normal((nv, HIDDEN)).astype(np.float32))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        lin(p + "attn_q.weight", HEADS * HEAD_DIM, HIDDEN, 2.0)
        lin(p + "attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN, 2.0)
        lin(p + "attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN)
        lin(p + "attn_output.weight", HIDDEN, HEADS * HEAD_DIM)
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
        lin(p + "ffn_gate.weight", INTER, HIDDEN)
        lin(p + "ffn_up.weight", INTER, HIDDEN)
        lin(p + "ffn_down.weight", HIDDEN, INTER)
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    lin("output.weight", nv, HIDDEN, 4.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: str, dst: str, ftype: int) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({dst}) failed: {rc}")


def dequantized_copy(src: str, dst: str) -> dict:
    """F32 copy of src (every tensor through gguf.quants.dequantize); returns the tensor table."""
    import gguf

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = 0
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    table = {}
    for t in reader.tensors:
        f32 = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        shape = tuple(int(d) for d in reversed(t.shape))  # GGUF dims are innermost first
        f32 = f32.reshape(shape)
        table[t.name] = {"type": t.tensor_type.name, "fnv1a64": fnv1a64(f32.astype("<f4").tobytes())}
        writer.add_tensor(t.name, f32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return table


def llama_logits(path: str) -> np.ndarray:
    import llama_cpp

    kwargs = dict(model_path=path, n_ctx=256, n_batch=256, logits_all=True, n_threads=2,
                  n_threads_batch=2, type_k=0, type_v=0, seed=1234, verbose=False)
    params = inspect.signature(llama_cpp.Llama.__init__).parameters
    if "flash_attn" in params:
        kwargs["flash_attn"] = False
    if "flash_attn_type" in params:
        kwargs["flash_attn_type"] = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    # Without the CPU backend's extra buffer types: on this AVX-512 / AMX machine its AMX
    # matmul crashed on these k-quant weights; the plain CPU kernels are llama.cpp's reference.
    import llama_cpp.llama as high_level  # Llama() takes its model parameters from here

    default_params = high_level.llama_cpp.llama_model_default_params

    def params_without_extra_bufts():
        p = default_params()
        p.use_extra_bufts = False
        return p

    high_level.llama_cpp.llama_model_default_params = params_without_extra_bufts
    try:
        llm = llama_cpp.Llama(**kwargs)
    finally:
        high_level.llama_cpp.llama_model_default_params = default_params
    out = []
    for seq in SEQUENCES:
        llm.reset()
        llm.eval(seq)
        out.append(np.array(llm.scores[: len(seq)], dtype=np.float32))
    del llm
    return np.stack(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "kquant"))
    ap.add_argument("--only", nargs="+", choices=sorted(FTYPES), help="regenerate these mixes alone")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import llama_cpp

    ref = {"llama_cpp_python": llama_cpp.__version__, "seed": SEED, "sequences": SEQUENCES,
           "vocab_size": len(vocab()[0]), "files": {}}
    if a.only:
        with open(os.path.join(a.out, "reference.json")) as f:
            kept = json.load(f)
        if kept["llama_cpp_python"] != ref["llama_cpp_python"] or kept["seed"] != SEED:
            raise SystemExit("--only: reference.json was made by another llama.cpp or seed; regenerate all")
        ref["files"] = kept["files"]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "tiny_f32.gguf")
        write_f32_model(src)
        for name, ftype in FTYPES.items():
            if a.only and name not in a.only:
                continue
            q = os.path.join(a.out, f"tiny_{name}.gguf")
            quantize(src, q, ftype)
            f32 = os.path.join(tmp, f"tiny_{name}.f32.gguf")
            table = dequantized_copy(q, f32)
            np.save(os.path.join(a.out, f"tiny_{name}.f32.npy"), llama_logits(f32))
            np.save(os.path.join(a.out, f"tiny_{name}.quant.npy"), llama_logits(q))
            types = sorted({v["type"] for v in table.values()})
            ref["files"][f"tiny_{name}.gguf"] = {"ftype": ftype, "types": types, "tensors": table}
            print(f"tiny_{name}.gguf: {os.path.getsize(q)} bytes, types {types}")
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
