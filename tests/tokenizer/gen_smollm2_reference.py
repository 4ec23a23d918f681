#!/usr/bin/env python3
"""Writes smollm2.inp / smollm2.out: SmolLM2 reference tokenizations by Hugging Face tokenizers.

SmolLM2's tokenizer.json is a byte-level BPE with pre_tokenizer
Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)];
the vocabulary and merges are taken from the SmolLM2 GGUF (tokenizer.ggml.*), so the reference
is independent of our code. Inputs: llama.cpp's test strings plus a few chat/code/number strings.

usage: /opt/refenv/bin/python gen_smollm2_reference.py SmolLM2-135M-Instruct.Q4_1.gguf SHARED_DATA
"""
import os
import sys

import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SEP = "\n__ggml_vocab_test__\n"
EXTRA = [
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "The year 2024 had 366 days; pi = 3.14159.",
    "def f(x):\n    return x**2  # square\n\n\n",
    "   leading and trailing   ",
    "Ünïcödé façade — “quotes” and emoji 🤗🤗 ①②③ ٣٤٥",
    "don't DON'T we'll I'D",
]


def main():
    path, shared = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    types = r.fields["tokenizer.ggml.token_type"]
    types = [int(types.parts[i][0]) for i in types.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])

    base = open(os.path.join(shared, "gguf-vocab", "ggml-vocab-gpt-2.gguf.inp"),
                encoding="utf-8").read().split(SEP)[:-1]
    texts = base + EXTRA
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "smollm2.inp"), "w", encoding="utf-8", newline="") as f:
        for t in texts:
            f.write(t + SEP)
    with open(os.path.join(here, "smollm2.out"), "w", encoding="utf-8", newline="") as f:
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            f.write("".join(" " + str(i) for i in ids) + "\n")


if __name__ == "__main__":
    main()
