"""GPTQ and AWQ checkpoints made by the reference packers, compiled as they are.

Fixtures: tests/fixtures/quant/<name>/ from tests/reference/make_quant_models.py (GPTQModel and
AutoAWQ on CPU). reference.json holds the outputs of fp32 transformers with the packer's exact f32
dequantization as the quantized linears' weights, so:
  - --cpu-kernels reference (each weight row dequantized exactly, then the f32 linear): the same
    numbers as that fp32 model: last-position logits within 1e-4 x max|logit| and greedy tokens
    identical while the reference's top-2 margin exceeds 10x that tolerance (as the tiny
    transformers test);
  - --cpu-kernels fast (int8 activations per block of 32): within FAST_REL_TOL x max|logit|, and
    greedy tokens compared only where the margin clears 10x that.
The desc_act fixture has permuted groups, so its linears are imported as f32 (no native format):
both contracts give the reference numbers there.
"""

import json

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, parse_json_stdout, prompt_args, run_cmd
from refcheck import greedy_check, logits_errors

QUANT = FIXTURES / "quant"
EXPECTED = {"gptq_4bit_sym", "gptq_4bit_asym", "gptq_8bit_sym", "gptq_4bit_desc_act",
            "awq_4bit_gemm"}
# The checkpoint's own formats, kept without requantization (none for desc_act: permuted groups).
NATIVE_FORMAT = {"gptq_4bit_sym": "int4-g32-f16-sym", "gptq_4bit_asym": "int4-g32-f16-zp",
                 "gptq_8bit_sym": "int8-g32-f16-sym", "gptq_4bit_desc_act": "int4-g32-f16-sym",
                 "awq_4bit_gemm": "int4-g32-f16-zp"}
REL_TOL = 1e-4
# int8 activations: 1.2e-2 .. 1.9e-2 of max|logit| measured on these fixtures (the packers' own
# f16 forward passes are 1e-3 .. 2.5e-3 away).
FAST_REL_TOL = 3e-2
GREEDY_MARGIN_FACTOR = 10.0

MODELS = sorted(d.name for d in QUANT.iterdir() if (d / "reference.json").is_file()) \
    if QUANT.is_dir() else []


def load(name):
    with open(QUANT / name / "reference.json") as f:
        ref = json.load(f)
    with open(QUANT / name / "config.json") as f:
        cfg = json.load(f)
    return ref, cfg


def test_all_fixtures_present():
    missing = EXPECTED - set(MODELS)
    assert not missing, f"missing quantized fixtures {sorted(missing)} under {QUANT}"


@pytest.mark.parametrize("name", MODELS)
def test_fixture_is_well_formed(name):
    ref, cfg = load(name)
    d = QUANT / name
    for f in ("config.json", "model.safetensors", "packer_dequant.safetensors"):
        assert (d / f).is_file(), f"{d / f} missing"
    assert (d / "model.safetensors").stat().st_size < 1e6
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == ref["packer"]
    assert qc["group_size"] == 32
    prompts = ref["prompts"]
    assert len(prompts) >= 4 and all(0 <= t < cfg["vocab_size"] for p in prompts for t in p)
    assert np.array(ref["last_logits"]).shape == (len(prompts), cfg["vocab_size"])
    assert len(ref["greedy"]) == len(prompts)


@pytest.mark.parametrize("name", MODELS)
def test_plan_keeps_checkpoint_format(name, llmc, compile_plan):
    plan = compile_plan(QUANT / name, f"{name}_reference", "--cpu-kernels", "reference")
    what = f"llmc inspect {name}"
    info = parse_json_stdout(run_cmd([llmc, "inspect", plan, "--json"], what), what)
    by_dtype = info["tensors"]["bytes_by_dtype"]
    want = NATIVE_FORMAT[name]
    quantized = sorted(k for k in by_dtype if k.startswith("int"))
    assert quantized == [want], f"{name}: expected {want} weights, got {by_dtype}"
    ops = info["program"]["ops"]
    if name == "gptq_4bit_desc_act":
        # Columns regrouped by g_idx, inputs gathered by PermuteColumns; q/k/v and gate/up share
        # their permutation (same input statistics), so fusion still gives 4 linears per layer.
        assert ops.get("PermuteColumns", 0) > 0, ops
        assert ops["Linear"] == 4 * info["model"]["num_layers"], ops
    else:
        assert "PermuteColumns" not in ops, ops


@pytest.mark.parametrize("contract", ["reference", "fast"])
@pytest.mark.parametrize("name", MODELS)
def test_matches_packer_reference(name, contract, llmrt, compile_plan, tmp_path):
    ref, cfg = load(name)
    prompts = ref["prompts"]
    n_gen = len(ref["greedy"][0])
    vocab = cfg["vocab_size"]
    plan = compile_plan(QUANT / name, f"{name}_{contract}", "--cpu-kernels", contract)
    tol = REL_TOL if contract == "reference" else FAST_REL_TOL

    logits_path = tmp_path / "last_logits.npy"
    what = f"llmrt run {name} ({contract})"
    proc = run_cmd([llmrt, "run", plan, *prompt_args(prompts), "--max-tokens", n_gen,
                    "--temperature", 0, "--ignore-eos", "--logits-out", logits_path, "--json"],
                   what)
    out = parse_json_stdout(proc, what)
    ours = load_f32_npy(logits_path, (len(prompts), vocab), what)
    ref_logits = np.array(ref["last_logits"], dtype=np.float64)

    failures = logits_errors(ours, ref_logits, tol, label="prompt")
    outputs = out.get("outputs")
    assert isinstance(outputs, list) and len(outputs) == len(prompts), \
        f"{what}: expected {len(prompts)} outputs, got {outputs!r:.500}"
    compared = []
    for i, (o, p) in enumerate(zip(outputs, prompts)):
        assert o.get("prompt_ids") == p, f"prompt {i}: outputs out of order or prompt_ids wrong"
        n, err = greedy_check(o.get("output_ids", []), ref["greedy"][i], ref["greedy_margins"][i],
                              ref["greedy_max_abs"][i], tol, GREEDY_MARGIN_FACTOR)
        compared.append(n)
        if err:
            failures.append(f"prompt {i} greedy: {err}")
    worst = float((np.abs(ours - ref_logits).max(axis=1) / np.abs(ref_logits).max(axis=1)).max())
    print(f"{name} ({contract}): worst max|diff| / max|logit| = {worst:.2e}; "
          f"greedy tokens compared per prompt: {compared}")
    assert not failures, f"{name} ({contract}) differs from the packer reference:\n  " + \
        "\n  ".join(failures)
