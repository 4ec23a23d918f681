"""Quantized plans of the real SmolLM2-135M-Instruct Q4_1 GGUF (issue 5).

Plans compiled from the same file:
  float      --dequantize: every weight f32 (the baseline)
  reference  Q4_1 blocks kept bit for bit, --cpu-kernels reference (dequantize, fp32 dot)
  fast       Q4_1 blocks kept, --cpu-kernels fast (int8 activations per 32, integer dots)
  rtn8       --dequantize --quantize int8: the dequantized weights rounded by us to int8-g32-f16-sym
  rtn4       --dequantize --quantize int4: int4-g128-f16-min (g64 where 576-wide rows need it)
  kv8        reference weights, --kv-cache-dtype int8
Checks, teacher forcing the prompts of the llama.cpp fixture:
  - reference == float bit for bit (same fp32 weights, same fp32 order);
  - fast vs reference: mean KL and top-1 agreement within the bounds below (printed);
  - rtn8 closer to float than rtn4; both within bounds;
  - plan sizes: Q4_1 blocks are 5/32 of f32 (+ tiny tensors); printed.
Needs LLMC_SMOLLM2_GGUF (see test_llamacpp_reference.py).
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, prompt_args, run_cmd
from refcheck import kl_top1

FIX = FIXTURES / "smollm2_llamacpp"
VOCAB = 49152

# Bounds with room above what was measured (see the printed figures; measured values are in the
# closing note of the change that added this file).
# Measured here: fast vs reference 4.1e-3 / 96.0%; RTN int8 ~3e-3; RTN int4-g128 (g64 on the
# 576-wide rows) ~1.3: this 135M model loses much to 4-bit groups of 64+ (int4-g32: ~0.07).
FAST_MEAN_KL = 0.01
FAST_TOP1 = 0.93
RTN8_MEAN_KL = 0.01
RTN4_MEAN_KL = 3.0
KV8_MEAN_KL = 0.005  # measured 5.9e-4, top-1 100%


@pytest.fixture(scope="module")
def gguf():
    path = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not path:
        pytest.skip("LLMC_SMOLLM2_GGUF is not set (path of SmolLM2-135M-Instruct.Q4_1.gguf)")
    if not Path(path).is_file():
        pytest.fail(f"LLMC_SMOLLM2_GGUF={path}: no such file")
    return Path(path)


PLAN_ARGS = {
    "float": ["--dequantize"],
    "reference": ["--cpu-kernels", "reference"],
    "fast": ["--cpu-kernels", "fast"],
    "kv8": ["--cpu-kernels", "reference", "--kv-cache-dtype", "int8"],
}


@pytest.fixture(scope="module")
def plans(gguf, compile_plan):
    return {name: compile_plan(gguf, f"smollm2_{name}", *args) for name, args in PLAN_ARGS.items()}


def prompts():
    with open(FIX / "reference.json") as f:
        ref = json.load(f)
    return ref["token_ids"]


def logits_of(llmrt, plan, ids, tmp_path, tag, *extra):
    out = tmp_path / f"{tag}.npy"
    run_cmd([llmrt, "run", plan, *prompt_args([ids]), "--all-logits-out", out, "--max-tokens", "0", *extra],
            f"llmrt run {tag}")
    return load_f32_npy(out, (len(ids), VOCAB), f"llmrt run {tag}")


def test_reference_contract_equals_float_plan(llmrt, plans, tmp_path):
    for i, ids in enumerate(prompts()):
        f = logits_of(llmrt, plans["float"], ids, tmp_path, f"float{i}")
        r = logits_of(llmrt, plans["reference"], ids, tmp_path, f"reference{i}")
        assert f.shape == r.shape
        diff = np.abs(f - r).max()
        assert diff == 0.0, f"prompt {i}: reference contract differs from the float plan by {diff}"


def test_fast_contract_against_reference(llmrt, plans, tmp_path):
    kls, tops = [], []
    for i, ids in enumerate(prompts()):
        r = logits_of(llmrt, plans["reference"], ids, tmp_path, f"reference{i}")
        f = logits_of(llmrt, plans["fast"], ids, tmp_path, f"fast{i}")
        kl, top = kl_top1(r, f)
        kls.append(kl)
        tops.append(top)
    kl, top = float(np.mean(kls)), float(np.mean(tops))
    print(f"fast vs reference contract: mean KL {kl:.3e}, top-1 agreement {100 * top:.2f}%")
    assert kl < FAST_MEAN_KL
    assert top >= FAST_TOP1


def test_runtime_override_matches_compiled_contract(llmrt, plans, tmp_path):
    ids = prompts()[0]
    a = logits_of(llmrt, plans["fast"], ids, tmp_path, "fast_as_ref", "--cpu-kernels", "reference")
    b = logits_of(llmrt, plans["reference"], ids, tmp_path, "ref")
    assert np.array_equal(a, b)


def test_weight_layouts_give_identical_logits(llmrt, plans, compile_plan, gguf, tmp_path):
    """cpu_row_groups and cuda_mma_n8 (the GPU layout, which the CPU runs with its scalar fast
    oracle on unpacked rows) hold the same blocks as the default cpu_interleaved8: same logits
    bit for bit, under both contracts."""
    ids = prompts()[0]
    for layout in ["row-groups", "cuda-mma"]:
        plan = compile_plan(gguf, f"smollm2_{layout}", "--cpu-kernels", "fast", "--weight-layout", layout)
        for contract in ["fast", "reference"]:
            want = logits_of(llmrt, plans["fast"], ids, tmp_path, f"interleaved8_{contract}",
                             "--cpu-kernels", contract)
            got = logits_of(llmrt, plan, ids, tmp_path, f"{layout}_{contract}", "--cpu-kernels", contract)
            assert np.array_equal(got, want), f"{layout}, {contract} contract: max diff {np.abs(got - want).max()}"


def test_rtn_quantization_quality(llmc, llmrt, plans, compile_plan, gguf, tmp_path):
    # RTN from float weights: --dequantize turns the Q4_1 blocks into f32 first, --quantize then
    # rounds every matrix (embedding/lm_head included) to the new format.
    # The reference contract isolates the weights' rounding from the activations' (fast).
    rtn8 = compile_plan(gguf, "smollm2_rtn8", "--dequantize", "--quantize", "int8",
                        "--cpu-kernels", "reference")
    rtn4 = compile_plan(gguf, "smollm2_rtn4", "--dequantize", "--quantize", "int4",
                        "--cpu-kernels", "reference")
    # int5 codes (Q5_0's format), and int4 with sub-scales (Q4_K's): 576-wide rows take g192s32
    rtn5 = compile_plan(gguf, "smollm2_rtn5", "--dequantize", "--quantize", "int5-sym",
                        "--cpu-kernels", "reference")
    rtn4s = compile_plan(gguf, "smollm2_rtn4s", "--dequantize", "--quantize", "int4-g256s32-f16-min",
                         "--cpu-kernels", "reference")
    kl = {"int8": [], "int5": [], "int4": [], "int4s": []}
    top = {name: [] for name in kl}
    for i, ids in enumerate(prompts()):
        f = logits_of(llmrt, plans["float"], ids, tmp_path, f"float{i}")
        for name, plan in (("int8", rtn8), ("int5", rtn5), ("int4", rtn4), ("int4s", rtn4s)):
            a, b = kl_top1(f, logits_of(llmrt, plan, ids, tmp_path, f"rtn_{name}_{i}"))
            kl[name].append(a)
            top[name].append(b)
    print("; ".join(f"RTN {name} vs float: mean KL {np.mean(kl[name]):.3e}, top-1 {100 * np.mean(top[name]):.2f}%"
                    for name in kl))
    assert np.mean(kl["int8"]) < RTN8_MEAN_KL
    assert np.mean(kl["int4"]) < RTN4_MEAN_KL and np.mean(kl["int4s"]) < RTN4_MEAN_KL
    assert np.mean(kl["int8"]) < np.mean(kl["int5"]) < np.mean(kl["int4"])
    info = json.loads(run_cmd([llmc, "inspect", rtn4s, "--json"], "llmc inspect").stdout)
    assert "int4-g192s32-f16-min" in info["tensors"]["bytes_by_dtype"], info["tensors"]["bytes_by_dtype"]
    info = json.loads(run_cmd([llmc, "inspect", rtn5, "--json"], "llmc inspect").stdout)
    assert "int5-g32-f16-sym" in info["tensors"]["bytes_by_dtype"], info["tensors"]["bytes_by_dtype"]


def test_int8_kv_cache(llmc, llmrt, plans, tmp_path):
    kls, tops = [], []
    for i, ids in enumerate(prompts()):
        r = logits_of(llmrt, plans["reference"], ids, tmp_path, f"reference{i}")
        q = logits_of(llmrt, plans["kv8"], ids, tmp_path, f"kv8_{i}")
        kl, top = kl_top1(r, q)
        kls.append(kl)
        tops.append(top)
    kl, top = float(np.mean(kls)), float(np.mean(tops))
    print(f"int8 KV cache vs f32: mean KL {kl:.3e}, top-1 agreement {100 * top:.2f}%")
    assert kl < KV8_MEAN_KL
    # The memory budget counts codes and scales: (64 + 4) bytes per head row instead of 256.
    def kv_bytes(plan):
        proc = run_cmd([llmc, "inspect", plan, "--json"], "llmc inspect")
        return json.loads(proc.stdout)["kv_cache"]["bytes_per_token"]
    assert kv_bytes(plans["kv8"]) * 256 == kv_bytes(plans["reference"]) * 68


def test_plan_sizes(plans, llmc):
    sizes = {name: Path(p).stat().st_size for name, p in plans.items()}
    print("plan sizes: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))
    # Q4_1: 20 bytes per 32 weights against 128 for f32.
    assert sizes["fast"] < 0.25 * sizes["float"]
    # The contract and the KV dtype change no weight byte. (File sizes differ by the FlatBuffer:
    # recorded options, and the kv8 plan has int8-cache GPU kernels instead; the weight section's
    # alignment turns a few bytes into a page.)
    def weight_bytes(plan):
        return json.loads(run_cmd([llmc, "inspect", plan, "--json"], "llmc inspect").stdout)["tensors"]["bytes"]
    assert weight_bytes(plans["kv8"]) == weight_bytes(plans["reference"]) == weight_bytes(plans["fast"])
    assert abs(sizes["fast"] - sizes["reference"]) < 0.01 * sizes["reference"]
