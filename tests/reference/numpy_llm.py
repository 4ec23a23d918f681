"""A small float64 NumPy implementation of the supported decoder architectures.

Not a product component: it exists to test the test harness. tests/reference/fake_build/tools/
holds stand-in `llmc`/`llmrt` executables built on it that speak the real CLI, so
  LLMC_BUILD_DIR=tests/reference/fake_build pytest tests/e2e
must pass, and with LLMC_FAKE_BREAK=<feature> (bias, qk_norm, window, rope_scaling, tie, gqa)
the matching e2e test must fail. It reads only config.json + model.safetensors (parsed by hand,
numpy only) -- or a llama GGUF (needs the `gguf` package) -- and follows runtime/plan/PROGRAM.md.
"""

import json
import os
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw[base + a:base + b].tobytes(), dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).astype(np.float64)
    return out


def inv_freq(cfg, head_dim, broken):
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if "rope_scaling" in broken or kind == "default":
        return inv
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        orig = rs["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        smooth = (orig / wavelen - lo) / (hi - lo)
        mixed = (1 - smooth) * inv / factor + smooth * inv
        return np.where(wavelen > orig / lo, inv / factor,
                        np.where(wavelen < orig / hi, inv, mixed))
    raise ValueError(f"unsupported rope_type {kind}")


def rope(x, pos, inv, style="neox"):
    # x [T, H, hd]; "neox": rotate halves (HF layout), "interleaved": rotate pairs (GGUF llama)
    ang = pos[:, None].astype(np.float64) * inv[None, :]  # [T, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if style == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x2 * cos + x1 * sin
        return out
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


_GGUF_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def read_gguf_llama(path):
    """(config, weights in HF naming) of a llama-architecture GGUF, dequantized (needs `gguf`)."""
    import gguf

    r = gguf.GGUFReader(path)
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    if f["general.architecture"] != "llama":
        raise ValueError("only llama GGUF files")
    cfg = {"architectures": ["LlamaForCausalLM"], "num_attention_heads":
           f["llama.attention.head_count"], "num_key_value_heads": f["llama.attention.head_count_kv"],
           "hidden_size": f["llama.embedding_length"], "num_hidden_layers": f["llama.block_count"],
           "rms_norm_eps": f["llama.attention.layer_norm_rms_epsilon"],
           "rope_theta": f.get("llama.rope.freq_base", 10000.0),
           "vocab_size": len(f["tokenizer.ggml.tokens"]),
           "eos_token_id": f.get("tokenizer.ggml.eos_token_id"), "rope_style": "interleaved"}
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        parts = t.name.split(".")
        if parts[0] == "blk":
            name = f"model.layers.{parts[1]}.{_GGUF_NAMES[parts[2]]}.weight"
        else:
            name = {"token_embd.weight": "model.embed_tokens.weight", "output.weight":
                    "lm_head.weight", "output_norm.weight": "model.norm.weight"}[t.name]
        w[name] = a
    cfg["tie_word_embeddings"] = "lm_head.weight" not in w
    return cfg, w


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


class Model:
    def __init__(self, model_path):
        if os.path.isdir(model_path):
            with open(os.path.join(model_path, "config.json")) as f:
                self.cfg = json.load(f)
            self.w = read_safetensors(os.path.join(model_path, "model.safetensors"))
        else:
            self.cfg, self.w = read_gguf_llama(model_path)
        self.rope_style = self.cfg.get("rope_style", "neox")
        self.broken = set(filter(None, os.environ.get("LLMC_FAKE_BREAK", "").split(",")))
        c = self.cfg
        self.H, self.Hkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps = c["rms_norm_eps"]
        self.inv = inv_freq(c, self.hd, self.broken)
        arch = c["architectures"][0]
        self.window = 0
        if arch.startswith("Mistral") and c.get("sliding_window"):
            self.window = c["sliding_window"]
        if "window" in self.broken:
            self.window = 0
        self.vocab = c["vocab_size"]

    def forward(self, ids):
        """Logits [len(ids), vocab] of one sequence (full causal recompute)."""
        w, T, H, Hkv, hd = self.w, len(ids), self.H, self.Hkv, self.hd
        pos = np.arange(T)
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        mask = pos[None, :] <= pos[:, None]
        if self.window:
            mask &= pos[None, :] > pos[:, None] - self.window
        for l in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{l}."
            h = rms(x, w[p + "input_layernorm.weight"], self.eps)
            proj = {}
            for n in "qkv":
                y = h @ w[p + f"self_attn.{n}_proj.weight"].T
                bias = w.get(p + f"self_attn.{n}_proj.bias")
                if bias is not None and "bias" not in self.broken:
                    y = y + bias
                proj[n] = y.reshape(T, -1, hd)
            q, k, v = proj["q"], proj["k"], proj["v"]
            if p + "self_attn.q_norm.weight" in w and "qk_norm" not in self.broken:
                q = rms(q, w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms(k, w[p + "self_attn.k_norm.weight"], self.eps)
            q = rope(q, pos, self.inv, self.rope_style)
            k = rope(k, pos, self.inv, self.rope_style)
            out = np.empty((T, H, hd))
            group = H // Hkv
            for hh in range(H):
                kv = hh % Hkv if "gqa" in self.broken else hh // group
                s = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
                s = np.where(mask, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                out[:, hh] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kv]
            x = x + out.reshape(T, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = rms(x, w[p + "post_attention_layernorm.weight"], self.eps)
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
        x = rms(x, w["model.norm.weight"], self.eps)
        tied = self.cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in w
        if "tie" in self.broken:
            tied = not tied
        head = w["model.embed_tokens.weight"] if tied else w.get("lm_head.weight")
        if head is None:  # "tie" broken on a tied model: no separate head exists; use a wrong one
            head = w["model.embed_tokens.weight"][::-1].copy()
        return x @ head.T
