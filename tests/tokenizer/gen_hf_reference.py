#!/usr/bin/env python3
"""Writes {llama3,qwen3}_hf.inp / .out: reference ids from Hugging Face `tokenizers` for the
tokenizer.json files in shared data, over llama.cpp's test strings plus strings that exercise
NFC (decomposed accents, Hangul jamo), special and added tokens, numbers and whitespace.

usage: /opt/refenv/bin/python gen_hf_reference.py SHARED_TOKENIZER_DATA"""
import os
import sys

from tokenizers import Tokenizer

SEP = "\n__ggml_vocab_test__\n"
EXTRA = [
    "Cafe\u0301 na\u0308ive \u212B \u1100\u1161\u11A8 a\u0323\u0302",
    "<|im_start|>user\nSolve 12345+678<|im_end|>\n<|im_start|>assistant\n<think>\n</think>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHi<|eot_id|>",
    "  tabs\tand\r\nCRLF\r\n\r\n  end  ",
    "I'M SHOUTING 'S 'T 'Ve we'LL",
    "\u00e9\u0301 \u1e9b\u0323 \u0958 \uf900",
]


def main():
    shared = sys.argv[1]
    base = open(os.path.join(shared, "gguf-vocab", "ggml-vocab-gpt-2.gguf.inp"),
                encoding="utf-8").read().split(SEP)[:-1]
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ["llama3", "qwen3"]:
        tok = Tokenizer.from_file(os.path.join(shared, "hf", name, "tokenizer.json"))
        texts = base + EXTRA
        with open(os.path.join(here, name + "_hf.inp"), "w", encoding="utf-8", newline="") as f:
            for t in texts:
                f.write(t + SEP)
        with open(os.path.join(here, name + "_hf.out"), "w", encoding="utf-8", newline="") as f:
            for t in texts:
                ids = tok.encode(t, add_special_tokens=False).ids
                f.write("".join(" " + str(i) for i in ids) + "\n")


if __name__ == "__main__":
    main()
