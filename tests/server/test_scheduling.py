"""The scheduler seen through the HTTP API on the real model: many concurrent streams, a KV pool
too small for everyone (preemption), a shared prefix (prefix cache) and chunked prefill. Every
answer produced under load must equal the same request run alone."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import MODEL, Server

WORDS = ("river mountain quiet lantern copper garden violet thunder harbor meadow whisper "
         "orchard silver canyon ember glacier market velvet compass saffron").split()


def prompt_text(i, words):
    return f"Story {i}: " + " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(words))


def requests_mix(count):
    """Mixed prompt and answer lengths; even ones greedy, odd ones seeded sampling."""
    out = []
    for i in range(count):
        r = dict(prompt=prompt_text(i, 3 + (i * 5) % 40), max_tokens=2 + (i * 3) % 15)
        if i % 2:
            r.update(temperature=0.8, top_p=0.95, seed=100 + i)
        else:
            r.update(temperature=0.0)
        out.append(r)
    return out


def stream_completion(client, req):
    """Streams one completion; returns (text, finish_reason, chunks with text)."""
    text, finish, chunks = [], None, 0
    stream = client.completions.create(model=MODEL, stream=True, extra_body={"ignore_eos": True}, **req)
    for chunk in stream:
        for c in chunk.choices:
            if c.text:
                text.append(c.text)
                chunks += 1
            if c.finish_reason:
                finish = c.finish_reason
    return "".join(text), finish, chunks


def alone(client, req):
    r = client.completions.create(model=MODEL, extra_body={"ignore_eos": True}, **req)
    return r.choices[0].text, r.choices[0].finish_reason


def wait_idle(server, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.gauge("llmrt:num_requests_running") == 0 and server.gauge("llmrt:num_requests_waiting") == 0:
            return
        time.sleep(0.2)
    pytest.fail(f"requests still running after {timeout}s")


def test_64_concurrent_streams_equal_each_run_alone(server, client):
    reqs = requests_mix(64)
    with ThreadPoolExecutor(max_workers=64) as pool:
        together = list(pool.map(lambda r: stream_completion(client, r), reqs))
    wait_idle(server)
    assert server.gauge("llmrt:kv_cache_usage_perc") == 0, "KV blocks still referenced after all finished"
    for i, (req, (text, finish, _)) in enumerate(zip(reqs, together)):
        want_text, want_finish = alone(client, req)
        assert finish == want_finish == "length", f"request {i}"
        assert text == want_text, f"request {i} ({'seeded' if i % 2 else 'greedy'}) differs under load"


def test_small_kv_pool_preempts_and_answers_stay_correct(openai_module):
    # max_model_len 256 = 16 blocks of 16 tokens; 48 blocks hold three full-length sequences,
    # while eight requests of ~70 + 120 tokens want ~100 blocks at their peak.
    block_bytes = 30 * 3 * 64 * 4 * 2 * 16  # SmolLM2-135M: layers, kv heads, head dim, fp32, K+V, block
    s = Server("--kv-cache-memory", str(48 * block_bytes), "--max-model-len", "256",
               "--no-enable-prefix-caching")
    try:
        client = openai_module.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=600)
        reqs = [dict(prompt=prompt_text(i, 60), max_tokens=120, temperature=0.0) for i in range(8)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            together = list(pool.map(lambda r: stream_completion(client, r), reqs))
        wait_idle(s)
        assert s.gauge("llmrt:num_preemptions_total") > 0, "the pool was sized to force preemption"
        assert s.gauge("llmrt:kv_cache_usage_perc") == 0
        for i, (req, (text, finish, _)) in enumerate(zip(reqs, together)):
            assert (text, finish) == alone(client, req), f"request {i} changed by preemption"
    finally:
        assert s.stop() == 0


def test_shared_prefix_hits_the_prefix_cache(server, client):
    prefix = prompt_text(999, 150)
    req = dict(prompt=prefix + " The end.", max_tokens=8, temperature=0.0)
    first = client.completions.create(model=MODEL, **req)
    second = client.completions.create(model=MODEL, **req)
    cached_first = first.usage.prompt_tokens_details.cached_tokens if first.usage.prompt_tokens_details else 0
    cached_second = second.usage.prompt_tokens_details.cached_tokens
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    assert cached_second > cached_first
    assert cached_second >= first.usage.prompt_tokens - 16  # all full blocks but the last token's
    assert second.choices[0].text == first.choices[0].text
    # A different ending shares the full blocks of the common prefix.
    third = client.completions.create(model=MODEL, prompt=prefix + " Another ending!", max_tokens=4, temperature=0.0)
    assert third.usage.prompt_tokens_details.cached_tokens >= 128


def test_chunked_prefill_keeps_running_streams_going(openai_module):
    s = Server("--max-num-batched-tokens", "32")
    try:
        client = openai_module.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=600)
        started, long_sent, long_done = threading.Event(), threading.Event(), threading.Event()
        during = []

        def runner():
            stream = client.completions.create(model=MODEL, prompt="Count with me: one, two,", max_tokens=400,
                                               temperature=0.0, stream=True, extra_body={"ignore_eos": True})
            for chunk in stream:
                started.set()
                if long_sent.is_set() and not long_done.is_set():
                    during.append(chunk)
                if long_done.is_set():
                    stream.close()
                    return

        t = threading.Thread(target=runner)
        t.start()
        assert started.wait(300)
        long_prompt = prompt_text(7, 500)
        long_sent.set()
        r = client.completions.create(model=MODEL, prompt=long_prompt, max_tokens=1, temperature=0.0)
        long_done.set()
        t.join(300)
        assert r.usage.prompt_tokens > 500
        # The long prompt needs >= prompt_tokens / 31 steps (a decode row takes one of the 32);
        # with decodes scheduled first in every step the running stream got a token in most of them.
        steps = r.usage.prompt_tokens // 31
        assert len(during) >= steps // 2, f"{len(during)} tokens streamed during a {steps}-step prefill"
    finally:
        assert s.stop() == 0
