#!/usr/bin/env python3
"""Writes the small seed corpora for the frontend fuzz targets, using the independent `gguf` and
`safetensors` Python packages (so seeds are valid files by someone else's definition).

    /opt/refenv/bin/python tests/fuzz/corpus/make_seeds.py tests/fuzz/corpus
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import quants
from safetensors.numpy import save_file


def tiny_llama(path: str, arch: str, quant: Q) -> None:
    rng = np.random.default_rng(5)
    hidden, heads, kv, inter, vocab, layers = 32, 4, 2, 32, 8, 1
    hd = hidden // heads
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_types([1] * (vocab - 1) + [3])
    w.add_token_merges(["t 1", "t 2"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template("{{ x }}")

    def t(name, shape, q=None):
        data = rng.standard_normal(shape).astype(np.float32)
        if q is None or q == Q.F32:
            w.add_tensor(name, data)
        else:
            packed = quants.quantize(data, q)
            w.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=q)

    t("token_embd.weight", (vocab, hidden), quant)
    t("output_norm.weight", (hidden,))
    for l in range(layers):
        p = f"blk.{l}."
        t(p + "attn_norm.weight", (hidden,))
        t(p + "ffn_norm.weight", (hidden,))
        t(p + "attn_q.weight", (heads * hd, hidden), quant)
        t(p + "attn_k.weight", (kv * hd, hidden), quant)
        t(p + "attn_v.weight", (kv * hd, hidden), quant)
        t(p + "attn_output.weight", (hidden, heads * hd), quant)
        if arch == "qwen2":
            t(p + "attn_q.bias", (heads * hd,))
            t(p + "attn_k.bias", (kv * hd,))
            t(p + "attn_v.bias", (kv * hd,))
        t(p + "ffn_gate.weight", (inter, hidden), quant)
        t(p + "ffn_up.weight", (inter, hidden), quant)
        t(p + "ffn_down.weight", (hidden, inter), quant)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def block_types(path: str) -> None:
    """No model: two rows of 256 elements in each ggml block type that llmc holds in a wider or
    non-linear format (Q5_0 ... IQ4_XS, Q2_K), random bytes in its blocks, for the fuzz target's
    per-tensor conversion (dequantize and repackBlocks run before any model mapping)."""
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, arch="llama")
    for q in (Q.Q5_0, Q.Q5_1, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS, Q.Q2_K):
        block, size = gguf.GGML_QUANT_SIZES[q]
        raw = rng.integers(0, 256, (2, 256 // block * size), dtype=np.uint8)
        w.add_tensor(f"t_{q.name.lower()}", raw, raw_shape=raw.shape, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out: str) -> None:
    block_types(os.path.join(out, "gguf", "block_types.gguf"))
    tiny_llama(os.path.join(out, "gguf", "tiny_llama_q8_0.gguf"), "llama", Q.Q8_0)
    tiny_llama(os.path.join(out, "gguf", "tiny_qwen2_q4_1.gguf"), "qwen2", Q.Q4_1)
    tiny_llama(os.path.join(out, "gguf", "tiny_llama_q4_0.gguf"), "llama", Q.Q4_0)

    os.makedirs(os.path.join(out, "npy"), exist_ok=True)
    np.save(os.path.join(out, "npy", "token_ids_i4.npy"), np.arange(17, dtype=np.int32))
    np.save(os.path.join(out, "npy", "token_ids_i8.npy"), np.arange(5, dtype=np.int64))
    np.save(os.path.join(out, "npy", "logprobs_f2.npy"),
            np.linspace(-9, 0, 24, dtype=np.float32).reshape(3, 8).astype(np.float16))
    np.save(os.path.join(out, "npy", "logprobs_f4.npy"), np.zeros((2, 5), np.float32))
    # Zero-sized arrays (a [3, 0] array once reached memcpy with a null buffer).
    np.save(os.path.join(out, "npy", "logprobs_zero_cols.npy"), np.zeros((3, 0), np.float32))
    np.save(os.path.join(out, "npy", "token_ids_empty.npy"), np.zeros((0,), np.int32))
    # No rows and a width no file could hold (once allocated as a 1.5 TB row buffer).
    np.save(os.path.join(out, "npy", "logprobs_zero_rows_wide.npy"), np.zeros((0, 755555555555), np.float16))

    rng = np.random.default_rng(6)
    save_file({"a": rng.standard_normal((4, 8)).astype(np.float32),
               "b": rng.standard_normal((8,)).astype(np.float16),
               "c": np.zeros((0, 3), np.float32)},
              os.path.join(out, "safetensors", "mixed.safetensors"),
              metadata={"format": "pt"})
    save_file({"model.embed_tokens.weight": rng.standard_normal((8, 4)).astype(np.float32)},
              os.path.join(out, "safetensors", "one.safetensors"))

    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536,
           "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 100000,
           "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
           "rope_scaling": None, "head_dim": 64, "max_position_embeddings": 8192}
    with open(os.path.join(out, "hf_config", "smollm2.json"), "w") as f:
        json.dump(cfg, f)
    cfg2 = dict(cfg, architectures=["Qwen2ForCausalLM"], use_sliding_window=True,
                sliding_window=4096, max_window_layers=0,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192})
    with open(os.path.join(out, "hf_config", "qwen2_llama3_rope.json"), "w") as f:
        json.dump(cfg2, f)
    with open(os.path.join(out, "hf_config", "generation.json"), "w") as f:
        json.dump({"eos_token_id": [1, 2], "temperature": 0.6, "top_p": 0.9, "top_k": 50,
                   "do_sample": True, "repetition_penalty": 1.1, "max_new_tokens": 64}, f)
    with open(os.path.join(out, "hf_config", "index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 8},
                   "weight_map": {"a": "model-00001-of-00002.safetensors",
                                  "b": "model-00002-of-00002.safetensors"}}, f)


if __name__ == "__main__":
    main(sys.argv[1])
