"""llmrt bench-serve against a fake OpenAI-compatible server (fake_openai_server.py, which logs
every request body) and, when `llmrt serve` is built, against the real server on a tiny plan."""

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, clean_error, ok, run

HERE = Path(__file__).resolve().parent
FIGURES = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
           "input_throughput", "output_throughput", "total_token_throughput"] + [
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p90", "p99")]


class FakeServer:
    def __init__(self, tmp_path, *args):
        self.log = tmp_path / f"requests_{id(self)}.jsonl"
        self.proc = subprocess.Popen([sys.executable, str(HERE / "fake_openai_server.py"), "--log", str(self.log), *map(str, args)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = line.split()[-1]

    def requests(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stats(self):
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def fake(tmp_path):
    servers = []

    def start(*args):
        servers.append(FakeServer(tmp_path, *args))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def bench(llmrt, *args, timeout=300):
    return run([llmrt, "bench-serve", *args], timeout=timeout)


def table_value(stdout, label):
    for line in stdout.splitlines():
        if line.startswith(label):
            return line[len(label):].split()
    raise AssertionError(f"'{label}' not in:\n{stdout}")


def test_counts_lengths_and_json(llmrt, fake, tmp_path):
    srv = fake("--chunk-delay", "0.002")
    out = tmp_path / "r.json"
    proc = bench(llmrt, "--url", srv.url, "--num-prompts", 24, "--random-input-len", 20, "--random-output-len", 8,
                 "--random-range-ratio", 0.5, "--max-concurrency", 4, "--seed", 7, "--vocab-size", 300,
                 "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    reqs = srv.requests()
    assert len(reqs) == 24
    for r in reqs:
        assert r["model"] == "fake-model"  # the first of GET /v1/models
        assert r["stream"] is True and r["ignore_eos"] is True and r["temperature"] == 0
        assert r["stream_options"]["include_usage"] is True
        assert isinstance(r["prompt"], list) and 10 <= len(r["prompt"]) <= 30
        assert all(isinstance(t, int) and 0 <= t < 300 for t in r["prompt"])
        assert 4 <= r["max_tokens"] <= 12
    assert len({len(r["prompt"]) for r in reqs}) > 1, "lengths should vary with --random-range-ratio 0.5"
    j = json.loads(out.read_text())
    for key in FIGURES:
        assert key in j, key
    assert j["completed"] == 24 and j["failed"] == 0
    assert j["total_output_tokens"] == sum(r["max_tokens"] for r in reqs)
    assert j["total_input_tokens"] == sum(len(r["prompt"]) for r in reqs)
    assert sorted(j["output_lens"]) == sorted(r["max_tokens"] for r in reqs)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert 0 <= j[f"median_{metric}_ms"] <= j[f"p90_{metric}_ms"] <= j[f"p99_{metric}_ms"]
    assert j["mean_ttft_ms"] <= j["mean_e2el_ms"]
    # The printed table carries the same figures.
    assert table_value(proc.stdout, "Successful requests:")[0] == "24"
    assert table_value(proc.stdout, "Failed requests:")[0] == "0"
    assert table_value(proc.stdout, "Total generated tokens:")[0] == str(j["total_output_tokens"])
    assert float(table_value(proc.stdout, "Output token throughput (tok/s):")[0]) == pytest.approx(
        j["output_throughput"], abs=0.01)
    for label in ("Mean TTFT (ms):", "Median TPOT (ms):", "P90 ITL (ms):", "P99 E2EL (ms):"):
        table_value(proc.stdout, label)
    assert "24/24" in proc.stderr  # progress bar
    assert srv.stats()["max_in_flight"] <= 4


def test_same_seed_same_prompts(llmrt, fake, tmp_path):
    runs = []
    for seed in (3, 3, 4):
        srv = fake()
        ok([llmrt, "bench-serve", "--url", srv.url, "--num-prompts", 6, "--random-input-len", 12,
            "--random-output-len", 3, "--random-range-ratio", 0.3, "--seed", seed, "--vocab-size", 1000])
        runs.append(sorted(json.dumps([r["prompt"], r["max_tokens"]]) for r in srv.requests()))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_vocabulary_from_models_card(llmrt, fake):
    srv = fake("--vocab-size", 7)
    proc = bench(llmrt, "--url", srv.url, "--num-prompts", 3, "--random-input-len", 60, "--random-output-len", 2)
    assert proc.returncode == 0, proc.stderr
    ids = [t for r in srv.requests() for t in r["prompt"]]
    assert len(ids) == 180 and max(ids) < 7 and len(set(ids)) > 1
    # Unknown vocabulary: the fallback range is announced.
    plain = fake()
    proc = bench(llmrt, "--url", plain.url, "--num-prompts", 1, "--random-input-len", 5, "--random-output-len", 1)
    assert proc.returncode == 0 and "--vocab-size" in proc.stderr, proc.stderr


def test_exact_lengths_without_usage_and_with_rate(llmrt, fake, tmp_path):
    srv = fake("--no-usage")
    out = tmp_path / "r.json"
    proc = bench(llmrt, "--url", srv.url, "--model", "named", "--num-prompts", 10, "--random-input-len", 9,
                 "--random-output-len", 5, "--request-rate", 500, "--json-out", out, "--vocab-size", 50)
    assert proc.returncode == 0, proc.stderr
    j = json.loads(out.read_text())
    # Output tokens counted from the chunks; input tokens from the ids sent.
    assert j["total_output_tokens"] == 50 and j["total_input_tokens"] == 90
    assert j["request_rate"] == 500
    assert all(r["model"] == "named" and len(r["prompt"]) == 9 and r["max_tokens"] == 5 for r in srv.requests())


def test_baseline_prints_change(llmrt, fake, tmp_path):
    srv = fake()
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"completed": 4, "output_throughput": 10.0, "mean_ttft_ms": 0}))
    out = tmp_path / "new.json"
    proc = bench(llmrt, "--url", srv.url, "--num-prompts", 8, "--random-input-len", 4, "--random-output-len", 2,
                 "--vocab-size", 50, "--baseline", base, "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    new = json.loads(out.read_text())
    assert table_value(proc.stdout, "Successful requests:")[:2] == ["8", "+100.0%"]
    change = (new["output_throughput"] - 10.0) / 10.0 * 100
    assert table_value(proc.stdout, "Output token throughput (tok/s):")[1] == f"{change:+.1f}%"
    assert "n/a" in " ".join(table_value(proc.stdout, "Median TTFT (ms):"))  # not in the baseline
    # A previous --json-out is a valid baseline: every figure gets a change.
    proc = bench(llmrt, "--url", srv.url, "--num-prompts", 8, "--random-input-len", 4, "--random-output-len", 2,
                 "--vocab-size", 50, "--baseline", out)
    assert proc.returncode == 0, proc.stderr
    assert table_value(proc.stdout, "Total generated tokens:")[:2] == ["16", "+0.0%"]


def test_bad_baseline_fails_before_sending(llmrt, fake, tmp_path):
    srv = fake()
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    clean_error(bench(llmrt, "--url", srv.url, "--num-prompts", 2, "--baseline", bad), "--baseline")
    clean_error(bench(llmrt, "--url", srv.url, "--num-prompts", 2, "--baseline", tmp_path / "none.json"), "--baseline")
    assert srv.requests() == []


def test_failed_requests_are_counted(llmrt, fake, tmp_path):
    srv = fake("--fail-every", 3)
    out = tmp_path / "r.json"
    proc = bench(llmrt, "--url", srv.url, "--num-prompts", 12, "--random-input-len", 4, "--random-output-len", 3,
                 "--vocab-size", 50, "--max-concurrency", 1, "--json-out", out)
    assert proc.returncode == 2, proc.stderr
    assert "4 of 12 requests failed" in proc.stderr and "HTTP 500" in proc.stderr and "injected failure" in proc.stderr
    j = json.loads(out.read_text())
    assert j["completed"] == 8 and j["failed"] == 4
    assert j["total_output_tokens"] == 24
    assert sum(1 for e in j["errors"] if e) == 4

    everything = fake("--fail-every", 1)
    proc = bench(llmrt, "--url", everything.url, "--num-prompts", 5, "--random-input-len", 4, "--vocab-size", 50,
                 "--json-out", out)
    assert proc.returncode == 2, proc.stderr
    j = json.loads(out.read_text())
    assert j["completed"] == 0 and j["failed"] == 5 and j["total_output_tokens"] == 0
    assert table_value(proc.stdout, "Successful requests:")[0] == "0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server(llmrt, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    clean_error(bench(llmrt, "--url", url, "--num-prompts", 2), "cannot reach")
    proc = bench(llmrt, "--url", url, "--model", "m", "--num-prompts", 3, "--random-input-len", 2,
                 "--vocab-size", 10)
    assert proc.returncode == 2 and "3 of 3 requests failed" in proc.stderr, proc.stderr


def test_dataset_and_chat(llmrt, fake, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "tell me a story", "output_len": 3}\n\n'
                    '{"prompt": [5, 6, 7, 8], "output_len": 6}\n'
                    '{"prompt": "one two", "output_len": 1}\n')
    srv = fake()
    out = tmp_path / "r.json"
    proc = bench(llmrt, "--url", srv.url, "--dataset", data, "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    reqs = srv.requests()
    assert sorted(r["max_tokens"] for r in reqs) == [1, 3, 6]
    assert sorted(json.dumps(r["prompt"]) for r in reqs) == sorted(
        [json.dumps("tell me a story"), json.dumps([5, 6, 7, 8]), json.dumps("one two")])
    j = json.loads(out.read_text())
    assert j["completed"] == 3 and j["total_output_tokens"] == 10
    assert j["total_input_tokens"] == 4 + 4 + 2  # from usage (the fake counts words)

    chat = fake()
    proc = bench(llmrt, "--url", chat.url, "--dataset", data, "--endpoint", "/v1/chat/completions",
                 "--num-prompts", 5, "--json-out", out)
    assert proc.returncode == 0, proc.stderr
    reqs = chat.requests()
    assert len(reqs) == 5 and all(r["messages"][0]["role"] == "user" for r in reqs)
    assert json.loads(out.read_text())["total_output_tokens"] == 3 + 6 + 1 + 3 + 6


@pytest.mark.parametrize("args,needle", [
    (["--request-rate", "fast"], "--request-rate"),
    (["--request-rate", "-2"], "--request-rate"),
    (["--random-range-ratio", "1.5"], "--random-range-ratio"),
    (["--num-prompts", "0"], "--num-prompts"),
    (["--max-concurrency", "-1"], "--max-concurrency"),
    (["--url", "ftp://host"], "http://"),
    (["--url", "https://host"], "https"),
    (["--url", "http://host:99999"], "port"),
    (["--endpoint", "/v1/chat/completions"], "--dataset"),
    (["--serve-args", "--threads 2"], "--plan"),
    (["--dataset", "/nonexistent/d.jsonl"], "--dataset"),
])
def test_bad_flags(llmrt, args, needle):
    clean_error(bench(llmrt, "--model", "m", *args), needle)


@pytest.mark.parametrize("line,needle", [
    ("not json", "not a JSON object"),
    ('{"output_len": 3}', "prompt"),
    ('{"prompt": "x", "output_len": 0}', "output_len"),
    ('{"prompt": [1, "a"], "output_len": 2}', "token ids"),
])
def test_bad_dataset_lines(llmrt, tmp_path, line, needle):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "fine", "output_len": 2}\n' + line + "\n")
    clean_error(bench(llmrt, "--url", "http://127.0.0.1:9", "--model", "m", "--dataset", data), needle, "d.jsonl:2")


def serve_available(llmrt):
    proc = run([llmrt, "serve", "--help"])
    return proc.returncode == 0 and "not yet available" not in proc.stdout + proc.stderr


def test_plan_starts_and_stops_llmrt_serve(llmrt, tmp_path):
    """--plan runs `llmrt serve` on the default real model (as tests/server does) for the run."""
    plan = Path(os.environ.get("LLMC_SMOLLM2_PLAN", REPO / ".cache" / "smollm2-135m-instruct.plan.fb"))
    if not plan.is_file():
        pytest.skip(f"no SmolLM2 plan at {plan} (set LLMC_SMOLLM2_PLAN)")
    if not serve_available(llmrt):
        pytest.skip("llmrt serve is not built yet")
    out = tmp_path / "r.json"
    proc = bench(llmrt, "--plan", plan, "--num-prompts", 6, "--random-input-len", 12, "--random-output-len", 4,
                 "--max-concurrency", 3, "--json-out", out,
                 "--serve-args", "--kv-cache-memory 512MiB --max-model-len 2048", timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "listening on" in proc.stderr and "llmrt serve stopped (exit status 0)" in proc.stderr
    j = json.loads(out.read_text())
    assert j["completed"] == 6 and j["failed"] == 0
    # Exact lengths: ids as the prompt, ignore_eos and max_tokens; the server's usage agrees.
    assert j["total_input_tokens"] == 72 and j["total_output_tokens"] == 24
    # A plan the server refuses: the benchmark says why and exits cleanly.
    bad = tmp_path / "bad.plan.fb"
    with open(plan, "rb") as f:
        bad.write_bytes(f.read(4096))
    clean_error(bench(llmrt, "--plan", bad, "--num-prompts", 1))
