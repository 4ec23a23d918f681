"""Hugging Face transformers decode speed on the same shapes as the llmrt GPU bench
(tools/gpu/run_checks.sh): a LlamaForCausalLM built from config.json with random bf16 weights on
the GPU (nothing is downloaded), decode tok/s at each batch size, eager and with a static KV cache
under torch.compile.

    hf_decode_bench.py config.json --batch 1,32 --tokens 64 [--modes eager,compiled] [--json out.json]
"""
import argparse
import json
import time

import torch
from transformers import AutoConfig, LlamaForCausalLM


def decode_rate(model, batch, tokens, prompt=128, **gen):
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device="cuda")
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, **gen)
    model.generate(ids, **dict(kw, max_new_tokens=4, min_new_tokens=4))  # warm-up (and compile)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(ids, **dict(kw, max_new_tokens=1, min_new_tokens=1))
    torch.cuda.synchronize()
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.generate(ids, **kw)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    return batch * (tokens - 1) / max(total - prefill, 1e-9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--json")
    a = ap.parse_args()
    modes = a.modes.split(",")
    cfg = AutoConfig.from_pretrained(a.config)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.generation_config.pad_token_id = 0
    out = {}
    for b in [int(x) for x in a.batch.split(",")] if "eager" in modes else []:
        out[f"eager_b{b}"] = decode_rate(model, b, a.tokens)
        print(f"transformers eager bf16 batch {b}: {out[f'eager_b{b}']:.1f} tok/s", flush=True)
        if a.json:  # written as it goes: a later mode may run out of time
            json.dump(out, open(a.json, "w"), indent=1)
    if "compiled" not in modes:
        return
    try:
        # mode "default": Inductor kernels without CUDA graphs. "reduce-overhead" (graphs) crashed
        # in transformers 5.17's static cache on the GPU check's machine (a segfault after
        # cudagraph_mark_step_begin; before it, the graph's outputs were overwritten).
        model.forward = torch.compile(model.forward, mode="default", fullgraph=True)
        for b in [int(x) for x in a.batch.split(",")]:
            out[f"compiled_static_b{b}"] = decode_rate(model, b, a.tokens, cache_implementation="static")
            print(f"transformers compiled static-cache bf16 batch {b}: {out[f'compiled_static_b{b}']:.1f} tok/s",
                  flush=True)
            if a.json:
                json.dump(out, open(a.json, "w"), indent=1)
    except Exception as e:  # torch.compile needs a working toolchain on the machine
        print(f"transformers compiled: skipped ({type(e).__name__}: {e})")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
