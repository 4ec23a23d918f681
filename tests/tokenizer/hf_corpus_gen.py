#!/usr/bin/env python3
"""Writes hf_corpus_expected.json: a varied corpus and the token ids Hugging Face gives for it,
for hf/llama3, hf/qwen3 (tokenizer.json, via `tokenizers`) and the GPT-2 files (encoder.json +
vocab.bpe, via `tokenizers` BPE.from_file, cross-checked with transformers' slow, pure-Python
GPT2Tokenizer built from the same two files). hf_corpus_test.cc checks our tokenizer against it.

Modes per tokenizer and text:
  "special"    encode(text, add_special_tokens=False): special tokens in the text are matched
               (Hugging Face's default);
  "no_special" the same with encode_special_tokens=True: special added tokens are plain text
               (non-special added tokens, e.g. Qwen3's <think>, are still matched).
One more set, "bos": llama3 with the TemplateProcessing post-processor the official Meta
tokenizer.json has ("<|begin_of_text|> $A"), encode(text, add_special_tokens=True); the
post-processor JSON is stored in the fixture so the C++ test patches the same one in.

usage: /opt/refenv/bin/python hf_corpus_gen.py [SHARED_TOKENIZER_DATA]"""
import json
import os
import sys
import unicodedata

import tokenizers
from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHARED = os.path.join(HERE, "..", "..", "..", "shared", "data", "tokenizers")

CODE_PY = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
\tprint([fib(i) for i in range(10)])  # 0 1 1 2 3 5 8 13 21 34
'''

CODE_CPP = '''#include <vector>
template <typename T>
static inline T sum(const std::vector<T>& xs) noexcept {
  T acc{};
  for (auto it = xs.begin(); it != xs.end(); ++it) acc += *it;  // O(n)
  return acc;
}
int main() { return sum(std::vector<int>{1, 2, 3}) == 6 ? 0 : 1; }
'''

CODE_RUST = '''fn main() -> Result<(), Box<dyn std::error::Error>> {
    let v: Vec<u64> = (1..=10).map(|x| x * x).collect();
    println!("{:?} {}", v, v.iter().sum::<u64>());
    Ok(())
}'''

CODE_JS = '''const f = async (xs = []) => { await Promise.all(xs.map(x => x?.y ?? 0)); return `n=${xs.length}`; };
export default f; // ===  !==  >>>=  **=  &&=  ||='''

CODE_SQL_HTML = ('SELECT id, name FROM users WHERE age >= 18 AND email LIKE \'%@example.com\';\n'
                 '<div class="x" id=\'y\'><a href="https://example.com/?q=1&amp;r=2">link</a></div>')

CODE_GO_JSON = ('package main\n\nimport "fmt"\n\nfunc main() {\n\tm := map[string]int{"a": 1}\n'
                '\tfmt.Println(m)\n}\n{"key": [1, 2.5, -3e10, true, null], "nested": {"k": "v"}}')

CORPUS = [
    # --- English, contractions, case ---
    "Hello world",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done what we'd said: it's John's.",
    "I'M SURE YOU'LL SEE THEY'VE DONE IT. JOHN'S 'S 'T 'RE 'VE 'M 'LL 'D",
    "Don'T mIxEd'S cAsE'Ll wOrDs'Ve",
    "don't can't won't shouldn't y'all ma'am o'clock rock'n'roll",
    "'s 'll ' ' '' ''' 'quoted' \"double\"",
    # --- other languages ---
    "Le cœur a ses raisons que la raison ne connaît point. Ça va? Très bien, merci! « Où est-il ? »",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Größe, Fußgängerübergänge.",
    "Donaudampfschifffahrtsgesellschaftskapitänsmütze",
    "我们今天去公园散步，天气非常好。人工智能正在改变世界！",
    "日本語のテキスト：東京は日本の首都です。カタカナとひらがなと漢字。",
    "한국어 문장입니다. 안녕하세요, 반갑습니다! 서울특별시",
    "مرحبا بالعالم! اللغة العربية جميلة جداً. ١٢٣٤٥٦٧٨٩٠",
    "नमस्ते दुनिया। हिन्दी भाषा बहुत सुंदर है। १२३४५",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά: Γειά σου Κόσμε! עברית: שלום עולם. ไทย: สวัสดีชาวโลก",
    "Tiếng Việt có dấu: Chào thế giới, người ơi! Türkçe: İstanbul, ığdır, şöyle.",
    # --- emoji, ZWJ sequences, modifiers, flags ---
    "I love 🦙 and 🐍! 😀😃😄😁",
    "Family: 👨\u200d👩\u200d👧\u200d👦 rainbow flag: 🏳️\u200d🌈 technologist: 👩🏽\u200d💻",
    "Skin tones 👍🏻👍🏼👍🏽👍🏾👍🏿 flags 🇫🇷🇩🇪🇯🇵🇺🇸 keycap 1️⃣ #️⃣",
    "❤️‍🔥 🧑‍🤝‍🧑 🫶🏽 ☺︎ ✈️ ⚡",
    # --- code ---
    CODE_PY,
    CODE_CPP,
    CODE_RUST,
    CODE_JS,
    CODE_SQL_HTML,
    CODE_GO_JSON,
    # --- whitespace ---
    "a  b   c    d     e      f",
    "                                                                end",
    "trailing spaces        ",
    "\t\ttabs\tand\t\t\tmore\ttabs\t",
    "line1\nline2\n\nline4\n\n\n\nline8\n",
    "\n\n\n",
    " \n \n\t\n  \r\n\r\n   x",
    "mixed \u00a0nbsp\u2003em-space\u3000ideographic\u200bzero-width",
    " ",
    "   ",
    "\t",
    "\n",
    # --- digits and numbers ---
    "0 1 12 123 1234 12345 123456 1234567 12345678 123456789",
    "3.14159265358979323846264338327950288419716939937510582097494459",
    "The year 2024, 1,000,000 people; pi=3.14; -42; +7; 1e-9; 0x1F; 0b1010; 1_000_000",
    "99999999999999999999999999999999999999999999999999",
    "Phone: +1 (555) 123-4567, ISBN 978-3-16-148410-0, 12:30:45, 2024-01-31T23:59:59Z",
    "٣ ٤ ५ ६ ½ ¾ ² ³ Ⅻ ①②③",
    # --- punctuation runs ---
    "!!!??? ... ,,, ;;; ::: --- ___ *** ### @@@ $$$ %%% ^^^ &&& ~~~",
    "Wait...what?!?! No--way!!! (really)?? [yes] {no} <maybe>",
    "—–-‒― «»‹›„“”‘’ …•·°§¶†‡",
    "=====================================================================",
    "/* */ // <!-- --> #!/bin/sh && || |> <| ->> => :: ;;",
    # --- special tokens inside text ---
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "Text before<|endoftext|>text after <|endoftext|> and again<|endoftext|>",
    "<think>\nreasoning here\n</think>\n\nanswer <tool_call>{\"name\": \"f\"}</tool_call>",
    "almost special: <|im_start <im_start|> <|endoftext| |endoftext|> <|unknown_token|> <||>",
    "<|begin_of_text|><|begin_of_text|> doubled and <|end_of_text|> end",
    "<|eot_id|><|im_end|><|endoftext|>",
    # --- mixtures / edge cases ---
    "A",
    "Hello, Wörld! 你好, 世界! こんにちは 🌍 123 ... \t\n end",
    "unicode combining: e\u0301 a\u0308 n\u0303 A\u030a \u1100\u1161\u11a8 Å Å",
    "fullwidth ＡＢＣ１２３ and ﬁ ligature, ㈱ ℡ ㎏",
    "URLs https://huggingface.co/docs/tokenizers?x=1#anchor and mail@example.org",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE __dunder__",
    "The café’s naïve résumé — coöperate, façade, jalapeño, piñata.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation "
    "ullamco laboris nisi ut aliquip ex ea commodo consequat.",
]


def gpt2_tokenizers(shared):
    enc = os.path.join(shared, "gpt2-files", "encoder.json")
    bpe = os.path.join(shared, "gpt2-files", "vocab.bpe")
    tok = Tokenizer(BPE.from_file(enc, bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # As Hugging Face's GPT-2 tokenizer.json / GPT2Tokenizer: <|endoftext|> is special.
    tok.add_special_tokens(["<|endoftext|>"])
    slow = None
    try:
        from transformers import GPT2Tokenizer
        slow = GPT2Tokenizer(vocab_file=enc, merges_file=bpe)
    except ImportError:
        print("transformers not available: GPT-2 not cross-checked", file=sys.stderr)
    return tok, slow


def encode_modes(tok, text):
    tok.encode_special_tokens = False
    special = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = True
    plain = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return special, plain


def main():
    shared = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHARED)
    out = {
        "generator": "tests/tokenizer/hf_corpus_gen.py",
        "tokenizers_version": tokenizers.__version__,
        "texts": CORPUS,
        "tokenizers": {},
    }
    toks = {}
    for name in ["llama3", "qwen3"]:
        toks[name] = Tokenizer.from_file(os.path.join(shared, "hf", name, "tokenizer.json"))
    gpt2, gpt2_slow = gpt2_tokenizers(shared)
    toks["gpt2"] = gpt2

    for name, tok in toks.items():
        special, plain, decoded = [], [], []
        for text in CORPUS:
            s, p = encode_modes(tok, text)
            special.append(s)
            plain.append(p)
            # decode(encode(x)) is x, except where a normalizer (Qwen3: NFC) changed the text.
            d = tok.decode(s, skip_special_tokens=False)
            expect = unicodedata.normalize("NFC", text) if name == "qwen3" else text
            assert d == expect, (name, text)
            assert tok.decode(p, skip_special_tokens=False) == d, (name, text)
            decoded.append(d)
        out["tokenizers"][name] = {"special": special, "no_special": plain, "decoded": decoded}

    if gpt2_slow is not None:
        for text, ids in zip(CORPUS, out["tokenizers"]["gpt2"]["special"]):
            slow_ids = gpt2_slow.encode(text, add_special_tokens=False)
            assert slow_ids == ids, ("GPT-2 tokenizers vs transformers disagree", text)
        out["gpt2_cross_checked_with"] = "transformers.GPT2Tokenizer"

    # BOS: llama3 with the official template post-processor.
    llama3 = toks["llama3"]
    llama3.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
        special_tokens=[("<|begin_of_text|>", 128000)])
    post = json.loads(llama3.to_str())["post_processor"]
    out["bos"] = {
        "tokenizer": "llama3",
        "post_processor": post,
        "ids": [llama3.encode(t, add_special_tokens=True).ids for t in CORPUS],
    }

    path = os.path.join(HERE, "hf_corpus_expected.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    n_ids = sum(len(i) for t in out["tokenizers"].values() for m in t.values() for i in m)
    print(f"wrote {path}: {len(CORPUS)} texts, {n_ids} ids")


if __name__ == "__main__":
    main()
