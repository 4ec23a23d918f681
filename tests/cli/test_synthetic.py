"""`llmc compile --synthetic-weights SEED config.json`: a plan without weight bytes whose weights
llmrt generates at load (for benchmarks of big shapes on machines the weights cannot travel to)."""

import json

import numpy as np

from conftest import TINY, clean_error, logits, ok, run


def inspect(llmc, plan):
    return json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)


def test_synthetic_plan_has_the_shapes_but_no_weight_bytes(llmc, llmrt, tiny_plan, tmp_path):
    plan = tmp_path / "syn.fb"
    ok([llmc, "compile", "--synthetic-weights", "7", TINY / "llama" / "config.json", "-o", plan,
        "--target", "none", "-q"])
    real, syn = inspect(llmc, tiny_plan), inspect(llmc, plan)
    assert syn["synthetic_weights"] == {"seed": 7}
    assert "synthetic_weights" not in real
    # Same tensors and program as the plan compiled from the checkpoint ...
    assert syn["tensors"] == real["tensors"]
    assert syn["program"] == real["program"]
    # ... but the file holds none of the weight bytes.
    assert plan.stat().st_size < tiny_plan.stat().st_size - real["tensors"]["bytes"] // 2
    text = ok([llmc, "inspect", plan]).stdout
    assert "synthetic: generated at load from seed 7" in text


def test_synthetic_weights_are_deterministic_and_seeded(llmc, llmrt, tmp_path):
    plans = {}
    for seed in (7, 8):
        plans[seed] = tmp_path / f"s{seed}.fb"
        ok([llmc, "compile", "--synthetic-weights", str(seed), TINY / "llama", "-o", plans[seed],
            "--target", "none", "-q"])
    ids = [1, 5, 9, 33, 2, 7]
    a = logits(llmrt, plans[7], ids, tmp_path, "--threads", "1")
    b = logits(llmrt, plans[7], ids, tmp_path, "--threads", "2")
    c = logits(llmrt, plans[8], ids, tmp_path)
    assert np.isfinite(a).all() and np.abs(a).max() > 0
    assert np.array_equal(a, b), "generated weights depend on the thread count"
    assert not np.array_equal(a, c), "the seed does not change the weights"
    proc = ok([llmrt, "run", plans[7], "--prompt-ids", "1,5,9", "--max-tokens", "2"])
    assert "synthetic" in proc.stderr


def test_synthetic_quantized_plans_run(llmc, llmrt, tmp_path):
    for layout in ("interleaved8", "row-groups", "cuda-mma"):
        plan = tmp_path / f"q_{layout}.fb"
        ok([llmc, "compile", "--synthetic-weights", "3", TINY / "llama", "-o", plan, "--target", "none",
            "-q", "--quantize", "int4-g32", "--weight-layout", layout])
        by = inspect(llmc, plan)["tensors"]["bytes_by_dtype"]
        assert any(k.startswith("int4") for k in by), by
        out = logits(llmrt, plan, [1, 2, 3, 4], tmp_path)
        assert np.isfinite(out).all()
    # The layouts hold the same generated rows: same logits.
    got = [logits(llmrt, tmp_path / f"q_{l}.fb", [1, 2, 3, 4], tmp_path, "--cpu-kernels", "reference")
           for l in ("interleaved8", "row-groups", "cuda-mma")]
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])


def test_synthetic_half_plans_are_the_rounded_f32_rows(llmc, llmrt, tmp_path):
    """--weight-dtype bf16 / f16 with synthetic weights: the generated f32 rows rounded, so the
    logits stay close to the f32 plan's (and differ: the rounding is there)."""
    plans = {}
    for dtype in ("f32", "bf16", "f16"):
        plans[dtype] = tmp_path / f"{dtype}.fb"
        ok([llmc, "compile", "--synthetic-weights", "5", TINY / "llama", "-o", plans[dtype], "--target",
            "none", "-q", "--weight-dtype", dtype])
    assert set(inspect(llmc, plans["bf16"])["tensors"]["bytes_by_dtype"]) == {"BF16", "F32"}
    out = {d: logits(llmrt, p, [1, 2, 3, 4], tmp_path) for d, p in plans.items()}
    scale = np.abs(out["f32"]).max()
    for dtype, tol in (("bf16", 3e-2), ("f16", 5e-3)):
        err = np.abs(out[dtype] - out["f32"]).max() / scale
        print(f"synthetic {dtype}: max|diff| / max|logit| = {err:.2e}")
        assert 0 < err < tol, (dtype, err)


def test_synthetic_weights_need_a_config(llmc, tmp_path):
    proc = run([llmc, "compile", "--synthetic-weights", "1", tmp_path / "nothing", "-o", tmp_path / "x.fb"])
    clean_error(proc, "config.json")
    (tmp_path / "q").mkdir()
    cfg = json.loads((TINY / "llama" / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True,
                                  "desc_act": False}
    (tmp_path / "q" / "config.json").write_text(json.dumps(cfg))
    proc = run([llmc, "compile", "--synthetic-weights", "1", tmp_path / "q", "-o", tmp_path / "x.fb"])
    clean_error(proc, "quantization_config")


def test_inspect_and_devices_do_not_generate_weights(llmc, llmrt, tmp_path):
    """A 70B-shaped f32 plan (about 280 GB of synthetic weights, more than any test machine has):
    inspect and devices read only the FlatBuffer and answer at once; run refuses it, naming the
    size."""
    cfg = json.loads((TINY / "llama" / "config.json").read_text())
    cfg.update(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
               num_key_value_heads=8, vocab_size=128256)
    cfg.pop("head_dim", None)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "config.json").write_text(json.dumps(cfg))
    plan = tmp_path / "big.fb"
    ok([llmc, "compile", "--synthetic-weights", "1", tmp_path / "big", "-o", plan, "--target", "none", "-q"])
    for tool in (llmc, llmrt):
        j = json.loads(ok([tool, "inspect", plan, "--json"]).stdout)
        assert j["tensors"]["bytes"] > 250e9 and j["synthetic_weights"] == {"seed": 1}
    assert "no GPU target" in ok([llmrt, "devices", plan]).stdout
    proc = run([llmrt, "run", plan, "--prompt-ids", "1", "--max-tokens", "1"])
    clean_error(proc, "synthetic weights needs")
