#!/usr/bin/env python3
"""Reference pre-tokenizer splits for every family in runtime/tokenizer/pre_tokenizer.cc.

For each family this script holds the `pre_tokenizer` section of a tokenizer.json (Hugging Face
format), loads it into the Hugging Face `tokenizers` library (its own Rust implementation, with
Oniguruma regexes), runs `pre_tokenize_str` on a varied corpus and writes the pieces, in
ByteLevel's mapped form, to tests/fixtures/pretok/pretokenizer_vectors.json. The C++ test
tests/tokenizer/pre_tokenizer_table_test.cc splits the same corpus with our PCRE2 table, maps the
pieces the same way, and compares.

Rerun (from the repository root) with any Python that has `tokenizers` (0.19 or newer):

    /opt/refenv/bin/python tests/reference/gen_pretokenizer_vectors.py
    # or: python3 -m venv /tmp/v && /tmp/v/bin/pip install tokenizers && /tmp/v/bin/python ...

Where the configs come from. `source` says, per family, which model repository's tokenizer.json
the section follows. The sections were written down from those files as published (and from the
"original regex from tokenizer.json" notes in llama.cpp's src/llama-vocab.cpp); no file was
downloaded when this was written, so a family marked "llama.cpp list" follows llama.cpp's regex
list for that tokenizer.ggml.pre name, converted to Split steps, rather than a checked
tokenizer.json.
"""
import json
import os
import sys

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "pretok", "pretokenizer_vectors.json")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
            "invert": False}


def digits(individual):
    return {"type": "Digits", "individual_digits": individual}


def seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


CI = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
LLAMA3 = CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = CI + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
JAIS2 = (CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
         r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + UPPER + "*" + LOWER + r"+|[^\r\n\p{L}\p{N}]?" + UPPER + "+" +
          LOWER + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?" + UPPER + "*" + LOWER + "+" + CI + r"?|[^\r\n\p{L}\p{N}]?" + UPPER +
         "+" + LOWER + "*" + CI + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
YOUTU = (r"[^\r\n\p{L}\p{N}]?" + UPPER + "*" + LOWER + "+" + CI + r"?|[^\r\n\p{L}\p{N}]?" + UPPER +
         "+" + LOWER + "*" + CI + r"?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
YOUTU_CJK = ("[\uac00-\ud7a3\u3131-\u318e]+"
             "|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
             "|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")
DSV3_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DSV3_WORDS = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
              r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPARK_WORDS = (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
               r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
# deepseek-llm's letter class, by code point (cased letters of many scripts).
_DS_LETTER_RANGES = """41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376-377
37B-37D 37F 386 388-38A 38C 38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD
1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D
1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3
1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128
212A-212D 212F-2134 2139 213C-213F 2145-2149 214E 2183-2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE
2CF2-2CF3 A640-A66D A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17
FF21-FF3A FF41-FF5A 10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF
1E900-1E943"""


def _class_from_ranges(text):
    out = ""
    for item in text.split():
        ends = [chr(int(x, 16)) for x in item.split("-")]
        out += ends[0] if len(ends) == 1 else ends[0] + "-" + ends[1]
    return out


DS_LETTERS = r"\s?[" + _class_from_ranges(_DS_LETTER_RANGES) + "]+"
DS_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
DS_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
BLOOM = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"  # nested class, as written
BAILING = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
SEED_CODER = CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
EXAONE_MOE = (CI + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# family (canonical name in pre_tokenizer.cc) -> (source, pre_tokenizer section)
FAMILIES = {
    "gpt2": ("openai-community/gpt2", byte_level(True)),
    "llama3": ("meta-llama/Meta-Llama-3-8B", seq(split(LLAMA3), byte_level(False))),
    "dbrx": ("databricks/dbrx-base; abacusai/Smaug-Llama-3-70B-Instruct",
             seq(split(LLAMA3), byte_level(False))),
    "jais-2": ("llama.cpp list (jais-2, its original tokenizer.json regex)",
               seq(split(JAIS2), byte_level(False))),
    "qwen2": ("Qwen/Qwen2-7B; deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
              seq(split(QWEN2), byte_level(False))),
    "qwen35": ("llama.cpp list (qwen35, its original tokenizer.json regex)",
               seq(split(QWEN35), byte_level(False))),
    "smollm": ("HuggingFaceTB/SmolLM-135M; bigcode/starcoder2-3b",
               seq(digits(True), byte_level(True))),
    "deepseek-llm": ("deepseek-ai/deepseek-llm-7b-base",
                     seq(split(r"[\r\n]"), split(DS_LETTERS), split(DS_PUNCT), split(r"\s+$"),
                         split(DS_CJK), digits(False), byte_level(False))),
    "deepseek-coder": ("deepseek-ai/deepseek-coder-6.7b-base",
                       seq(split(r"[\r\n]"), split(r"\s?\p{L}+"), split(r"\s?\p{P}+"),
                           split(DS_CJK), digits(True), byte_level(False))),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3",
                    seq(split(r"\p{N}{1,3}"), split(DSV3_CJK), split(DSV3_WORDS), byte_level(False))),
    "spark2_5": ("llama.cpp list (spark2_5)",
                 seq(split(r"\p{N}{1,3}"), split(DSV3_CJK), split(SPARK_WORDS), digits(True),
                     byte_level(False))),
    "youtu": ("llama.cpp list (youtu)", seq(split(YOUTU_CJK), split(YOUTU), byte_level(False))),
    "falcon": ("tiiuae/falcon-7b",
               seq({"type": "Punctuation", "behavior": "Contiguous"}, byte_level(True),
                   digits(False), split("[0-9][0-9][0-9]"))),
    "bloom": ("bigscience/bloom; TurkuNLP/gpt3-finnish-small", seq(split(BLOOM), byte_level(False))),
    "viking": ("llama.cpp list (viking: LumiOpen/Viking-7B)",
               seq(split(BLOOM), digits(True), byte_level(False))),
    "tekken": ("mistralai/Mistral-Nemo-Base-2407", seq(split(TEKKEN), byte_level(False))),
    "chameleon": ("facebook/chameleon-7b (as llama.cpp lists it)",
                  seq(split(r"<sentinel:[0-9]+>"), split(r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"),
                      split("([\t\n]|    |  )"), digits(True),
                      {"type": "Punctuation", "behavior": "Isolated"}, byte_level(True))),
    "gpt-4o": ("Xenova/gpt-4o", seq(split(GPT4O), byte_level(False))),
    "tiny_aya": ("llama.cpp list (tiny_aya, its original tokenizer.json regexes)",
                 seq(split(r"\d{1,3}(?=(?:\d{3})*\b)"), split(GPT4O), byte_level(False))),
    "superbpe": ("llama.cpp list (superbpe: UW/OLMo2-8B-SuperBPE-t180k)",
                 seq(split(r"\p{N}+"), split(r"(?=(\d{3})+(?!\d))"), byte_level(False))),
    "bailingmoe": ("inclusionAI/Ling-lite", seq(split(BAILING), byte_level(False))),
    "seed-coder": ("ByteDance-Seed/Seed-Coder-8B-Base", seq(split(SEED_CODER), byte_level(False))),
    "ufakzeka": ("llama.cpp list (ufakzeka)", seq(split(UFAKZEKA), byte_level(False))),
    "exaone-moe": ("llama.cpp list (exaone-moe, its original tokenizer.json regex)",
                   seq(split(EXAONE_MOE), byte_level(False))),
    "minicpm5": ("openbmb/MiniCPM5-1B (as llama.cpp lists it)",
                 seq(split(r"\p{N}{1,3}"), split(MINICPM5), byte_level(False))),
    "laguna": ("llama.cpp list (laguna)",
               seq(split(r"[^\n]+|[\n]+"), split(QWEN2), byte_level(False))),
}

CORPUS = [
    "Hello world",
    "Hello world's  end!!\n\n",
    "I'M here, we'll see. They'RE 'd 've 'll it's IT'S",
    "x'ſ y",
    "   leading and trailing   ",
    "tabs\tand\t\tmore\ttabs\n\tindent",
    "line1\nline2\r\nline3\n\n\nline4\r\r",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "a1b22c333d4444 3.14159 -42 +7 1,000,000 v2.0.1",
    "123456abc 1234567_x 12345\u00b2 9876543210.5 \u0663\u0664\u0665\u0666\u0667 x1234 12\u0301345",
    "Café naïve résumé Ångström façade São Paulo",
    "Привет, мир! Как дела? Ёжик в тумане 2024",
    "日本語のテキストです。東京タワー、カタカナ",
    "中文文本：你好，世界！这是一个测试。",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم، هذا اختبار ٣٤٥٦۔",
    "नमस्ते दुनिया। यह परीक्षण है १२३४",
    "emoji 😀😃 👍🏽 family 👨‍👩‍👧 flags 🇫🇷!",
    "def f(x):\n    return x**2 + 1  # comment\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }",
    "if x == 'a' and y != \"b\": print(f\"{x!r}\")",
    "<html><body class=\"main\">Hi &amp; bye</body></html>",
    "snake_case camelCaseWord HTTPServer getHTTPResponseCode XMLHttpRequest",
    "$100 +5% a<b>=c ^2 `code` a|b ~x @user #tag",
    "«Quoted» —dash— ‘single’ “double” …ellipsis",
    "mixed Ελληνικά and Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ ＡＢＣ",
    "superscripts x² y³ ¹ ½ ¼ ¾ Ⅷ ①",
    "nbsp\u00a0here and\u2003em\u3000ideographic",
    "<sentinel:12> IMGIMGABCZ text",
    "a  b   c    d     e",
    "end with spaces   \n   ",
    "combining e\u0301 and n\u0303o",
]


def to_mapped(pieces):
    return [p for p, _ in pieces]


def main():
    out = {
        "generator": "tests/reference/gen_pretokenizer_vectors.py",
        "tokenizers_version": __import__("tokenizers").__version__,
        "corpus": CORPUS,
        "families": {},
    }
    for name, (source, section) in FAMILIES.items():
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
               "normalizer": None, "pre_tokenizer": section, "post_processor": None,
               "decoder": None,
               "model": {"type": "BPE", "dropout": None, "unk_token": None,
                         "continuing_subword_prefix": None, "end_of_word_suffix": None,
                         "fuse_unk": False, "byte_fallback": False, "vocab": {}, "merges": []}}
        tok = Tokenizer.from_str(json.dumps(doc))
        pre = tok.pre_tokenizer
        splits = [to_mapped(pre.pre_tokenize_str(text)) for text in CORPUS]
        out["families"][name] = {"source": source, "pre_tokenizer": section, "pieces": splits}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: {len(FAMILIES)} families x {len(CORPUS)} strings, "
          f"{os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
