"""Dense bf16 / f16 weight storage (llmc compile --weight-dtype) on the tiny HF checkpoints.

The CPU widens bf16 / f16 weights exactly to f32 and runs the f32 kernels, so a plan stored in
bf16 must give the very bits of an f32 plan (with the same KV cache type) compiled from a
checkpoint whose matrices were rounded to bf16 beforehand (here, by numpy: round to nearest
even). That also holds for a
checkpoint that stores those matrices as BF16 on disk. Norms and biases stay f32. The distance to
transformers (f32) is printed and bounded loosely: it is bf16 rounding, not an error of ours.
"""

import json
import shutil
import struct

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, parse_json_stdout, prompt_args, run_cmd

TINY = FIXTURES / "tiny"
MODELS = ["llama", "llama_tied", "qwen2"]  # separate lm_head, tied table, q/k/v biases
HF_REL_TOL = {"bf16": 3e-2, "f16": 5e-3}  # measured up to 1.1e-2 and 1.7e-3


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: fixture tensors are f32"
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.float32).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (safetensors dtype, numpy array of that element size)."""
    header, blobs, at = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        blob = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_bits(a):
    """f32 -> bf16 bits, round to nearest even (no NaNs in the fixtures)."""
    b = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def is_matrix(name, arr):
    return arr.ndim == 2 and ("proj.weight" in name or "embed_tokens" in name or "lm_head" in name)


def copy_model(src, dst, tensors):
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy(f, dst / f.name)
    write_safetensors(dst / "model.safetensors", tensors)


def last_logits(llmrt, plan, prompts, vocab, tmp_path, tag):
    path = tmp_path / f"{tag}.npy"
    what = f"llmrt run {tag}"
    proc = run_cmd([llmrt, "run", plan, *prompt_args(prompts), "--max-tokens", 4, "--temperature", 0,
                    "--ignore-eos", "--cpu-kernels", "reference", "--logits-out", path, "--json"], what)
    out = parse_json_stdout(proc, what)
    return load_f32_npy(path, (len(prompts), vocab), what), [o["output_ids"] for o in out["outputs"]]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("name", MODELS)
def test_half_plan_equals_the_rounded_f32_plan(name, dtype, llmc, llmrt, compile_plan, tmp_path):
    src = TINY / name
    ref = json.loads((src / "reference.json").read_text())
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    prompts = ref["prompts"]
    tensors = read_safetensors(src / "model.safetensors")
    matrices = [n for n, a in tensors.items() if is_matrix(n, a)]
    assert matrices and len(matrices) < len(tensors), "the fixture has matrices and norms"

    def rounded(a):
        if dtype == "bf16":
            return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float16).astype(np.float32)

    copy_model(src, tmp_path / "rounded",
               {n: ("F32", rounded(a) if n in matrices else a) for n, a in tensors.items()})
    half = compile_plan(src, f"{name}_{dtype}", "--weight-dtype", dtype, "--target", "none")
    # (the same KV cache: a half plan keeps its cache in its weights' dtype, --kv-cache-dtype auto)
    base = compile_plan(tmp_path / "rounded", f"{name}_rounded_{dtype}", "--target", "none",
                        "--kv-cache-dtype", dtype)

    info = json.loads(run_cmd([llmc, "inspect", half, "--json"], "llmc inspect").stdout)["tensors"]
    full = json.loads(run_cmd([llmc, "inspect", base, "--json"], "llmc inspect").stdout)["tensors"]
    # Matrices in 2-byte storage, the rest (norms, biases) f32: about half the bytes.
    assert set(info["bytes_by_dtype"]) == {dtype.upper(), "F32"}, info
    assert info["bytes"] < 0.55 * full["bytes"], (info, full)

    ours, ids = last_logits(llmrt, half, prompts, vocab, tmp_path, f"{name}_{dtype}")
    want, want_ids = last_logits(llmrt, base, prompts, vocab, tmp_path, f"{name}_rounded_{dtype}")
    assert np.array_equal(ours.view(np.uint32), want.view(np.uint32)), \
        f"max |diff| {np.abs(ours - want).max()}"
    assert ids == want_ids

    hf = np.array(ref["last_logits"], dtype=np.float64)
    rel = float((np.abs(ours - hf).max(axis=1) / np.abs(hf).max(axis=1)).max())
    print(f"{name} {dtype}: max|ours - transformers f32| / max|logit| = {rel:.2e}")
    assert rel < HF_REL_TOL[dtype]


def test_bf16_checkpoint_keeps_its_values(llmc, llmrt, compile_plan, tmp_path):
    """A checkpoint whose matrices are BF16 on disk: --weight-dtype bf16 stores them unchanged,
    so its plan answers exactly as the plan of the f32 checkpoint rounded by llmc."""
    src = TINY / "llama"
    ref = json.loads((src / "reference.json").read_text())
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    tensors = read_safetensors(src / "model.safetensors")
    copy_model(src, tmp_path / "bf16ckpt",
               {n: ("BF16", bf16_bits(a)) if is_matrix(n, a) else ("F32", a) for n, a in tensors.items()})
    from_disk = compile_plan(tmp_path / "bf16ckpt", "llama_bf16_ckpt", "--weight-dtype", "bf16", "--target", "none")
    rounded_by_us = compile_plan(src, "llama_bf16", "--weight-dtype", "bf16", "--target", "none")
    a, _ = last_logits(llmrt, from_disk, ref["prompts"], vocab, tmp_path, "disk")
    b, _ = last_logits(llmrt, rounded_by_us, ref["prompts"], vocab, tmp_path, "ours")
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
