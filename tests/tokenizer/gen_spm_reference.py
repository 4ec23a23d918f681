#!/usr/bin/env python3
"""Writes the SentencePiece-style BPE reference fixtures (Llama 2 tokenizer.json) from Hugging Face
`tokenizers`, over llama.cpp's test strings plus a varied corpus (scripts, code, emoji, whitespace
runs, digits, special tokens inside text, characters that need byte fallback):

  llama2_hf.inp                    the texts (separated by the __ggml_vocab_test__ line)
  llama2_hf.out                    ids, add_special_tokens=False
  llama2_hf_bos.out                ids, add_special_tokens=True (BOS from the post-processor)
  llama2_hf_decode.inp / .out      decode(ids with BOS, skip_special_tokens=False) / those ids
  llama2_hf_decode_skip.inp / .out decode(..., skip_special_tokens=True) / those ids
  spm_metaspace_<variant>.out      ids, add_special_tokens=False, for the same vocabulary with
                                   the Prepend+Replace normalizer swapped for a Metaspace
                                   pre-tokenizer (variants below; the C++ test makes the same
                                   edit to the JSON)

usage: /opt/refenv/bin/python gen_spm_reference.py SHARED_TOKENIZER_DATA"""
import json
import os
import sys

from tokenizers import Tokenizer

SEP = "\n__ggml_vocab_test__\n"
EXTRA = [
    "",
    "Hello",
    " leading space",
    "trailing space ",
    "\u2581already\u2581metaspace \u2581",
    "The quick brown fox jumps over the lazy dog. 1234567890 3.14159 -42 1e-9 0x1F",
    "Ünïcödé: Grüße aus Köln, ça va? ¿Qué tal? Ærøskøbing Żółć",
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε. Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "日本語のテキスト：ひらがな、カタカナ、漢字。東京タワー",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم. هذا نص عربي.",
    "שלום עולם",
    "नमस्ते दुनिया। यह हिंदी है।",
    "สวัสดีชาวโลก ภาษาไทย",
    "ሰላም ዓለም ᚠᚢᚦᚨᚱᚲ ꧋ꦲꦤ",
    "Emoji: 😀😃🦙🔥 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇫🇷🇯🇵 ❤️",
    "Math: ∀x∈ℝ, ∃y: x²+y²≥0 ∑∫∂ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\\n\"}}",
    "<html><body class=\"main\">&nbsp;&amp;</body></html>",
    "                    twenty spaces",
    "tabs\t\t\tand\n\n\n\nnewlines\r\n\r\nCRLF",
    "  \n  \t  \n",
    "1 22 333 4444 55555 666666 7777777 88888888 999999999",
    "<s>Hello</s>",
    "Hello <s> world </s> again <unk> end",
    "<s><s></s>",
    " <s> leading and trailing </s> ",
    "a<s>b",
    "\x01\x02\x7f control \x1b[0m",
    "\u200b zero\u200dwidth \ufeff bom",
    "ﬁ ligature ① circled Ⅳ roman ｆｕｌｌｗｉｄｔｈ",
]
METASPACE_VARIANTS = {
    # name: Metaspace pre-tokenizer JSON (decoder made to match)
    "first": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
              "split": False},
    "always_split": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                     "split": True},
}


def write_texts(path, texts):
    with open(path, "w", encoding="utf-8", newline="") as f:
        for t in texts:
            f.write(t + SEP)


def write_ids(path, all_ids):
    with open(path, "w", encoding="utf-8", newline="") as f:
        for ids in all_ids:
            f.write("".join(" " + str(i) for i in ids) + "\n")


def metaspace_json(base, pre):
    j = json.loads(json.dumps(base))
    j["normalizer"] = None
    j["pre_tokenizer"] = pre
    j["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                    "prepend_scheme": pre["prepend_scheme"], "split": pre["split"]}
    return j


def main():
    shared = sys.argv[1]
    base = open(os.path.join(shared, "gguf-vocab", "ggml-vocab-llama-spm.gguf.inp"),
                encoding="utf-8").read().split(SEP)[:-1]
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(shared, "hf", "llama2", "tokenizer.json")
    tok = Tokenizer.from_file(path)
    texts = base + EXTRA
    write_texts(os.path.join(here, "llama2_hf.inp"), texts)
    plain = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    with_bos = [tok.encode(t, add_special_tokens=True).ids for t in texts]
    write_ids(os.path.join(here, "llama2_hf.out"), plain)
    write_ids(os.path.join(here, "llama2_hf_bos.out"), with_bos)
    for suffix, skip in (("decode", False), ("decode_skip", True)):
        write_texts(os.path.join(here, "llama2_hf_" + suffix + ".inp"),
                    [tok.decode(ids, skip_special_tokens=skip) for ids in with_bos])
        write_ids(os.path.join(here, "llama2_hf_" + suffix + ".out"), with_bos)
    base_json = json.load(open(path, encoding="utf-8"))
    for name, pre in METASPACE_VARIANTS.items():
        variant = Tokenizer.from_str(json.dumps(metaspace_json(base_json, pre)))
        write_ids(os.path.join(here, "spm_metaspace_" + name + ".out"),
                  [variant.encode(t, add_special_tokens=False).ids for t in texts])


if __name__ == "__main__":
    main()
