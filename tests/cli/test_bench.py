"""llmrt bench (pp / tg / batched decode figures, --json, --baseline) and the per-step profiler
(`run --profile`, `--trace`) on the tiny fixture plan. No timing assertions: only structure,
counts and arithmetic on the figures the tool itself reports."""

import json
import re

import pytest

from conftest import clean_error, ok, run


def bench(llmrt, plan, *args, timeout=300):
    return run([llmrt, "bench", plan, "--threads", 1, *args], timeout=timeout)


@pytest.fixture(scope="module")
def program_ops(llmc, tiny_plan):
    """{op kind: steps} of the plan's forward program, from `llmc inspect --json`."""
    info = json.loads(ok([llmc, "inspect", tiny_plan, "--json"]).stdout)
    assert info["program"]["name"] == "forward"
    return info["program"]["ops"], info["program"]["steps"]


def table_rows(stdout):
    """Rows of the bench table: {test: [tokens, batch, mean, stddev, (change)]}."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"(pp|tg)\d+(-b\d+)?(@d\d+)?", cells[0]):
            mean, sd = cells[3].split("±")
            rows[cells[0]] = [int(cells[1]), int(cells[2]), float(mean), float(sd)] + cells[4:]
    return rows


def profile_sections(stderr):
    """Profile tables in stderr: list of (summary line, {op: (calls, ms, us, pct, weights GB/s or None)},
    {kernel: ...})."""
    sections, cur, part, ends = [], None, None, None
    for line in stderr.splitlines():
        if line.startswith("profile: "):
            cur = (line, {}, {})
            sections.append(cur)
            part = None
        elif cur is not None and re.match(r"^  (op|kernel)\s+calls\s+total ms", line):
            part = cur[1] if line.split()[0] == "op" else cur[2]
            # Columns are right-aligned to their headers' ends (the name column is left-aligned).
            ends = [line.index(h) + len(h) for h in ("calls", "total ms", "mean us", "%")]
            if "weights GB/s" in line:
                ends.append(line.index("weights GB/s") + len("weights GB/s"))
        elif cur is not None and part is not None and line.startswith("  "):
            fields = [line[a:b].strip() for a, b in zip([ends[0] - 10] + ends, ends)]
            name = line[2:ends[0] - 10].strip()
            assert name and re.fullmatch(r"\d+", fields[0]) and all(
                re.fullmatch(r"[\d.]*", f) for f in fields[1:]), f"bad profile row: {line!r}"
            gbps = float(fields[4]) if len(fields) > 4 and fields[4] else None
            part[name] = (int(fields[0]), float(fields[1]), float(fields[2] or 0), float(fields[3]), gbps)
        else:
            part = None
    return sections


def test_table_and_json(llmrt, tiny_plan, tmp_path):
    out = tmp_path / "r.json"
    proc = bench(llmrt, tiny_plan, "--pp", "16,8", "--tg", 4, "--batch", "2,3", "-r", 2, "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0]
    assert header.startswith("llmrt bench: ") and tiny_plan.name in header
    assert "threads 1" in header and re.search(r"ISA (avx2\+fma|scalar)", header), header
    assert re.search(r"^peak RSS: [\d.]+ MiB$", proc.stdout, re.M), proc.stdout

    j = json.loads(out.read_text())
    for key in ("plan", "model", "threads", "isa", "repetitions", "seed", "step_tokens", "tests", "peak_rss_bytes"):
        assert key in j, key
    assert j["threads"] == 1 and j["repetitions"] == 2 and j["peak_rss_bytes"] > 0
    assert [t["name"] for t in j["tests"]] == ["pp16", "pp8", "tg4", "tg4-b2", "tg4-b3"]
    assert [(t["kind"], t["tokens"], t["batch"]) for t in j["tests"]] == [
        ("pp", 16, 1), ("pp", 8, 1), ("tg", 4, 1), ("batch", 4, 2), ("batch", 4, 3)]
    rows = table_rows(proc.stdout)
    assert list(rows) == ["pp16", "pp8", "tg4", "tg4-b2", "tg4-b3"]
    for t in j["tests"]:
        assert len(t["samples"]) == 2 and len(t["seconds"]) == 2
        assert all(s > 0 for s in t["samples"])
        # tokens/s is the test's tokens over each run's seconds; mean and sample stddev of those.
        for tps, sec in zip(t["samples"], t["seconds"]):
            assert tps == pytest.approx(t["tokens"] * t["batch"] / sec, rel=1e-9)
        mean = sum(t["samples"]) / 2
        assert t["tokens_per_s"] == pytest.approx(mean, rel=1e-9)
        assert t["stddev"] == pytest.approx(abs(t["samples"][0] - t["samples"][1]) / 2 ** 0.5, rel=1e-6, abs=1e-9)
        tokens, batch, tmean, tsd = rows[t["name"]][:4]
        assert (tokens, batch) == (t["tokens"] * t["batch"], t["batch"])
        assert tmean == pytest.approx(t["tokens_per_s"], abs=0.006)
        assert tsd == pytest.approx(t["stddev"], abs=0.006)


def test_json_on_stdout_and_skipping_tests(llmrt, tiny_plan):
    proc = bench(llmrt, tiny_plan, "--pp", 0, "--tg", 3, "--batch", "0", "-r", 1, "--json")
    assert proc.returncode == 0, proc.stderr
    j = json.loads(proc.stdout)  # nothing else on stdout
    assert [t["name"] for t in j["tests"]] == ["tg3"]
    assert j["tests"][0]["stddev"] == 0 and j["repetitions"] == 1
    assert "change_pct" not in j["tests"][0] and "baseline" not in j


def test_sampled_decode(llmrt, tiny_plan):
    """--temperature/--top-p/--top-k/--min-p: the decode tests draw every token with those settings
    (seeded by --seed), named in the header and the JSON; greedy by default."""
    proc = bench(llmrt, tiny_plan, "--pp", 0, "--tg", 4, "--batch", 2, "-r", 1, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sampling"] == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    args = ("--pp", 0, "--tg", 4, "--batch", 2, "-r", 1, "--temperature", 0.75, "--top-p", 0.5, "--top-k", 7,
            "--min-p", 0.125)
    proc = bench(llmrt, tiny_plan, *args, "--no-device-sampling")  # (a CPU plan: nothing to turn off)
    assert proc.returncode == 0, proc.stderr
    assert "sampling temperature 0.75, top_p 0.5, top_k 7, min_p 0.125" in proc.stdout.splitlines()[0], proc.stdout
    assert list(table_rows(proc.stdout)) == ["tg4", "tg4-b2"]
    j = json.loads(bench(llmrt, tiny_plan, *args, "--json").stdout)
    assert j["sampling"] == {"temperature": 0.75, "top_p": 0.5, "top_k": 7, "min_p": 0.125}
    assert "greedy" in bench(llmrt, tiny_plan, "--pp", 0, "--tg", 2, "--batch", 0, "-r", 1).stdout.splitlines()[0]


def test_baseline_changes(llmrt, tiny_plan, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"tests": [{"name": "pp8", "tokens_per_s": 100.0},
                                          {"name": "tg2", "tokens_per_s": 3.5},
                                          {"name": "tg9", "tokens_per_s": 1.0}],
                                "peak_rss_bytes": 1024 * 1024}))
    out = tmp_path / "new.json"
    proc = bench(llmrt, tiny_plan, "--pp", 8, "--tg", 2, "--batch", 2, "-r", 1, "--baseline", base,
                 "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    j = json.loads(out.read_text())
    rows = table_rows(proc.stdout)
    figures = {t["name"]: t for t in j["tests"]}
    for name, old in (("pp8", 100.0), ("tg2", 3.5)):
        change = (figures[name]["tokens_per_s"] - old) / old * 100
        assert figures[name]["change_pct"] == pytest.approx(change, rel=1e-9)
        assert rows[name][4] == f"{change:+.1f}%"
    assert figures["tg2-b2"]["change_pct"] is None and rows["tg2-b2"][4] == "n/a"
    rss_change = (j["peak_rss_bytes"] - 1024 * 1024) / (1024 * 1024) * 100
    assert j["peak_rss_change_pct"] == pytest.approx(rss_change, rel=1e-9)
    assert f"({rss_change:+.1f}%)" in proc.stdout

    # A previous --json-out is itself a valid baseline: every figure gets a change.
    proc = bench(llmrt, tiny_plan, "--pp", 8, "--tg", 2, "--batch", 2, "-r", 1, "--baseline", out)
    assert proc.returncode == 0, proc.stderr
    assert all(re.fullmatch(r"[+-]\d+\.\d%", r[4]) for r in table_rows(proc.stdout).values()), proc.stdout


@pytest.mark.parametrize("args,needle", [
    (["--pp", "abc"], "--pp"),
    (["--pp", "-1"], "--pp"),
    (["--pp", "512,"], "--pp"),
    (["--tg", "2.5"], "--tg"),
    (["-r", "0"], "--repetitions"),
    (["--threads", "-2"], "--threads"),
    (["--seed", "x"], "--seed"),
    (["--batch", "8,,2"], "--batch"),
    (["--batch", "-4"], "--batch"),
    (["--pp", "0", "--tg", "0"], "nothing to measure"),
    (["--pp", "100000"], "context"),
    (["--tg", "100000"], "context"),
    (["--batch", "100000"], "--batch"),
    (["--temperature", "-1"], "temperature"),
    (["--temperature", "hot"], "--temperature"),
    (["--top-p", "0"], "top_p"),
    (["--top-k", "-3"], "--top-k"),
    (["--min-p", "1.5"], "min_p"),
])
def test_bad_flags(llmrt, tiny_plan, args, needle):
    clean_error(bench(llmrt, tiny_plan, "--tg", 2, "--pp", 4, *args), needle)


def test_bad_files(llmrt, tiny_plan, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    clean_error(bench(llmrt, tiny_plan, "--baseline", bad), "--baseline", "not valid JSON")
    bad.write_text('{"tests": [{"name": "pp8"}]}')
    clean_error(bench(llmrt, tiny_plan, "--baseline", bad), "--baseline", "tokens_per_s")
    clean_error(bench(llmrt, tiny_plan, "--baseline", tmp_path / "none.json"), "--baseline")
    clean_error(bench(llmrt, tmp_path / "none.fb"), "none.fb")
    garbage = tmp_path / "garbage.fb"
    garbage.write_bytes(b"\x00" * 64)
    assert bench(llmrt, garbage).returncode == 1
    proc = bench(llmrt, tiny_plan, "--pp", 4, "--tg", 2, "--batch", 0, "-r", 1, "--trace", tmp_path / "no" / "t.json")
    clean_error(proc, "trace")
    proc = run([llmrt, "bench", tiny_plan, "--no-such-flag"])
    assert proc.returncode > 0 and "--no-such-flag" in proc.stderr + proc.stdout


def test_run_profile_matches_program(llmrt, tiny_plan, program_ops):
    ops, steps = program_ops
    proc = ok([llmrt, "run", tiny_plan, "--prompt-ids", "1,2,3", "--max-tokens", 3, "--ignore-eos",
               "--temperature", 0, "--threads", 1, "--json", "--profile"])
    assert len(json.loads(proc.stdout)["outputs"][0]["output_ids"]) == 3  # stdout is untouched
    sections = profile_sections(proc.stderr)
    assert len(sections) == 1, proc.stderr
    summary, by_op, by_kernel = sections[0]
    # Prefill of the prompt, then one decode step per further token: 3 forward() calls, 3 + 1 + 1 rows.
    assert summary.startswith("profile: 3 forward() calls, 5 rows"), summary
    assert set(by_op) == set(ops)
    for op, n in ops.items():
        assert by_op[op][0] == 3 * n, (op, by_op[op])
    assert sum(r[0] for r in by_kernel.values()) == 3 * steps
    assert sum(r[3] for r in by_op.values()) <= 100.5
    # Steps that read weights whole (linear, logits) show their weight bandwidth; the embedding
    # gather and attention do not.
    assert by_op["Linear"][4] > 0 and by_op["Logits"][4] > 0, by_op
    assert by_op["Embedding"][4] is None and by_op["PagedAttention"][4] is None, by_op
    # Rows are sorted by total time. Kernels split op kinds (by shape), never merge them, and
    # fold layer indices.
    totals = [r[1] for r in by_op.values()]
    assert totals == sorted(totals, reverse=True)
    for op in ops:
        assert sum(r[0] for k, r in by_kernel.items() if k.split()[0] == op) == by_op[op][0], op
    assert any(k.startswith("Linear ") and "->" in k for k in by_kernel), list(by_kernel)
    assert not any(re.search(r"\.\d+\.", k) for k in by_kernel), list(by_kernel)


def check_trace(path, steps, ops):
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert all(e["ph"] in ("X", "M") for e in events)
    forwards = [e for e in events if e["ph"] == "X" and e["name"] == "forward"]
    step_events = [e for e in events if e["ph"] == "X" and e["name"] != "forward"]
    assert {e["name"] for e in step_events} <= set(ops)
    for e in forwards + step_events:
        assert e["pid"] == 1 and e["tid"] == 1 and e["dur"] >= 0 and isinstance(e["ts"], (int, float))
    # Each forward() call holds exactly one event per program step, inside its time span.
    for f in forwards:
        inside = [e for e in step_events if f["ts"] - 0.002 <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"] + 0.002]
        assert len(inside) == steps, (len(inside), steps)
        assert sorted(int(e["args"]["step"].split()[1]) for e in inside) == list(range(steps))
        assert all(e["args"]["rows"] == f["args"]["rows"] for e in inside)
    assert len(step_events) == steps * len(forwards)
    return forwards


def test_run_trace(llmrt, tiny_plan, program_ops, tmp_path):
    ops, steps = program_ops
    path = tmp_path / "trace.json"
    proc = ok([llmrt, "run", tiny_plan, "--prompt-ids", "5,6,7,8", "--max-tokens", 2, "--ignore-eos",
               "--temperature", 0, "--threads", 1, "--json", "--trace", path])
    assert "profile:" not in proc.stderr  # --trace alone prints no table
    forwards = check_trace(path, steps, ops)
    assert [f["args"]["rows"] for f in sorted(forwards, key=lambda f: f["ts"])] == [4, 1]
    clean_error(run([llmrt, "run", tiny_plan, "--prompt-ids", "1", "--max-tokens", 1, "--trace",
                     tmp_path / "missing" / "t.json"]), "trace")


def test_depth_times_decoding_after_long_prompts(llmrt, tiny_plan, tmp_path):
    out = tmp_path / "d.json"
    proc = bench(llmrt, tiny_plan, "--pp", 0, "--tg", 5, "--batch", 2, "--depth", 20, "-r", 2, "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    j = json.loads(out.read_text())
    assert [(t["name"], t["depth"]) for t in j["tests"]] == [("tg5@d20", 20), ("tg5-b2@d20", 20)]
    assert list(table_rows(proc.stdout)) == ["tg5@d20", "tg5-b2@d20"]
    for t in j["tests"]:
        # Only decoding is timed: the tokens after each sequence's first one.
        for tps, sec in zip(t["samples"], t["seconds"]):
            assert tps == pytest.approx((t["tokens"] - 1) * t["batch"] / sec, rel=1e-9)
    # The first token is not timed, so one decode token is too few; the context must hold both.
    clean_error(bench(llmrt, tiny_plan, "--pp", 0, "--tg", 1, "--depth", 8), "--tg must be at least 2")
    clean_error(bench(llmrt, tiny_plan, "--pp", 0, "--tg", 4, "--depth", 1 << 20), "after a prompt of 1048576")


def test_bench_profile_and_trace(llmrt, tiny_plan, program_ops, tmp_path):
    ops, steps = program_ops
    path = tmp_path / "bench_trace.json"
    proc = bench(llmrt, tiny_plan, "--pp", 6, "--tg", 3, "--batch", 2, "-r", 2, "--profile", "--trace", path)
    assert proc.returncode == 0, proc.stderr
    sections = profile_sections(proc.stderr)
    # One table per test, over the timed runs only (warm-up excluded): pp6 is one forward() per run,
    # tg3 and tg3-b2 three per run.
    assert [s[0].split(",")[0] for s in sections] == ["profile: 2 forward() calls", "profile: 6 forward() calls",
                                                      "profile: 6 forward() calls"], proc.stderr
    assert [s[0].split(",")[1].strip() for s in sections] == ["12 rows", "6 rows", "12 rows"]
    for _, by_op, _ in sections:
        assert set(by_op) == set(ops)
    forwards = check_trace(path, steps, ops)
    phases = {}
    for f in forwards:
        phases.setdefault(f["args"]["phase"], []).append((f["args"]["rows"], f["args"]["seqs"]))
    assert phases == {"pp6": [(6, 1)] * 2, "tg3": [(1, 1)] * 6, "tg3-b2": [(2, 2)] * 6}
