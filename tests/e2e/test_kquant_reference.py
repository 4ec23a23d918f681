"""GGUF k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), Q5_0 / Q5_1 and IQ4_NL / IQ4_XS against llama.cpp.

Fixture: tests/fixtures/kquant/ from tests/reference/make_kquant_fixtures.py: a tiny random Llama
quantized by llama.cpp itself (Q4_K_M, Q5_K_M, Q5_0, Q5_1, Q3_K_M, IQ4_NL, IQ4_XS, Q2_K mixes;
every file has Q6_K), and
llama.cpp's logits at every position of two token sequences, on an F32 copy of each file (the
exact model) and on the quantized file itself.

  - --cpu-kernels reference dequantizes the blocks exactly (compiler/frontend/Dequant.h) and
    multiplies in f32, as llama.cpp does on the F32 copy: max|diff| <= 1e-4 x max|logit| at every
    position (measured <= 7.7e-7: summation order only);
  - the default fast contract (int8 activations per 32) against llama.cpp on the quantized file
    (its own 8-bit activations): mean KL per sequence <= 6e-3 (measured <= 2.3e-3; llama.cpp's
    own distance from the exact model is about 1.5e-3 here), the same top token at >= 90% of
    positions (measured 100%);
  - the plan holds each block type in the format documented for it, no float copy (IQ4_NL /
    IQ4_XS as int4 nl codes, in the CUDA layout too).
"""

import json
import re

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, parse_json_stdout, prompt_args, run_cmd
from refcheck import kl_top1

FIX = FIXTURES / "kquant"
FILES = ["tiny_q4_k_m.gguf", "tiny_q5_k_m.gguf", "tiny_q5_0.gguf", "tiny_q5_1.gguf", "tiny_q3_k_m.gguf",
         "tiny_iq4_nl.gguf", "tiny_iq4_xs.gguf", "tiny_q2_k.gguf"]
HELD = {"Q4_K": "int4-g256s32-f16-min", "Q5_K": "int5-g256s32-f16-min", "Q6_K": "int8-g256s16-f16-sym",
        "Q5_0": "int5-g32-f16-sym", "Q5_1": "int5-g32-f16-min", "Q3_K": "int4-g256s16-f16-sym",
        "IQ4_NL": "int4-g32-f16-nl", "IQ4_XS": "int4-g256s32-f16-nl", "Q2_K": "int4-g256s16-f16-min"}
REF_TOL = 1e-4
FAST_KL = 6e-3
FAST_TOP1 = 0.9


def load_ref():
    with open(FIX / "reference.json") as f:
        return json.load(f)


def test_fixture_is_consistent():
    ref = load_ref()
    assert ref["llama_cpp_python"] == "0.3.36"
    assert sorted(ref["files"]) == sorted(FILES)
    seen = set()
    for name in FILES:
        entry = ref["files"][name]
        seen.update(entry["types"])
        for kind in ("f32", "quant"):
            arr = np.load(FIX / name.replace(".gguf", f".{kind}.npy"))
            assert arr.dtype == np.float32
            assert arr.shape == (len(ref["sequences"]), len(ref["sequences"][0]), ref["vocab_size"])
            assert np.all(np.isfinite(arr)) and np.abs(arr).max() > 1.0
    assert seen == {"F32", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS"}


def run_logits(llmrt, plan, seq, tmp_path, what):
    out = tmp_path / "all_logits.npy"
    run_cmd([llmrt, "run", plan, *prompt_args([seq]), "--all-logits-out", out, "--threads", 2], what)
    return load_f32_npy(out, (len(seq), load_ref()["vocab_size"]), what)


@pytest.mark.parametrize("name", FILES)
def test_reference_contract_is_llama_cpp_on_the_exact_weights(name, llmrt, compile_plan, tmp_path):
    ref = load_ref()
    plan = compile_plan(FIX / name, name + "_reference", "--cpu-kernels", "reference")
    expected = np.load(FIX / name.replace(".gguf", ".f32.npy"))
    for i, seq in enumerate(ref["sequences"]):
        ours = run_logits(llmrt, plan, seq, tmp_path, f"llmrt run {name} sequence {i}")
        want = expected[i]
        scale = np.abs(want).max(axis=1)
        worst = (np.abs(ours - want).max(axis=1) / scale).max()
        print(f"{name} sequence {i}: max|diff| / max|logit| = {worst:.2e}")
        assert worst <= REF_TOL, f"{name} sequence {i}: {worst:.3e} of max|logit| from llama.cpp (F32 copy)"
        assert np.array_equal(ours.argmax(axis=1), want.argmax(axis=1))


@pytest.mark.parametrize("name", FILES)
def test_fast_contract_is_close_to_llama_cpp_on_the_quantized_file(name, llmrt, compile_plan, tmp_path):
    ref = load_ref()
    plan = compile_plan(FIX / name, name + "_fast")
    expected = np.load(FIX / name.replace(".gguf", ".quant.npy"))
    for i, seq in enumerate(ref["sequences"]):
        ours = run_logits(llmrt, plan, seq, tmp_path, f"llmrt run {name} sequence {i}")
        kl, top1 = kl_top1(expected[i], ours)
        print(f"{name} sequence {i}: mean KL {kl:.2e}, top-1 agreement {top1:.2f}")
        assert 0.0 < kl <= FAST_KL, f"{name} sequence {i}: mean KL {kl:.3e} against llama.cpp"
        assert top1 >= FAST_TOP1, f"{name} sequence {i}: top-1 agreement {top1:.2f}"


@pytest.mark.parametrize("name", FILES)
def test_plan_holds_each_block_type_in_its_format(name, llmc, compile_plan):
    ref = load_ref()
    plan = compile_plan(FIX / name, name + "_fast")
    proc = run_cmd([llmc, "inspect", plan, "--json"], f"llmc inspect {name}")
    info = parse_json_stdout(proc, f"llmc inspect {name}")
    formats = set(info["tensors"]["bytes_by_dtype"])
    want = {HELD[t] for t in ref["files"][name]["types"] if t != "F32"} | {"F32"}
    assert formats == want, f"{name}: plan formats {sorted(formats)}, expected {sorted(want)}"


def test_compile_says_what_widening_costs(llmc, tmp_path):
    # Q4_K_M's Q4_K and Q6_K tensors: the note names them and their bytes in the file (ggml's
    # block sizes) and in the plan (the held formats' rows): 148/144 and 274/210 times as many
    # bytes per super-block (sub-scales a byte each); a plan for GPUs holds the same.
    ref = load_ref()
    tensors = ref["files"]["tiny_q4_k_m.gguf"]["tensors"]
    proc = run_cmd([llmc, "compile", FIX / "tiny_q4_k_m.gguf", "-o", tmp_path / "p.fb"], "llmc compile")
    note = [line for line in proc.stderr.splitlines() if "held with the same values" in line]
    assert len(note) == 1, proc.stderr
    n = sum(1 for t in tensors.values() if t["type"] in ("Q4_K", "Q6_K"))
    assert f"{n} tensors of GGUF Q4_K, Q6_K blocks" in note[0], note[0]
    m = re.search(r"([0-9.]+) MiB in the file, ([0-9.]+) MiB in the plan", note[0])
    assert m, note[0]
    file_mib, plan_mib = float(m.group(1)), float(m.group(2))
    assert 148 / 144 < plan_mib / file_mib < 274 / 210, note[0]
    proc = run_cmd([llmc, "compile", FIX / "tiny_q4_k_m.gguf", "-o", tmp_path / "c.fb", "--target", "none",
                    "--weight-layout", "cuda-mma"], "llmc compile (cuda-mma)")
    note = [line for line in proc.stderr.splitlines() if "held with the same values" in line]
    m2 = re.search(r"([0-9.]+) MiB in the file, ([0-9.]+) MiB in the plan", note[0])
    assert m2 and (float(m2.group(1)), float(m2.group(2))) == (file_mib, plan_mib), note[0]
    # Q5_0 is kept bit for bit (int5) for either target: only its file's Q6_K tensors are named.
    for args in ((), ("--target", "none", "--weight-layout", "cuda-mma")):
        proc = run_cmd([llmc, "compile", FIX / "tiny_q5_0.gguf", "-o", tmp_path / "q5.fb", *args], "llmc compile q5_0")
        note = [line for line in proc.stderr.splitlines() if "held with the same values" in line]
        assert len(note) == 1 and "Q5_0" not in note[0] and "Q6_K" in note[0], proc.stderr
    quiet = run_cmd([llmc, "compile", FIX / "tiny_q4_k_m.gguf", "-o", tmp_path / "q.fb", "-q"], "llmc compile -q")
    assert "held with the same values" not in quiet.stderr


@pytest.mark.parametrize("name", FILES)
def test_cuda_layout_holds_the_same_formats(name, llmc, llmrt, compile_plan, tmp_path):
    # The CUDA kernels read every held format (nl codes, sub-scales, int5 codes; their families'
    # host emulation is checked in the codegen tests): a cuda-mma plan holds each file's blocks as
    # the CPU plan does, and its rows, unpacked from the GPU tiles by the CPU executor, are still
    # llama.cpp's values (reference contract).
    ref = load_ref()
    plan = compile_plan(FIX / name, name + "_cuda_layout", "--target", "none", "--weight-layout", "cuda-mma",
                        "--cpu-kernels", "reference")
    info = parse_json_stdout(run_cmd([llmc, "inspect", plan, "--json"], f"llmc inspect {name}"), name)
    types = ref["files"][name]["types"]
    assert set(info["tensors"]["bytes_by_dtype"]) == {HELD[t] for t in types if t != "F32"} | {"F32"}
    expected = np.load(FIX / name.replace(".gguf", ".f32.npy"))
    seq = ref["sequences"][0]
    ours = run_logits(llmrt, plan, seq, tmp_path, f"llmrt run {name} (cuda-mma layout)")
    worst = (np.abs(ours - expected[0]).max(axis=1) / np.abs(expected[0]).max(axis=1)).max()
    assert worst <= REF_TOL, f"{name} in cuda-mma: {worst:.3e} of max|logit| from llama.cpp (F32 copy)"


@pytest.mark.parametrize("name", ["tiny_q4_k_m.gguf", "tiny_q5_k_m.gguf", "tiny_iq4_xs.gguf", "tiny_q5_0.gguf",
                                  "tiny_q5_1.gguf", "tiny_q2_k.gguf"])
def test_cuda_layout_plans_compute_what_cpu_plans_do(name, llmc, llmrt, compile_plan, tmp_path):
    # Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS with sub-scales (a byte each; Q2_K / Q3_K's of 16)
    # and Q5_0 / Q5_1 / Q5_K as int5 codes,
    # in the CPU's tiles and in the GPU's (cuda-mma, which the CPU executor unpacks a row at a
    # time): both contracts give the same logits from both, bit for bit.
    ref = load_ref()
    types = ref["files"][name]["types"]
    for contract in ("fast", "reference"):
        native = compile_plan(FIX / name, f"{name}_{contract}_native", "--cpu-kernels", contract)
        gpu = compile_plan(FIX / name, f"{name}_{contract}_gpu", "--target", "none", "--weight-layout", "cuda-mma",
                           "--cpu-kernels", contract)
        for plan in (native, gpu):
            info = parse_json_stdout(run_cmd([llmc, "inspect", plan, "--json"], f"llmc inspect {name}"), name)
            assert set(info["tensors"]["bytes_by_dtype"]) == {HELD[t] for t in types if t != "F32"} | {"F32"}
        seq = ref["sequences"][1]
        a = run_logits(llmrt, native, seq, tmp_path, f"llmrt run {name} ({contract}, CPU tiles)")
        b = run_logits(llmrt, gpu, seq, tmp_path, f"llmrt run {name} ({contract}, cuda-mma tiles)")
        assert np.array_equal(a, b), f"{name} {contract}: max |diff| {np.abs(a - b).max():.3e}"
