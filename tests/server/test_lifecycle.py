"""Authentication, a full waiting queue, clients that leave mid-stream, and SIGTERM."""

import json
import signal
import threading
import time

import pytest

from conftest import MODEL, Server, sse_events

LONG = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 1000, "temperature": 0,
        "ignore_eos": True, "stream": True}


def wait_for(what, predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def stream_end(events):
    """Reads a stream to its end: (last finish_reason seen, whether [DONE] arrived)."""
    finish = None
    for data in events:
        if data == "[DONE]":
            return finish, True
        for c in json.loads(data)["choices"]:
            finish = c["finish_reason"] or finish
    return finish, False


def open_stream(server, body, headers=None):
    """Starts a streaming request; returns (connection, response) with the headers read."""
    conn = server.connection()
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=hdrs)
    resp = conn.getresponse()
    return conn, resp


def test_api_key(guarded, openai_module):
    url = guarded.url + "/v1"
    for key in ("wrong", "sesame-but-longer", ""):
        bad = openai_module.OpenAI(base_url=url, api_key=key or "x", max_retries=0)
        with pytest.raises(openai_module.AuthenticationError) as e:
            bad.completions.create(model=MODEL, prompt="hi", max_tokens=1)
        assert e.value.status_code == 401
    status, _, body = guarded.request("POST", "/v1/completions", {"model": MODEL, "prompt": "hi"})
    assert status == 401 and json.loads(body)["error"]["code"] == 401
    status, _, _ = guarded.request("GET", "/v1/models")
    assert status == 401
    good = openai_module.OpenAI(base_url=url, api_key="sesame", max_retries=0)
    assert good.completions.create(model=MODEL, prompt="hi", max_tokens=2).usage.completion_tokens >= 1
    # As in vLLM, /health and /metrics stay open.
    assert guarded.get("/health")[0] == 200
    assert guarded.get("/metrics")[0] == 200


def test_full_queue_is_429(guarded, openai_module):
    auth = {"Authorization": "Bearer sesame"}
    # One sequence at a time and a queue of one: a running stream and a waiting one fill it.
    running = open_stream(guarded, LONG, auth)
    events = sse_events(running[1])
    first = json.loads(next(events))
    assert first["choices"][0]["text"] is not None
    waiting = open_stream(guarded, LONG, auth)
    try:
        wait_for("a waiting request", lambda: guarded.gauge("llmrt:num_requests_waiting") >= 1)
        client = openai_module.OpenAI(base_url=guarded.url + "/v1", api_key="sesame", max_retries=0)
        with pytest.raises(openai_module.RateLimitError) as e:
            client.completions.create(model=MODEL, prompt="hi", max_tokens=1)
        assert e.value.status_code == 429
    finally:
        for conn, _ in (running, waiting):
            conn.close()
    # Both left: their requests are cancelled and the server serves again.
    wait_for("the queue to empty", lambda: guarded.gauge("llmrt:num_requests_running") == 0
             and guarded.gauge("llmrt:num_requests_waiting") == 0)
    client = openai_module.OpenAI(base_url=guarded.url + "/v1", api_key="sesame", max_retries=0)
    assert client.completions.create(model=MODEL, prompt="hi", max_tokens=2).choices[0].text is not None


def test_disconnect_mid_stream_frees_blocks(server):
    conn, resp = open_stream(server, LONG)
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    events = sse_events(resp)
    for _ in range(2):
        chunk = json.loads(next(events))
        assert chunk["object"] == "text_completion"
    assert server.gauge("llmrt:num_requests_running") >= 1
    assert server.gauge("llmrt:kv_cache_usage_perc") > 0
    conn.sock.close()
    conn.close()
    wait_for("the request to be cancelled and its blocks freed",
             lambda: server.gauge("llmrt:num_requests_running") == 0
             and server.gauge("llmrt:kv_cache_usage_perc") == 0)
    assert server.proc.poll() is None


def test_sigterm_finishes_running_stream_then_exits_0():
    s = Server("--shutdown-timeout", "120")
    try:
        body = dict(LONG, max_tokens=32)
        conn, resp = open_stream(s, body)
        events = sse_events(resp)
        first = json.loads(next(events))
        assert first["choices"][0]["finish_reason"] is None
        s.proc.send_signal(signal.SIGTERM)
        # Draining: /health says so and new requests are refused with 503.
        wait_for("/health to report draining", lambda: s.get("/health")[0] == 503, 10)
        status, _, raw = s.request("POST", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1})
        assert status == 503 and json.loads(raw)["error"]["code"] == 503
        finish, done = stream_end(events)
        assert done and finish == "length", "the running stream should complete after SIGTERM"
        conn.close()
        assert s.proc.wait(120) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
    assert any("draining" in line for line in s.log)


def test_sigterm_timeout_aborts_running_stream():
    s = Server("--shutdown-timeout", "1")
    try:
        conn, resp = open_stream(s, LONG)  # far more tokens than one second allows
        events = sse_events(resp)
        json.loads(next(events))
        s.proc.send_signal(signal.SIGTERM)
        finish, done = stream_end(events)
        assert done and finish == "abort", "the stream should end with finish_reason 'abort'"
        conn.close()
        assert s.proc.wait(120) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
