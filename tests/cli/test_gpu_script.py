"""The GPU check rehearsed without a GPU: tools/gpu/make_bundle.sh builds the bundle (its
Llama-3-8B-shaped plans from tests/gpu/rehearsal_config.json, a host-sized model of the same
shape family, instead of the 8B config), then the bundle's run_checks.sh runs every stage on the
stand-in CUDA driver (tests/unit/fake_libcuda.cc).

A device run is short and rare, and the script has been edited many times between runs: a flag
renamed in llmrt, a helper's Python error or a stage that no longer finds its plan would cost that
run. Here every command of every stage must run to its end: the plans load, every llmrt call
takes its flags, every bench prints its table and the bound, every differential case reaches its
comparison. The stand-in runs no kernel, so the numbers are meaningless and the comparisons fail
(logits are zeros); those failures, and only those, are expected."""

import re
import sys
from pathlib import Path

import pytest

from conftest import REPO, fake_env, run

STAGES = ["env", "diff", "long", "serve", "sanitizer", "bench", "kquant", "hf", "hfcompiled", "profile", "gemv",
          "graphs", "sampling", "depth", "prefill"]


@pytest.fixture(scope="module")
def rehearsal(llmrt, tmp_path_factory):
    env = fake_env(memory_mib=1024)  # every llmrt call zero-fills its KV cache: keep it small
    top = tmp_path_factory.mktemp("gpu")
    made = run(["bash", REPO / "tools/gpu/make_bundle.sh", "--dir", top, "--no-archive",
                "--big-config", REPO / "tests/gpu/rehearsal_config.json"], timeout=900)
    assert made.returncode == 0, f"make_bundle.sh failed:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}"
    # The helpers run as python3 and need numpy: this interpreter's folder first on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update(OUT=str(top / "out"), RAW=str(top / "raw"), CHECK_BANDWIDTH_GBS="1000")
    proc = run(["bash", top / "gpu-bundle" / "run_checks.sh"], timeout=900, env=env)
    results = (top / "out" / "results.md").read_text()
    return proc, results, top


def test_every_stage_runs_within_its_budget(rehearsal):
    proc, results, top = rehearsal
    assert "Fake CUDA device" in results  # the stand-in answered, not some real driver
    for stage in STAGES:
        assert f"\n## {stage} (at " in results, f"stage {stage} did not run:\n{results[-2000:]}"
    at = [results.index(f"\n## {stage} (at ") for stage in STAGES]
    assert at == sorted(at), "the stages ran out of their order of importance"
    assert "budget left" not in results, results
    assert re.search(r"\ntotal \d+ s; status 1\n", results), results[-500:]
    assert proc.returncode == 1
    assert (top / "out" / "raw.tgz").stat().st_size > 0


def test_every_llmrt_command_takes_its_flags_and_finishes(rehearsal):
    proc, results, _ = rehearsal
    for bad in ("FAILED", "exited non-zero", "Traceback", "not expected", "unknown option", "Error:"):
        assert bad not in results, "\n".join(line for line in results.splitlines() if bad in line)
    # bench and bench_case: a table per call (2 in bench, 3 kquant, 9 gemv, 4 graphs, 4 sampling,
    # 2 profile, 5 prefill, 1 depth)
    assert results.count("peak RSS:") == 30, results


def test_every_differential_case_reaches_its_comparison(rehearsal):
    _, results, top = rehearsal
    ref = top / "gpu-bundle" / "ref"
    cases = [line.split()[0] for line in (ref / "cases.txt").read_text().splitlines()]
    assert len(cases) >= 18
    for name in cases + ["batch3_f32", "batch3_tc", "batch3_wide_vocab", "long_context_f32", "long_context_tc"]:
        # zeros for logits: the comparison runs and fails on the numbers, not on its input
        assert re.search(rf"\n{name}: FAIL max\|cuda-cpu\| [0-9.e+-]+ \(max\|logit\| ", results), \
            f"no comparison for {name}:\n{results}"
    for plan in ("tiny_llama_f32", "wide_vocab_f32"):
        assert f"{plan} sampled (temperature 1, top-p 0.9, 3 prompts x 24 tokens): FAIL: device draws differ" \
            in results


def test_bound_and_serve_lines(rehearsal):
    _, results, _ = rehearsal
    for plan in ("llama3_8b_int4_g128", "llama3_8b_bf16"):
        block = results[results.index(f"\n{plan}:\n"):]
        weights = re.search(r"weights ([0-9.]+) GB, read per decode step ([0-9.]+) GB; kernels per batch-1 "
                            r"decode step: (\d+)", block)
        assert weights and 0 < float(weights[2]) <= float(weights[1]), block[:3000]
        assert re.search(r"\n  tg64: [0-9.]+ tok/s; bound [0-9.]+ tok/s: [0-9.]+% of it", block), block[:3000]
        assert re.search(r"\n  tg64-b32: [0-9.]+ tok/s \([0-9.]+ steps/s, weights read at \d+ GB/s\)", block)
    # the server came up on the stand-in, answered all 12 (the texts differ: no kernel ran) and stopped
    assert re.search(r"serve: FAIL 12 concurrent completions in [0-9.]+ s; texts equal to the CPU server's: "
                     r"\d+/12", results), results
    assert "errors:" not in results[results.index("## serve"):]
    assert "llmrt: stopped" in results
