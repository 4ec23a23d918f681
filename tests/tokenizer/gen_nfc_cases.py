#!/usr/bin/env python3
"""Writes nfc_cases.txt: lines "INPUT_HEX<TAB>NFC_HEX" (UTF-8 bytes) by Python's unicodedata, for
runtime/tokenizer/nfc.cc. Random strings over bases, combining marks (shuffled classes),
decomposable and singleton characters, and Hangul jamo/syllables; seeded, so reproducible."""
import random
import unicodedata as ud

rng = random.Random(1234)
marks = [c for c in range(0x300, 0x370)] + [0x0323, 0x0328, 0x0345, 0x05B0, 0x0654, 0x093C,
                                            0x09BE, 0x0B3E, 0x0CD5, 0x0E38, 0x1DC0, 0x20D0,
                                            0x302A, 0x3099, 0x309A, 0x1D165, 0x1D16E]
bases = [ord(c) for c in "aAeEiIoOuUnNcCsSzZyYwW "] + [0x00C5, 0x212B, 0x2126, 0x0344, 0x0F73,
                                                      0x1E0B, 0x1E9B, 0x0B47, 0x0BC6, 0x0DD9,
                                                      0x304B, 0x30CF, 0xF900, 0xFB1D, 0x2ADC,
                                                      0x00E9, 0x01D5, 0x0958, 0x1F80]
hangul = [0x1100, 0x1161, 0x11A8, 0x1112, 0x1175, 0x11C2, 0xAC00, 0xAC01, 0xD7A3, 0x11A7]
cases = ["e\u0301", "\u212B", "a\u0323\u0302", "a\u0302\u0323", "\u1100\u1161\u11A8",
         "\uAC00\u11A8", "\u0344", "Ca\u0300fe\u0301 \u0915\u093C", "plain ascii"]
for _ in range(400):
    s = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        pool = bases if r < 0.45 else marks if r < 0.85 else hangul
        s.append(chr(rng.choice(pool)))
    cases.append("".join(s))
with open("nfc_cases.txt", "w", encoding="utf-8") as f:
    for c in cases:
        f.write(c.encode().hex() + "\t" + ud.normalize("NFC", c).encode().hex() + "\n")
