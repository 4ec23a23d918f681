#!/usr/bin/env python3
"""Tiny random checkpoints + Hugging Face transformers reference outputs.

Writes one folder per supported architecture feature under tests/fixtures/tiny/<name>/:
  config.json, generation_config.json, model.safetensors (F32)   -- written by save_pretrained
  reference.json                                                 -- reference outputs (see below)

The reference is Hugging Face transformers itself (fp32, attn_implementation="eager",
model.eval(), torch.no_grad()), i.e. an implementation that no one in this project wrote.

reference.json:
  prompts          [[ids]...]    random ids (fixed seeds), lengths PROMPT_LENGTHS
  last_logits      [[floats]...] logits at the last prompt position, one row per prompt
  greedy           [[ids]...]    GREEDY_TOKENS greedy tokens per prompt (full recompute each step,
                                 no KV cache, EOS does NOT stop generation -> run with --ignore-eos)
  greedy_margins   [[floats]...] top1 - top2 logit at each greedy step
  greedy_max_abs   [[floats]...] max |logit| at each greedy step (scale of the tolerance)
  feature_deltas   {variant: {max_abs_delta, tolerance, ratio}}: how far the last-position logits
                   move when the model's feature is switched off; the script fails unless every
                   ratio (delta / tolerance) is >= MIN_FEATURE_RATIO, so a runtime that ignored the
                   feature could not pass the e2e test.
  tolerance        {"rel_to_max_abs": 1e-4, "greedy_margin_factor": 10}
  versions         library versions that produced the file

Initialization (numpy default_rng, so it is stable across torch versions). HF's own init
(std 0.02) gives near-uniform attention and logits with tiny margins; these scales give sharp
attention (so RoPE, windows, q/k norms visibly matter) and logits with std ~4:
  embed_tokens      N(0, 1)          (tied model: N(0, 0.15^2), see EMBED_STD)
  q_proj, k_proj    N(0, 0.2^2)      -> per-head scores q.k/sqrt(hd) with std ~2.5
  v_proj, o_proj    N(0, 1/in)       (unit gain)
  gate/up/down      N(0, 1/in)
  *norm weights     U(0.8, 1.2)      (q_norm/k_norm: U(0.5, 1.5))
  q/k/v bias        N(0, 0.5^2)      (qwen2 only)
  lm_head           N(0, 0.5^2)      (untied models)

Prompts whose greedy path contains a near-tie (top-2 margin <= 10 x tolerance) within the first
MIN_COMPARED_TOKENS steps are re-drawn with the next seed, so that the e2e test always compares at
least MIN_COMPARED_TOKENS greedy tokens.

Usage: /opt/refenv/bin/python tests/reference/make_tiny_models.py [--out tests/fixtures/tiny]
"""

import argparse
import copy
import json
import os
import platform
import sys

import numpy as np
import safetensors
import torch
import transformers
from transformers import GenerationConfig

REL_TOL = 1e-4  # last-position logits: |ours - ref| <= REL_TOL * max|ref|
GREEDY_MARGIN_FACTOR = 10.0  # greedy tokens compared while margin > factor * tolerance
MIN_FEATURE_RATIO = 100.0  # a feature must move logits by >= this many tolerances
MIN_COMPARED_TOKENS = 16
GREEDY_TOKENS = 24
PROMPT_LENGTHS = [1, 5, 13, 24, 40]  # 13, 24, 40 > sliding window 8 / llama3 original ctx 16;
                                     # 40 > linear-rope original ctx 32

# Tied models: with a unit-scale embedding the residual stream is dominated by the current token's
# own embedding, and E . norm(h) makes greedy repeat the input token forever. A smaller embedding
# lets the attention/MLP outputs decide the next token.
EMBED_STD = {"llama_tied": 0.15}

BASE = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    max_position_embeddings=128,
    rope_theta=10000.0,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    attention_dropout=0.0,
)


def spec_list():
    """(name, config class name, model class name, config overrides, seed)."""
    return [
        ("llama", "LlamaConfig", "LlamaForCausalLM",
         dict(vocab_size=384, rms_norm_eps=1e-5, tie_word_embeddings=False), 101),
        ("llama_tied", "LlamaConfig", "LlamaForCausalLM",
         dict(vocab_size=256, rms_norm_eps=1e-5, tie_word_embeddings=True), 102),
        ("llama3_rope", "LlamaConfig", "LlamaForCausalLM",
         dict(vocab_size=384, rms_norm_eps=1e-5, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
         103),
        # original context 32 (= max_position_embeddings / factor); prompts reach position 63.
        ("llama_linear_rope", "LlamaConfig", "LlamaForCausalLM",
         dict(vocab_size=384, rms_norm_eps=1e-5, tie_word_embeddings=False,
              max_position_embeddings=64,
              rope_scaling={"rope_type": "linear", "factor": 2.0}), 104),
        ("mistral_swa", "MistralConfig", "MistralForCausalLM",
         dict(vocab_size=384, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=8),
         105),
        ("qwen2", "Qwen2Config", "Qwen2ForCausalLM",
         dict(vocab_size=320, rms_norm_eps=1e-6, tie_word_embeddings=False,
              use_sliding_window=False, sliding_window=None, max_window_layers=2), 106),
        ("qwen3", "Qwen3Config", "Qwen3ForCausalLM",
         dict(vocab_size=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
              attention_bias=False, use_sliding_window=False, sliding_window=None,
              max_window_layers=2), 107),
    ]


def make_config(cls_name, overrides):
    kwargs = dict(BASE)
    kwargs.update(overrides)
    cfg = getattr(transformers, cls_name)(**kwargs)
    cfg._attn_implementation = "eager"
    return cfg


def init_weights(model, seed, embed_std=1.0):
    """Fill every parameter from numpy (scales documented in the module docstring)."""
    rng = np.random.default_rng(seed)
    sd = model.state_dict()
    new = {}
    for name in sorted(sd):
        shape = tuple(sd[name].shape)
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # shares storage with embed_tokens; filled below by tie_weights()
        if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
            w = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = rng.uniform(0.8, 1.2, shape)
        elif name.endswith(".bias"):
            w = rng.normal(0.0, 0.5, shape)
        elif "embed_tokens" in name:
            w = rng.normal(0.0, embed_std, shape)
        elif name == "lm_head.weight":
            w = rng.normal(0.0, 0.5, shape)
        elif name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
            w = rng.normal(0.0, 0.2, shape)
        elif name.endswith("_proj.weight"):
            w = rng.normal(0.0, 1.0 / np.sqrt(shape[1]), shape)
        else:
            raise RuntimeError(f"no init rule for parameter {name}")
        new[name] = torch.from_numpy(np.asarray(w, dtype=np.float32))
    missing, unexpected = model.load_state_dict(new, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if model.config.tie_word_embeddings:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def build(name, cls_name, model_cls_name, overrides, seed):
    torch.manual_seed(seed)
    cfg = make_config(cls_name, overrides)
    model = getattr(transformers, model_cls_name)(cfg)
    init_weights(model, seed, EMBED_STD.get(name, 1.0))
    model.eval()
    return model


@torch.no_grad()
def last_logits(model, prompts):
    return np.stack([model(torch.tensor([p])).logits[0, -1].float().numpy() for p in prompts])


@torch.no_grad()
def greedy(model, prompt, n):
    ids = list(prompt)
    out, margins, maxabs = [], [], []
    for _ in range(n):
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        top = torch.topk(logits, 2)
        tok = int(top.indices[0])
        out.append(tok)
        margins.append(float(top.values[0] - top.values[1]))
        maxabs.append(float(logits.abs().max()))
        ids.append(tok)
    return out, margins, maxabs


def safe_prefix(margins, maxabs):
    """Number of leading greedy steps whose margin clears the comparison threshold."""
    n = 0
    for m, a in zip(margins, maxabs):
        if m <= GREEDY_MARGIN_FACTOR * REL_TOL * a:
            break
        n += 1
    return n


def variants(name, model):
    """Feature-off variants: name -> model with the feature switched off."""
    cfg = model.config
    out = {}

    def with_config(**changes):
        c = copy.deepcopy(cfg)
        for k, v in changes.items():
            setattr(c, k, v)
        m = type(model)(c)
        m.load_state_dict(model.state_dict(), strict=False)
        if c.tie_word_embeddings:
            m.tie_weights()
        m.eval()
        return m

    def with_weights(fn):
        m = copy.deepcopy(model)
        with torch.no_grad():
            fn(m)
        return m

    if name == "llama":
        out["lm_head_tied_to_embedding"] = with_weights(
            lambda m: m.lm_head.weight.copy_(m.model.embed_tokens.weight))
    elif name == "llama_tied":
        def untie(m):
            rng = np.random.default_rng(999)
            w = torch.from_numpy(rng.normal(0, 1.0, tuple(m.lm_head.weight.shape)).astype(np.float32))
            m.lm_head.weight = torch.nn.Parameter(w)
        out["separate_random_lm_head"] = with_weights(untie)
    elif name in ("llama3_rope", "llama_linear_rope"):
        out["rope_scaling_off"] = with_config(rope_scaling=None)
        if name == "llama3_rope":
            # An implementation that treated llama3 scaling as plain linear scaling must fail too.
            out["rope_scaling_as_linear"] = with_config(rope_scaling={"rope_type": "linear",
                                                                      "factor": 8.0})
    elif name == "mistral_swa":
        out["sliding_window_off"] = with_config(sliding_window=None)
        # Off-by-one in the window bound must be visible as well.
        out["sliding_window_plus_one"] = with_config(sliding_window=cfg.sliding_window + 1)
    elif name == "qwen2":
        def zero_bias(m):
            for layer in m.model.layers:
                for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    p.bias.zero_()
        out["qkv_bias_zeroed"] = with_weights(zero_bias)
    elif name == "qwen3":
        def ones(m):
            for layer in m.model.layers:
                layer.self_attn.q_norm.weight.fill_(1.0)
                layer.self_attn.k_norm.weight.fill_(1.0)
        out["qk_norm_weights_ones"] = with_weights(ones)

        def removed(m):
            for layer in m.model.layers:
                layer.self_attn.q_norm = torch.nn.Identity()
                layer.self_attn.k_norm = torch.nn.Identity()
        out["qk_norm_removed"] = with_weights(removed)
    else:
        raise RuntimeError(f"no feature variants for {name}")
    return out


def fmt(x):
    return float(f"{float(x):.8g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "fixtures", "tiny"))
    ap.add_argument("--only", nargs="*", help="generate only these models")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "python": platform.python_version(),
    }
    failures = []
    for name, cfg_cls, model_cls, overrides, seed in spec_list():
        if args.only and name not in args.only:
            continue
        model = build(name, cfg_cls, model_cls, overrides, seed)

        # Prompts: random ids, re-drawn (next seed) if greedy hits a near-tie too early.
        prompts, greedy_ids, greedy_margins, greedy_maxabs = [], [], [], []
        vocab = model.config.vocab_size
        for i, length in enumerate(PROMPT_LENGTHS):
            for attempt in range(100):
                rng = np.random.default_rng([seed, i, attempt])
                prompt = [int(t) for t in rng.integers(3, vocab, size=length)]
                ids, margins, maxabs = greedy(model, prompt, GREEDY_TOKENS)
                if safe_prefix(margins, maxabs) >= MIN_COMPARED_TOKENS:
                    break
            else:
                raise RuntimeError(f"{name}: no well-conditioned prompt of length {length}")
            prompts.append(prompt)
            greedy_ids.append(ids)
            greedy_margins.append(margins)
            greedy_maxabs.append(maxabs)

        ref = last_logits(model, prompts)
        tol = REL_TOL * np.abs(ref).max(axis=1)  # per prompt
        deltas = {}
        for vname, vmodel in variants(name, model).items():
            alt = last_logits(vmodel, prompts)
            diff = np.abs(alt - ref).max(axis=1)
            ratio = float((diff / tol).max())
            deltas[vname] = {"max_abs_delta": fmt(diff.max()), "tolerance": fmt(tol.max()),
                             "ratio": fmt(ratio),
                             "per_prompt_ratio": [fmt(r) for r in diff / tol]}
            status = "ok" if ratio >= MIN_FEATURE_RATIO else "TOO SMALL"
            print(f"{name:18s} {vname:28s} delta/tol = {ratio:10.1f}  {status}")
            if ratio < MIN_FEATURE_RATIO:
                failures.append(f"{name}: switching off {vname} moves logits only {ratio:.1f}x "
                                f"the tolerance (need >= {MIN_FEATURE_RATIO})")

        # Round-trip check: the saved checkpoint reproduces the reference. Not bit-exact: torch's
        # CPU GEMV results can differ in the last bits with the weights' memory alignment
        # (seen: 4e-6 absolute, ~2e-7 relative, on 1-token prompts), far below REL_TOL.
        out_dir = os.path.join(args.out, name)
        os.makedirs(out_dir, exist_ok=True)
        model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False)
        model.save_pretrained(out_dir, safe_serialization=True)
        reloaded = getattr(transformers, model_cls).from_pretrained(
            out_dir, dtype=torch.float32, attn_implementation="eager").eval()
        rt = np.abs(last_logits(reloaded, prompts) - ref).max(axis=1) / np.abs(ref).max(axis=1)
        if rt.max() > 1e-6:
            failures.append(f"{name}: reloaded checkpoint differs from the reference by "
                            f"{rt.max():.2e} x max|logit|")

        reference = {
            "model": name,
            "architecture": model_cls,
            "prompts": prompts,
            "last_logits": [[fmt(v) for v in row] for row in ref],
            "greedy": greedy_ids,
            "greedy_margins": [[fmt(v) for v in row] for row in greedy_margins],
            "greedy_max_abs": [[fmt(v) for v in row] for row in greedy_maxabs],
            "feature_deltas": deltas,
            "tolerance": {"rel_to_max_abs": REL_TOL, "greedy_margin_factor": GREEDY_MARGIN_FACTOR,
                          "min_compared_tokens": MIN_COMPARED_TOKENS,
                          "min_feature_ratio": MIN_FEATURE_RATIO},
            "reference": "transformers fp32, attn_implementation=eager, no KV cache "
                         "(full recompute per greedy step), EOS ignored",
            "versions": versions,
        }
        with open(os.path.join(out_dir, "reference.json"), "w") as f:
            json.dump(reference, f, separators=(",", ":"))
            f.write("\n")
        size = sum(os.path.getsize(os.path.join(out_dir, x)) for x in os.listdir(out_dir))
        print(f"{name:18s} wrote {out_dir} ({size / 1e6:.2f} MB), "
              f"min safe greedy prefix {min(safe_prefix(m, a) for m, a in zip(greedy_margins, greedy_maxabs))}")
        if size > 5e6:
            failures.append(f"{name}: fixture is {size / 1e6:.1f} MB (limit 5 MB)")

    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
