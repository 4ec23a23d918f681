"""llmrt eval: perplexity and KL divergence (llama-perplexity's chunking), checked against numpy
computations from logits that `llmrt run --all-logits-out` gives for the same chunks, plus the
error cases. The tiny fixture plans have no tokenizer, so they take --token-ids; the text path runs
on the SmolLM2 plan when tools/setup.sh has made it."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TINY, clean_error, ok, run

TEXT = REPO / "tests" / "fixtures" / "eval" / "jargon_excerpt.txt"
VOCAB = 384     # tests/fixtures/tiny/llama and llama3_rope
BOS = 1         # their config's bos_token_id
CTX = 16
FIRST = CTX // 2
SCORED = CTX - 1 - FIRST  # positions 8..14 predict tokens 9..15


@pytest.fixture(scope="module")
def other_plan(llmc, tmp_path_factory):
    """A second tiny model with the same vocabulary (different weights and RoPE)."""
    out = tmp_path_factory.mktemp("plan3") / "llama3_rope.fb"
    ok([llmc, "compile", TINY / "llama3_rope", "-o", out, "--target", "none", "-q"])
    return out


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    """55 random token ids: 3 chunks of 16 and 7 left over."""
    rng = np.random.default_rng(7)
    ids = rng.integers(3, VOCAB, size=55).astype(np.int32)
    path = tmp_path_factory.mktemp("ids") / "ids.npy"
    np.save(path, ids)
    return ids, path


def eval_json(llmrt, plan, *args):
    proc = ok([llmrt, "eval", plan, "--threads", 1, "--json", *args])
    return json.loads(proc.stdout), proc


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def chunk_logprobs(llmrt, plan, ids, tmp_path, chunks, bos=BOS):
    """[chunks * SCORED, vocab] log-softmax at the scored positions and the targets, each chunk
    run on its own by `llmrt run` (first token replaced by BOS), computed here in float64."""
    rows, targets = [], []
    for c in range(chunks):
        chunk = ids[c * CTX:(c + 1) * CTX].copy()
        if bos is not None:
            chunk[0] = bos
        out = tmp_path / f"all_{plan.stem}_{c}.npy"
        ok([llmrt, "run", plan, "--threads", 1, "--max-tokens", 0, "--all-logits-out", out,
            "--prompt-ids", ",".join(map(str, chunk))])
        logits = np.load(out)
        assert logits.shape == (CTX, VOCAB)
        rows.append(log_softmax(logits[FIRST:CTX - 1]))
        targets.append(ids[c * CTX + FIRST + 1:(c + 1) * CTX])
    return np.concatenate(rows), np.concatenate(targets)


def test_perplexity_matches_numpy(llmrt, tiny_plan, ids, tmp_path):
    ids, path = ids
    j, proc = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    assert (j["tokens"], j["ctx"], j["chunks"], j["first_scored"]) == (55, CTX, 3, FIRST)
    assert j["scored_positions"] == 3 * SCORED

    logp, targets = chunk_logprobs(llmrt, tiny_plan, ids, tmp_path, 3)
    nll = -logp[np.arange(len(targets)), targets]
    assert j["mean_nll"] == pytest.approx(nll.mean(), rel=1e-5)
    assert j["ppl"] == pytest.approx(np.exp(nll.mean()), rel=1e-5)
    # llama.cpp's error: ppl * sqrt(population variance of NLL / (n - 1)).
    err = np.exp(nll.mean()) * np.sqrt(nll.var() / (len(nll) - 1))
    assert j["ppl_error"] == pytest.approx(err, rel=1e-4)
    running = [np.exp(nll[:(c + 1) * SCORED].mean()) for c in range(3)]
    assert j["chunk_ppl"] == pytest.approx(running, rel=1e-5)
    assert np.isfinite(j["ppl"]) and j["ppl"] > 1


def test_text_output_like_llama_perplexity(llmrt, tiny_plan, ids):
    ids, path = ids
    proc = ok([llmrt, "eval", tiny_plan, "--threads", 1, "--token-ids", path, "--ctx", CTX, "--bos", BOS])
    lines = proc.stdout.splitlines()
    running = lines[0].rstrip(",").split(",")
    assert [r.split("]")[0] for r in running] == ["[1", "[2", "[3"]
    final = [l for l in lines if l.startswith("Final estimate: PPL = ")]
    assert len(final) == 1, proc.stdout
    ppl, err = final[0].removeprefix("Final estimate: PPL = ").split(" +/- ")
    assert float(running[-1].split("]")[1]) == pytest.approx(float(ppl), abs=1e-4)
    assert float(err) > 0
    assert "3 chunks of 16" in proc.stderr


def test_bos_replacement_and_chunk_limit(llmrt, tiny_plan, ids, tmp_path):
    ids, path = ids
    j, _ = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", "none", "--chunks", 2)
    assert j["chunks"] == 2 and j["bos"] == -1
    logp, targets = chunk_logprobs(llmrt, tiny_plan, ids, tmp_path, 2, bos=None)
    nll = -logp[np.arange(len(targets)), targets]
    assert j["ppl"] == pytest.approx(np.exp(nll.mean()), rel=1e-5)
    with_bos, _ = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS, "--chunks", 2)
    assert with_bos["ppl"] != j["ppl"]  # the first token of each chunk matters


def test_batched_chunks_give_the_same_figures(llmrt, tiny_plan, ids):
    ids, path = ids
    one, _ = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    for b in (2, 3):
        many, _ = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS, "--batch-chunks", b)
        assert many["chunk_ppl"] == pytest.approx(one["chunk_ppl"], rel=1e-5)


def test_save_logprobs(llmrt, tiny_plan, ids, tmp_path):
    ids, path = ids
    saved = tmp_path / "lp.npy"
    eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS, "--save-logprobs", saved)
    lp = np.load(saved)
    assert lp.dtype == np.float16 and lp.shape == (3 * SCORED, VOCAB)
    want, _ = chunk_logprobs(llmrt, tiny_plan, ids, tmp_path, 3)
    # float16 of the float64 log-softmax: equal up to the f32 logits' last bits (1 f16 ulp).
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(lp.astype(np.float64) - want) <= ulp), np.abs(lp - want).max()
    assert np.allclose(np.exp(lp.astype(np.float64)).sum(axis=1), 1.0, atol=1e-2)


def test_kl_of_a_plan_against_itself_is_zero(llmrt, tiny_plan, ids):
    ids, path = ids
    ppl, _ = eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    j, proc = eval_json(llmrt, tiny_plan, "--kl-divergence", tiny_plan, "--token-ids", path, "--ctx", CTX,
                        "--bos", BOS)
    kl = j["kl"]
    assert kl["mean"] == 0.0 and kl["max"] == 0.0 and kl["stddev"] == 0.0
    assert kl["same_top_pct"] == 100.0 and kl["same_top"] == 3 * SCORED
    assert kl["ppl_base"] == j["ppl"] == pytest.approx(ppl["ppl"], rel=1e-12)
    text = ok([llmrt, "eval", tiny_plan, "--threads", 1, "--kl-divergence", tiny_plan, "--token-ids", path,
               "--ctx", CTX, "--bos", BOS]).stdout
    assert "Mean    KLD:   0.000000 ±   0.000000" in text
    assert "Same top p: 100.000 ± 0.000 %" in text


def test_kl_against_another_plan_matches_numpy(llmrt, tiny_plan, other_plan, ids, tmp_path):
    ids, path = ids
    j, _ = eval_json(llmrt, tiny_plan, "--kl-divergence", other_plan, "--token-ids", path, "--ctx", CTX,
                     "--bos", BOS)
    q, targets = chunk_logprobs(llmrt, tiny_plan, ids, tmp_path, 3)
    p, _ = chunk_logprobs(llmrt, other_plan, ids, tmp_path, 3)
    kl = (np.exp(p) * (p - q)).sum(axis=1)
    n = len(kl)
    assert kl.mean() > 1e-3  # two different models: the test can tell a wrong KL from 0
    assert j["kl"]["mean"] == pytest.approx(kl.mean(), rel=1e-4)
    assert j["kl"]["stddev"] == pytest.approx(kl.std(), rel=1e-3)
    assert j["kl"]["error"] == pytest.approx(np.sqrt(kl.var() / (n - 1)), rel=1e-3)
    assert j["kl"]["max"] == pytest.approx(kl.max(), rel=1e-4)
    same = (p.argmax(axis=1) == q.argmax(axis=1)).sum()
    assert j["kl"]["same_top"] == same
    assert j["kl"]["same_top_pct"] == pytest.approx(100.0 * same / n)
    pick = np.arange(n), targets
    assert j["ppl"] == pytest.approx(np.exp(-q[pick].mean()), rel=1e-5)
    assert j["kl"]["ppl_base"] == pytest.approx(np.exp(-p[pick].mean()), rel=1e-5)

    # The same against the reference's log-probabilities saved as float32 (--kl-base takes f2/f4).
    base = tmp_path / "base_f32.npy"
    np.save(base, p.astype(np.float32))
    jb, _ = eval_json(llmrt, tiny_plan, "--kl-base", base, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    assert jb["kl"]["mean"] == pytest.approx(kl.mean(), rel=1e-4)
    assert jb["kl"]["same_top"] == same


def test_kl_base_from_saved_float16(llmrt, tiny_plan, other_plan, ids, tmp_path):
    ids, path = ids
    saved = tmp_path / "other.npy"
    eval_json(llmrt, other_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS, "--save-logprobs", saved)
    j, _ = eval_json(llmrt, tiny_plan, "--kl-base", saved, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    q, targets = chunk_logprobs(llmrt, tiny_plan, ids, tmp_path, 3)
    p = log_softmax(np.load(saved).astype(np.float64))  # renormalized, as llmrt eval does
    kl = (np.exp(p) * (p - q)).sum(axis=1)
    assert j["kl"]["mean"] == pytest.approx(kl.mean(), rel=1e-4)
    # Against itself through its own float16 file: not exactly 0 (rounding), but tiny.
    mine = tmp_path / "mine.npy"
    eval_json(llmrt, tiny_plan, "--token-ids", path, "--ctx", CTX, "--bos", BOS, "--save-logprobs", mine)
    self_kl, _ = eval_json(llmrt, tiny_plan, "--kl-base", mine, "--token-ids", path, "--ctx", CTX, "--bos", BOS)
    assert 0 <= self_kl["kl"]["mean"] < 1e-5
    # A base file with fewer chunks limits the evaluation to them.
    np.save(tmp_path / "two.npy", np.load(mine)[:2 * SCORED])
    two, _ = eval_json(llmrt, tiny_plan, "--kl-base", tmp_path / "two.npy", "--token-ids", path, "--ctx", CTX,
                       "--bos", BOS)
    assert two["chunks"] == 2 and two["scored_positions"] == 2 * SCORED


def test_errors(llmrt, tiny_plan, ids, tmp_path):
    ids, path = ids
    base = [llmrt, "eval", tiny_plan, "--threads", 1]
    clean_error(run(base + ["--perplexity", tmp_path / "missing.txt"]), "missing.txt")
    clean_error(run(base + ["--token-ids", tmp_path / "missing.npy"]), "missing.npy")
    clean_error(run([llmrt, "eval", tmp_path / "nope.fb", "--token-ids", path]), "nope.fb")
    clean_error(run(base + ["--token-ids", path, "--ctx", 1]), "--ctx", "at least 3")
    clean_error(run(base + ["--token-ids", path, "--ctx", 2]), "--ctx", "at least 3")  # nothing to score
    clean_error(run(base + ["--token-ids", path, "--ctx", 129]), "--ctx 129", "max_model_len 128")
    clean_error(run(base + ["--token-ids", path, "--ctx", "abc"]), "--ctx")
    clean_error(run(base + ["--token-ids", path, "--ctx", 64]), "55 tokens", "fewer than one chunk")
    clean_error(run(base + ["--perplexity", TEXT, "--ctx", CTX]), "no tokenizer")
    clean_error(run(base), "exactly one of")
    clean_error(run(base + ["--token-ids", path, "--perplexity", TEXT]), "exactly one of")
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00garbage")
    clean_error(run(base + ["--token-ids", bad]), "bad.npy")
    np.save(tmp_path / "f.npy", np.zeros(40, dtype=np.float32))
    clean_error(run(base + ["--token-ids", tmp_path / "f.npy"]), "int32")
    np.save(tmp_path / "big.npy", np.full(40, VOCAB, dtype=np.int32))
    clean_error(run(base + ["--token-ids", tmp_path / "big.npy", "--ctx", CTX]), "outside the vocabulary")
    np.save(tmp_path / "wrongvocab.npy", np.zeros((SCORED, 100), dtype=np.float16))
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--kl-base", tmp_path / "wrongvocab.npy"]),
                "vocabulary")
    np.save(tmp_path / "ragged.npy", np.zeros((SCORED + 1, VOCAB), dtype=np.float16))
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--kl-base", tmp_path / "ragged.npy"]),
                "whole number of chunks")
    trunc = tmp_path / "trunc.npy"
    np.save(trunc, np.zeros((SCORED, VOCAB), dtype=np.float16))
    trunc.write_bytes(trunc.read_bytes()[:-10])
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--kl-base", trunc]), "trunc.npy", "bytes")
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--batch-chunks", 0]), "--batch-chunks")
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--bos", "x"]), "--bos")
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--cpu-kernels", "x"]), "--cpu-kernels")
    clean_error(run(base + ["--token-ids", path, "--ctx", CTX, "--save-logprobs", tmp_path / "no" / "x.npy"]),
                "--save-logprobs")


def smollm2_plan():
    plan = Path(os.environ.get("LLMC_SMOLLM2_PLAN", REPO / ".cache" / "smollm2-135m-instruct.plan.fb"))
    if not plan.is_file():
        pytest.skip(f"no SmolLM2 plan at {plan} (tools/setup.sh makes it)")
    return plan


def test_text_perplexity_on_smollm2(llmrt, llmc, tmp_path):
    """The text path (tokenizer, BOS) on a real model: one chunk of 256 tokens of the fixture text."""
    plan = smollm2_plan()
    saved = tmp_path / "lp.npy"
    j, _ = eval_json(llmrt, plan, "--perplexity", TEXT, "--ctx", 256, "--chunks", 1, "--save-logprobs", saved)
    assert j["chunks"] == 1 and j["scored_positions"] == 127
    # A trained 135M model on plain English: far below uniform (49152), well above 1.
    assert 3 < j["ppl"] < 200, j
    # The whole text is tokenized at once, as `llmc tokenize` does with the plan's tokenizer.
    proc = subprocess.run([str(llmc), "tokenize", "--tokenizer", str(plan)], input=TEXT.read_bytes(),
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    ids = np.array([int(t) for t in proc.stdout.split()])
    assert j["tokens"] == len(ids) > 8000
    # The saved log-probabilities give the chunk's perplexity (float16 rounding aside).
    lp = np.load(saved).astype(np.float64)
    assert lp.shape == (127, 49152)
    targets = ids[129:256]
    assert j["ppl"] == pytest.approx(np.exp(-lp[np.arange(127), targets].mean()), rel=2e-3)


def test_kv_cache_types_keep_smollm2_predictions(llmrt, llmc, tmp_path):
    """bf16, int8 and fp8 KV caches against the f32 cache on a real model (SmolLM2-135M Q4_1, one
    chunk of 512 tokens of the fixture text): mean KL per scored position and top-1 agreement.
    Measured: mean KL 0.0042 (bf16), 0.0054 (int8), 0.0117 (fp8); the same top token at 96.9%,
    94.5% and 94.9% of positions. Unscaled fp8 (3 mantissa bits, subnormals below 2^-6) moves the
    predictions most; the bounds are about twice the measured figures."""
    gguf = Path(os.environ.get("LLMC_SMOLLM2_GGUF", REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not gguf.is_file():
        pytest.skip(f"no SmolLM2 GGUF at {gguf} (tools/setup.sh downloads it)")
    plans = {}
    for kv in ("f32", "bf16", "int8", "fp8"):
        plans[kv] = tmp_path / f"{kv}.fb"
        ok([llmc, "compile", gguf, "-o", plans[kv], "--target", "none", "-q", "--kv-cache-dtype", kv])
    kl = {}
    for kv, bound in (("bf16", 0.01), ("int8", 0.012), ("fp8", 0.025)):
        j, _ = eval_json(llmrt, plans[kv], "--kl-divergence", plans["f32"], "--file", TEXT, "--ctx", 512,
                         "--chunks", 1)
        kl[kv] = j["kl"]
        print(f"{kv}: mean KL {kl[kv]['mean']:.4g}, same top {kl[kv]['same_top_pct']:.1f}%")
        assert j["scored_positions"] == 255
        assert 0 < kl[kv]["mean"] < bound, (kv, kl[kv])  # rounded (not the f32 cache), within bounds
        assert kl[kv]["same_top_pct"] > 90, (kv, kl[kv])
    assert kl["fp8"]["mean"] > kl["bf16"]["mean"], kl


def test_step_tokens_chunks_prefill_without_changing_logits(llmrt, tiny_plan, tmp_path):
    """`run --step-tokens N` prefills in chunks of N tokens; on the CPU the logits of every prompt
    position and the greedy continuation do not depend on the chunking (batch invariance)."""
    prompt = ",".join(str((7 * i + 3) % 50 + 1) for i in range(23))
    outs, gens = [], []
    for step in (512, 5, 1):
        out = tmp_path / f"all_{step}.npy"
        ok([llmrt, "run", tiny_plan, "--threads", 1, "--max-tokens", 0, "--all-logits-out", out,
            "--prompt-ids", prompt, "--step-tokens", step])
        outs.append(np.load(out))
        gen = ok([llmrt, "run", tiny_plan, "--threads", 1, "--max-tokens", 6, "--temperature", 0, "--ignore-eos",
                  "--json", "--prompt-ids", prompt, "--step-tokens", step])
        gens.append(json.loads(gen.stdout)["outputs"][0]["output_ids"])
    assert outs[0].shape[0] == 23
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    assert gens[1] == gens[0] and gens[2] == gens[0] and len(gens[0]) == 6
    clean_error(run([llmrt, "run", tiny_plan, "--prompt-ids", prompt, "--step-tokens", 0]), "--step-tokens")
