"""Our compiler + runtime against Hugging Face transformers on tiny random checkpoints.

Fixtures: tests/fixtures/tiny/<model>/ from tests/reference/make_tiny_models.py.
For every model: compile it, run ALL its prompts in one ragged batch, and require
  - last-position logits within 1e-4 x max|logit| of transformers, per prompt;
  - greedy continuations identical while transformers' top-2 margin stays above 10x that
    tolerance (at least 16 tokens per prompt are compared; the fixture guarantees it).
"""

import json

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, parse_json_stdout, prompt_args, run_cmd
from refcheck import greedy_check, logits_errors, safe_prefix

TINY = FIXTURES / "tiny"
EXPECTED_MODELS = {"llama", "llama_tied", "llama3_rope", "llama_linear_rope", "mistral_swa",
                   "qwen2", "qwen3"}
REL_TOL = 1e-4
GREEDY_MARGIN_FACTOR = 10.0
MIN_COMPARED = 16
MIN_FEATURE_RATIO = 100.0

MODELS = sorted(d.name for d in TINY.iterdir() if (d / "reference.json").is_file()) \
    if TINY.is_dir() else []


def load(name):
    with open(TINY / name / "reference.json") as f:
        ref = json.load(f)
    with open(TINY / name / "config.json") as f:
        cfg = json.load(f)
    return ref, cfg


def test_all_models_have_fixtures():
    missing = EXPECTED_MODELS - set(MODELS)
    assert not missing, f"missing tiny fixtures {sorted(missing)} under {TINY}"


@pytest.mark.parametrize("name", MODELS)
def test_fixture_is_well_conditioned(name):
    """The fixture itself can catch what it is meant to catch."""
    ref, cfg = load(name)
    d = TINY / name
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        assert (d / f).is_file(), f"{d / f} missing"
    assert (d / "model.safetensors").stat().st_size < 5e6
    assert ref["tolerance"]["rel_to_max_abs"] == REL_TOL
    prompts = ref["prompts"]
    assert len(prompts) >= 4 and len({len(p) for p in prompts}) >= 4
    vocab = cfg["vocab_size"]
    assert all(0 <= t < vocab for p in prompts for t in p)
    assert np.array(ref["last_logits"]).shape == (len(prompts), vocab)
    for g, m, a in zip(ref["greedy"], ref["greedy_margins"], ref["greedy_max_abs"]):
        assert len(g) == len(m) == len(a) >= MIN_COMPARED
        assert safe_prefix(m, a, REL_TOL, GREEDY_MARGIN_FACTOR) >= MIN_COMPARED, \
            "fewer than 16 greedy tokens are clear of near-ties"
    # Switching the model's feature off must move the logits far beyond the tolerance.
    assert ref["feature_deltas"], "no feature deltas recorded"
    for variant, delta in ref["feature_deltas"].items():
        assert delta["ratio"] >= MIN_FEATURE_RATIO, f"{variant}: ratio {delta['ratio']}"
    # The prompts exercise the feature: past the window / the original context.
    longest = max(len(p) for p in prompts)
    scaling = cfg.get("rope_scaling") or {}
    if name == "mistral_swa":
        assert cfg["sliding_window"] and longest > cfg["sliding_window"]
    if scaling.get("rope_type") == "llama3":
        assert longest > scaling["original_max_position_embeddings"]
    if scaling.get("rope_type") == "linear":
        assert longest > cfg["max_position_embeddings"] / scaling["factor"]
    if name == "llama_tied":
        assert cfg["tie_word_embeddings"] is True
    if name == "llama":
        assert cfg["tie_word_embeddings"] is False


@pytest.mark.parametrize("name", MODELS)
def test_matches_transformers(name, llmrt, compile_plan, tmp_path):
    ref, cfg = load(name)
    prompts = ref["prompts"]
    n_gen = len(ref["greedy"][0])
    vocab = cfg["vocab_size"]
    plan = compile_plan(TINY / name, name)

    logits_path = tmp_path / "last_logits.npy"
    what = f"llmrt run {name}"
    proc = run_cmd([llmrt, "run", plan, *prompt_args(prompts), "--max-tokens", n_gen,
                    "--temperature", 0, "--ignore-eos", "--logits-out", logits_path, "--json"],
                   what)
    out = parse_json_stdout(proc, what)
    ours_logits = load_f32_npy(logits_path, (len(prompts), vocab), what)

    failures = []
    ref_logits = np.array(ref["last_logits"], dtype=np.float64)
    failures += logits_errors(ours_logits, ref_logits, REL_TOL, label="prompt")

    outputs = out.get("outputs")
    assert isinstance(outputs, list) and len(outputs) == len(prompts), \
        f"{what}: expected {len(prompts)} outputs, got {outputs!r:.500}"
    compared = []
    for i, (o, p) in enumerate(zip(outputs, prompts)):
        assert o.get("prompt_ids") == p, f"prompt {i}: outputs out of order or prompt_ids wrong"
        n, err = greedy_check(o.get("output_ids", []), ref["greedy"][i], ref["greedy_margins"][i],
                              ref["greedy_max_abs"][i], REL_TOL, GREEDY_MARGIN_FACTOR)
        compared.append(n)
        if err:
            failures.append(f"prompt {i} greedy: {err}")
        elif n < MIN_COMPARED:
            failures.append(f"prompt {i} greedy: only {n} tokens compared (< {MIN_COMPARED})")
    worst = float((np.abs(ours_logits - ref_logits).max(axis=1)
                   / np.abs(ref_logits).max(axis=1)).max())
    print(f"{name}: worst max|diff| / max|logit| = {worst:.2e}; "
          f"greedy tokens compared per prompt: {compared}")
    assert not failures, f"{name} differs from transformers:\n  " + "\n  ".join(failures)
