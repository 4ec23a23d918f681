"""llmrt --device cuda without a GPU, on the stand-in CUDA driver (tests/unit/fake_libcuda.cc, built
as <build>/tests/unit/fake-cuda/libcuda.so.1 and found through LD_LIBRARY_PATH): the runtime's real
driver path and what sits on it (device listing, image choice, driver version and memory checks,
CUDA graphs, events, llmrt serve's engine thread) run as on a GPU machine. The fake runs no kernel
(device outputs are zeros), so these tests check that the commands work and fail as they should,
not what the model says; the GPU script checks the numbers on a GPU."""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY, clean_error, fake_env, run

ARGS = ["--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0", "--ignore-eos", "--json"]


def write_byte_tokenizer(path):
    """A byte-level BPE tokenizer.json (GPT-2's byte table, a few merges) that fits the tiny vocabulary."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): i for i, (_, c) in enumerate(sorted(zip(bs, cs)))}
    merges = [["t", "h"], ["th", "e"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    path.write_text(json.dumps({
        "version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level,
        "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [" ".join(m) for m in merges]}}))


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def gpu_plan(llmc, tmp_path_factory):
    """The tiny Llama with a tokenizer, kernel images for sm_90, its GEMMs generated (no cuBLASLt, which
    would need a real driver)."""
    d = tmp_path_factory.mktemp("fake_gpu")
    model = d / "llama"
    shutil.copytree(TINY / "llama", model)
    write_byte_tokenizer(model / "tokenizer.json")
    plan = d / "gpu.fb"
    proc = run([llmc, "compile", model, "-o", plan, "-q", "--target", "sm_90", "--dense-gemm", "generated"])
    if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
        pytest.skip("llmc built without NVRTC: no kernel images to load")
    assert proc.returncode == 0, proc.stderr
    return plan


def test_devices_lists_the_device_and_the_images_it_loads(llmrt, gpu_plan):
    proc = run(env=fake_env(), cmd=[llmrt, "devices", gpu_plan])
    assert proc.returncode == 0, proc.stderr
    assert "CUDA driver 13.0, 1 device(s)" in proc.stdout, proc.stdout
    assert "0: Fake CUDA device (llmc tests), sm_90, 8.0 GiB" in proc.stdout, proc.stdout
    assert re.search(r"plan: \d+ kernels from sm_90 CUBIN", proc.stdout), proc.stdout
    assert "KV cache" in proc.stdout, proc.stdout


def test_run_bench_and_profile_on_the_device(llmrt, gpu_plan):
    env = fake_env()
    res = json.loads(run(env=env, cmd=[llmrt, "run", gpu_plan, "--device", "cuda", *ARGS]).stdout)
    assert len(res["outputs"][0]["output_ids"]) == 4
    for extra in ([], ["--no-cuda-graphs"]):
        proc = run(env=env, cmd=[llmrt, "bench", gpu_plan, "--device", "cuda", "--pp", "8", "--tg", "4", "--batch", "2",
                              "-r", "1", "--json", *extra])
        assert proc.returncode == 0, proc.stderr
        bench = json.loads(proc.stdout)
        assert bench["device"] == "cuda:0 (Fake CUDA device (llmc tests))"
        assert [t["name"] for t in bench["tests"]][:2] == ["pp8", "tg4"]
    prof = run(env=env, cmd=[llmrt, "run", gpu_plan, "--device", "cuda", "--profile", *ARGS])
    assert prof.returncode == 0, prof.stderr
    assert "device time per kernel (CUDA events)" in prof.stderr + prof.stdout, prof.stderr


def test_a_device_the_plan_cannot_run_on_is_a_clear_error(llmrt, gpu_plan):
    older = run(env=fake_env(cc=80), cmd=[llmrt, "run", gpu_plan, "--device", "cuda", *ARGS])
    clean_error(older, "has images for sm_90", "sm_80", "recompile the plan with --target sm_80")
    auto = run(env=fake_env(cc=80), cmd=[llmrt, "run", gpu_plan, "--device", "auto", *ARGS])
    assert auto.returncode == 0 and "running on the CPU" in auto.stderr, auto.stderr
    old_driver = run(env=fake_env(version=12000), cmd=[llmrt, "run", gpu_plan, "--device", "cuda", *ARGS])
    clean_error(old_driver, "CUDA 13.0 or newer; this driver supports CUDA 12.0")
    small = run(env=fake_env(memory_mib=1), cmd=[llmrt, "run", gpu_plan, "--device", "cuda", *ARGS])
    clean_error(small, "does not fit Fake CUDA device", "--memory-utilization 0.9:", "KiB")
    no_graphs = run(env=fake_env(no_graphs=1), cmd=[llmrt, "run", gpu_plan, "--device", "cuda", *ARGS])
    assert no_graphs.returncode == 0, no_graphs.stderr  # graphs are optional: steps launch one by one


def test_serve_answers_from_its_engine_thread(llmrt, gpu_plan):
    """The engine calls the driver from a thread of its own: every request failed with
    CUDA_ERROR_INVALID_CONTEXT on the first GPU run, which the stand-in driver reproduces."""
    proc = subprocess.Popen([str(llmrt), "serve", str(gpu_plan), "--device", "cuda", "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=fake_env())
    log, listening = [], threading.Event()
    port = []

    def read():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port.append(int(m.group(1)))
                listening.set()
        listening.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert listening.wait(120) and port, "".join(log)
        deadline = time.monotonic() + 120
        while True:  # the model loads after the port opens: 503 until then
            conn = http.client.HTTPConnection("127.0.0.1", port[0], timeout=30)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "".join(log)
            time.sleep(0.2)
        for body in ({"prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0},
                     {"prompt": "the", "max_tokens": 3, "temperature": 0.8, "top_p": 0.9, "n": 2}):
            status, data = post(port[0], "/v1/completions", body)
            assert status == 200, (body, data, "".join(log))
            out = json.loads(data)
            assert len(out["choices"]) == body.get("n", 1), out
            assert out["usage"]["completion_tokens"] == body["max_tokens"] * body.get("n", 1), out
        # A bad request is refused and the server goes on (the byte tokenizer has no chat template).
        status, data = post(port[0], "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 400 and b"no chat template" in data, data
        assert post(port[0], "/v1/completions", {"prompt": [4, 5], "max_tokens": 1})[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        reader.join(10)
    assert rc == 0, "".join(log)
    assert "INVALID_CONTEXT" not in "".join(log)
