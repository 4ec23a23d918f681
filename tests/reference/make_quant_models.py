#!/usr/bin/env python3
"""GPTQ and AWQ checkpoints of a tiny Llama, made by the reference packers, + reference outputs.

Writes tests/fixtures/quant/<name>/ (see FIXTURES):
  config.json, model.safetensors   the packer's own output (save()/save_quantized()), unchanged
  packer_dequant.safetensors       F32: for every quantized linear X, "X.weight" = rows
                                   dequant_rows() of the packer's dequantization of X ([out, in]
                                   order), computed by the packer's code with f32 scales (exact:
                                   scale * (q - zero) needs <= 20 significant bits)
  reference.json                   prompts, last_logits, greedy tokens/margins/max_abs of the fp32
                                   transformers Llama (eager) whose quantized linears hold the
                                   packer's dequantized weights (all rows) and whose other tensors
                                   are the checkpoint's f16 tensors widened to f32; also
                                   packer_last_logits: the packer's own quantized modules run on
                                   CPU (their f16 dequant + matmul), for information only.

Each packer lives in its own venv (they pin incompatible transformers versions):
  GPTQ: /opt/gptqenv  (tests/reference/requirements-gptq.txt)   --packer gptq
  AWQ:  /opt/awqenv   (tests/reference/requirements-awq.txt)    --packer awq
Both quantize on CPU. Calibration data: random token ids (no tokenizer, no download).

Usage:
  /opt/gptqenv/bin/python tests/reference/make_quant_models.py --packer gptq
  /opt/awqenv/bin/python  tests/reference/make_quant_models.py --packer awq
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile

import numpy as np
import torch

# GPTQModel sizes its CPU thread pool from the core count; its model loader needs 2 workers.
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "tests", "fixtures", "quant")

GROUP = 32
PROMPT_LENGTHS = [1, 5, 13, 24]
GREEDY_TOKENS = 16
REL_TOL = 1e-4

# hidden 64, intermediate 96: every in_features (64, 96) is a multiple of the group size 32 and
# every out_features (32, 64, 96) a multiple of 32 (GPTQModel's pack_block needs that).
CONFIG = dict(
    vocab_size=128,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=96,
    max_position_embeddings=128,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    attention_dropout=0.0,
)

FIXTURES = {
    # name: packer, settings, seed
    "gptq_4bit_sym": ("gptq", dict(bits=4, sym=True, desc_act=False), 301),
    "gptq_4bit_asym": ("gptq", dict(bits=4, sym=False, desc_act=False), 302),
    "gptq_8bit_sym": ("gptq", dict(bits=8, sym=True, desc_act=False), 303),
    "gptq_4bit_desc_act": ("gptq", dict(bits=4, sym=True, desc_act=True), 304),
    "awq_4bit_gemm": ("awq", dict(bits=4, zero_point=True, version="GEMM"), 305),
}

# AutoAWQ's clip search needs out_features % 64 == 0 (quantizer._compute_best_clip): head_dim 32
# makes k/v 64 wide (q 128, o_proj in 128), and the MLP 128 wide.
CONFIG_OVERRIDES = {"awq_4bit_gemm": dict(head_dim=32, intermediate_size=128)}

LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def linear_names():
    return [f"model.layers.{l}.{m}" for l in range(CONFIG["num_hidden_layers"]) for m in LINEARS]


def dequant_rows(out_features):
    """Rows kept in packer_dequant.safetensors: the first 8 and the last 8 (one packed zero-point
    word each, all 8 AWQ interleave positions), every input column."""
    return list(range(8)) + list(range(out_features - 8, out_features))


def make_fp_model(seed, path, config):
    """fp32 tiny Llama with numpy-drawn weights (as make_tiny_models.py), saved to path."""
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**config)
    model = transformers.LlamaForCausalLM(cfg)
    rng = np.random.default_rng(seed)
    sd = model.state_dict()
    new = {}
    for name in sorted(sd):
        shape = tuple(sd[name].shape)
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = rng.uniform(0.8, 1.2, shape)
        elif "embed_tokens" in name:
            w = rng.normal(0.0, 1.0, shape)
        elif name == "lm_head.weight":
            w = rng.normal(0.0, 0.5, shape)
        elif name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
            w = rng.normal(0.0, 0.2, shape)
        elif name.endswith("_proj.weight"):
            w = rng.normal(0.0, 1.0 / np.sqrt(shape[1]), shape)
        else:
            raise RuntimeError(f"no init rule for {name}")
        new[name] = torch.from_numpy(np.asarray(w, dtype=np.float32))
    model.load_state_dict(new)
    model.eval()
    model.save_pretrained(path, safe_serialization=True)
    write_tokenizer(path)
    return model


def write_tokenizer(path):
    """A word-level tokenizer over "t0".."t127" (the packers' loaders want one; nothing here
    tokenizes text: calibration and prompts are token ids)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {f"t{i}": i for i in range(CONFIG["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2",
                                   unk_token="t0", pad_token="t0")
    fast.save_pretrained(path)


def calibration_ids(seed, n=32, length=48):
    rng = np.random.default_rng(seed + 1000)
    return [rng.integers(3, CONFIG["vocab_size"], length).tolist() for _ in range(n)]


def prompts(seed):
    rng = np.random.default_rng(seed + 2000)
    return [rng.integers(3, CONFIG["vocab_size"], n).tolist() for n in PROMPT_LENGTHS]


# ---------------------------------------------------------------------------------------------
# GPTQ (GPTQModel)


def quantize_gptq(fp_dir, q_dir, settings, seed):
    from gptqmodel import GPTQModel, QuantizeConfig
    kwargs = dict(bits=settings["bits"], group_size=GROUP, sym=settings["sym"],
                  desc_act=settings["desc_act"],
                  offload_to_disk=False)  # else config.json records a random temp path
    if settings["desc_act"]:
        kwargs["act_group_aware"] = False  # GAR and desc_act exclude each other
    qcfg = QuantizeConfig(**kwargs)
    model = GPTQModel.load(fp_dir, qcfg, device="cpu")
    calib = [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in calibration_ids(seed)]
    model.quantize(calib, batch_size=1)
    model.save(q_dir)


def dequant_gptq(q_dir):
    """name -> f32 [out, in] by GPTQModel's own loader and dequantization.

    Loaded in float16: GPTQModel casts the scales to the model's dtype, and on CPU the default
    is bfloat16, which would round the checkpoint's f16 scales. The generic
    PackableQuantLinear.dequantize_weight (nn_modules/qlinear/__init__.py) then runs on f32
    copies of the scales: scales[g_idx] * (codes - zeros) with the v1 zeros already converted
    to v2 by the loader (utils/model.py convert_gptq_v1_to_v2_format_module)."""
    from gptqmodel import BACKEND, GPTQModel
    from gptqmodel.nn_modules.qlinear import PackableQuantLinear
    model = GPTQModel.load(q_dir, device="cpu", backend=BACKEND.TORCH, dtype=torch.float16)
    out = {}
    mods = dict(model.model.named_modules())
    for name in linear_names():
        m = mods[name]
        assert m.scales.dtype == torch.float16, m.scales.dtype
        f16 = m.scales
        m.scales = f16.to(torch.float32)
        w = PackableQuantLinear.dequantize_weight(m)  # [in, out]
        assert w.dtype == torch.float32, w.dtype
        out[name] = w.T.contiguous().numpy()
        m.scales = f16
    return out, model

@torch.no_grad()
def packer_logits_gptq(model, prompt_list):
    res = []
    for p in prompt_list:
        logits = model.model(torch.tensor([p])).logits[0, -1].float().numpy()
        res.append(logits)
    return np.stack(res)


# ---------------------------------------------------------------------------------------------
# AWQ (AutoAWQ, GEMM)


def quantize_awq(fp_dir, q_dir, settings, seed):
    from awq import AutoAWQForCausalLM
    model = AutoAWQForCausalLM.from_pretrained(fp_dir, device_map="cpu")
    quant_config = {"zero_point": settings["zero_point"], "q_group_size": GROUP,
                    "w_bit": settings["bits"], "version": settings["version"]}
    model.quantize(None, quant_config=quant_config, calib_data=calibration_ids(seed),
                   max_calib_samples=32, max_calib_seq_len=48, n_parallel_calib_samples=None)
    model.save_quantized(q_dir)


def dequant_awq(q_dir):
    """name -> f32 [out, in] by AutoAWQ's awq.utils.packing_utils.dequantize_gemm (f32 scales)."""
    from awq.utils.packing_utils import dequantize_gemm
    from safetensors.torch import load_file
    sd = load_file(os.path.join(q_dir, "model.safetensors"))
    out = {}
    for name in linear_names():
        w = dequantize_gemm(sd[name + ".qweight"], sd[name + ".qzeros"],
                            sd[name + ".scales"].to(torch.float32), 4, GROUP)  # [in, out]
        out[name] = w.to(torch.float32).T.contiguous().numpy()
    return out


@torch.no_grad()
def packer_logits_awq(q_dir, config, prompt_list):
    """AutoAWQ's WQLinear_GEMM modules on CPU, in a float16 transformers Llama. (from_quantized
    insists on intel_extension_for_pytorch on CPU, so the modules are put in place here with
    WQLinear_GEMM.from_linear(init_only=True) and the checkpoint's buffers.) Its forward takes
    the Triton path whenever triton imports, which fails on CPU tensors, so the naive path
    (dequantize_gemm in f16, then matmul) is forced by clearing TRITON_AVAILABLE."""
    import awq.modules.linear.gemm as gemm
    import transformers
    from safetensors.torch import load_file
    gemm.TRITON_AVAILABLE = False
    cfg = transformers.LlamaConfig(**config)
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg).to(torch.float16)
    sd = load_file(os.path.join(q_dir, "model.safetensors"))
    plain = {k: v.to(torch.float16) for k, v in sd.items()
             if not k.endswith((".qweight", ".qzeros", ".scales"))}
    missing, unexpected = model.load_state_dict(plain, strict=False)
    assert not unexpected and all(k[:-len(".weight")] in linear_names() for k in missing)
    for name in linear_names():
        parent, child = name.rsplit(".", 1)
        parent = model.get_submodule(parent)
        q = gemm.WQLinear_GEMM.from_linear(getattr(parent, child), 4, GROUP, init_only=True)
        q.qweight = sd[name + ".qweight"]
        q.qzeros = sd[name + ".qzeros"]
        q.scales = sd[name + ".scales"]
        setattr(parent, child, q)
    model.eval()
    res = []
    for p in prompt_list:
        res.append(model(torch.tensor([p])).logits[0, -1].float().numpy())
    return np.stack(res)


# ---------------------------------------------------------------------------------------------


def reference_model(q_dir, dequant, config):
    """fp32 eager Llama: checkpoint's float tensors widened, quantized linears = dequant."""
    import transformers
    from safetensors.torch import load_file
    cfg = transformers.LlamaConfig(**config)
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg)
    sd = load_file(os.path.join(q_dir, "model.safetensors"))
    new = {}
    for k, v in sd.items():
        if k.endswith((".qweight", ".qzeros", ".scales", ".g_idx")):
            continue
        new[k] = v.to(torch.float32)
    for name, w in dequant.items():
        new[name + ".weight"] = torch.from_numpy(w)
    missing, unexpected = model.load_state_dict(new, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model.eval()
    return model


@torch.no_grad()
def reference_outputs(model, prompt_list):
    last = []
    greedy, margins, maxabs = [], [], []
    for p in prompt_list:
        last.append(model(torch.tensor([p])).logits[0, -1].float().numpy())
        ids, g, m, a = list(p), [], [], []
        for _ in range(GREEDY_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            top = torch.topk(logits, 2)
            g.append(int(top.indices[0]))
            m.append(float(top.values[0] - top.values[1]))
            a.append(float(logits.abs().max()))
            ids.append(g[-1])
        greedy.append(g)
        margins.append(m)
        maxabs.append(a)
    return np.stack(last), greedy, margins, maxabs


def versions(packer):
    import transformers
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "transformers": transformers.__version__, "numpy": np.__version__}
    if packer == "gptq":
        import gptqmodel
        v["gptqmodel"] = gptqmodel.__version__
    else:
        import awq
        v["autoawq"] = awq.__version__
    return v


def save_dequant(path, dequant):
    from safetensors.numpy import save_file
    tensors = {}
    for name, w in dequant.items():
        tensors[name + ".weight"] = np.ascontiguousarray(w[dequant_rows(w.shape[0])],
                                                         dtype=np.float32)
    save_file(tensors, path, metadata={"rows": "first 8 and last 8 rows of [out, in]"})


def make(name, packer, settings, seed, out_root):
    out_dir = os.path.join(out_root, name)
    with tempfile.TemporaryDirectory() as tmp:
        fp_dir, q_dir = os.path.join(tmp, "fp"), os.path.join(tmp, "q")
        config = dict(CONFIG, **CONFIG_OVERRIDES.get(name, {}))
        make_fp_model(seed, fp_dir, config)
        if packer == "gptq":
            quantize_gptq(fp_dir, q_dir, settings, seed)
            dequant, qmodel = dequant_gptq(q_dir)
        else:
            quantize_awq(fp_dir, q_dir, settings, seed)
            dequant = dequant_awq(q_dir)
        plist = prompts(seed)
        ref = reference_model(q_dir, dequant, config)
        last, greedy, margins, maxabs = reference_outputs(ref, plist)
        try:
            if packer == "gptq":
                plog = packer_logits_gptq(qmodel, plist)
            else:
                plog = packer_logits_awq(q_dir, config, plist)
            pdiff = float(np.max(np.abs(plog - last)) / np.max(np.abs(last)))
        except Exception as e:  # noqa: BLE001 -- informational only
            print(f"{name}: packer forward failed: {e!r}", file=sys.stderr)
            plog, pdiff = None, None

        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, f))
        shutil.copy(os.path.join(q_dir, "config.json"), out_dir)
        shutil.copy(os.path.join(q_dir, "model.safetensors"), out_dir)
        save_dequant(os.path.join(out_dir, "packer_dequant.safetensors"), dequant)
        doc = {
            "packer": packer,
            "settings": settings,
            "group_size": GROUP,
            "seed": seed,
            "prompts": plist,
            "last_logits": last.tolist(),
            "greedy": greedy,
            "greedy_margins": margins,
            "greedy_max_abs": maxabs,
            "reference": "fp32 transformers LlamaForCausalLM (eager) with the packer's exact f32 "
                         "dequantization as the quantized linears' weights",
            "packer_last_logits": None if plog is None else plog.tolist(),
            "packer_rel_diff": pdiff,
            "tolerance": {"rel_to_max_abs": REL_TOL, "greedy_margin_factor": 10},
            "versions": versions(packer),
        }
        with open(os.path.join(out_dir, "reference.json"), "w") as f:
            json.dump(doc, f, indent=1)
        for f in os.listdir(out_dir):
            os.chmod(os.path.join(out_dir, f), 0o644)
        print(f"{name}: packer forward vs reference rel diff {pdiff}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packer", choices=["gptq", "awq"], required=True)
    ap.add_argument("--only", nargs="*", help="fixture names (default: all of this packer)")
    ap.add_argument("--out", default=OUT, help="output folder (default: tests/fixtures/quant)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, (packer, settings, seed) in FIXTURES.items():
        if packer != args.packer or (args.only and name not in args.only):
            continue
        make(name, packer, settings, seed, args.out)


if __name__ == "__main__":
    main()
