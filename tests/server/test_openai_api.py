"""The OpenAI API as the official client sees it: completions, chat, streaming, n, logprobs,
stop strings, seeds, echo, models, health and metrics."""

import math

import pytest

from conftest import MODEL

PROMPT = "The three primary colors are"
CHAT = [{"role": "user", "content": "Name three fruits."}]
FIXED = {"ignore_eos": True}  # vLLM extension: exactly max_tokens tokens, whatever the model says


def complete(client, **kw):
    args = dict(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    args.update(kw)
    return client.completions.create(**args)


def chat(client, **kw):
    args = dict(model=MODEL, messages=CHAT, max_tokens=12, temperature=0)
    args.update(kw)
    return client.chat.completions.create(**args)


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_health_and_metrics(server):
    status, _ = server.get("/health")
    assert status == 200
    status, headers, body = server.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    text = body.decode()
    for series in ("llmrt:num_requests_running", "llmrt:num_requests_waiting", "llmrt:kv_cache_usage_perc",
                   "llmrt:time_to_first_token_seconds", "llmrt:generation_tokens_total"):
        assert series in text, f"{series} missing from /metrics:\n{text[:2000]}"


def test_completion(client):
    r = complete(client, extra_body=FIXED)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == MODEL
    assert len(r.choices) == 1
    c = r.choices[0]
    assert isinstance(c.text, str) and c.text.strip()
    assert c.finish_reason == "length"
    u = r.usage
    assert u.completion_tokens == 12
    assert u.prompt_tokens > 3
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    # Greedy decoding is deterministic.
    assert complete(client, extra_body=FIXED).choices[0].text == c.text


def test_completion_default_max_tokens_is_16(client):
    r = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, extra_body=FIXED)
    assert r.usage.completion_tokens == 16
    assert r.choices[0].finish_reason == "length"


def test_token_id_prompts(client):
    a, b = [504, 3458, 314, 260], [1078, 2103, 30]
    single = complete(client, prompt=a, max_tokens=4, extra_body=FIXED)
    assert single.usage.prompt_tokens == 4
    both = complete(client, prompt=[a, b], max_tokens=4, extra_body=FIXED)
    assert [c.index for c in both.choices] == [0, 1]
    assert both.usage.prompt_tokens == 7 and both.usage.completion_tokens == 8
    assert both.choices[0].text == single.choices[0].text
    texts = complete(client, prompt=[PROMPT, PROMPT + " red"], max_tokens=3, extra_body=FIXED)
    assert len(texts.choices) == 2
    assert texts.choices[0].text == complete(client, max_tokens=3, extra_body=FIXED).choices[0].text


def test_chat_completion(client):
    r = chat(client)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content.strip()
    assert c.finish_reason in ("stop", "length")
    # The chat template wraps the message: more prompt tokens than the words alone.
    assert r.usage.prompt_tokens > 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert chat(client).choices[0].message.content == c.message.content


def test_chat_max_completion_tokens(client):
    r = chat(client, max_completion_tokens=5, max_tokens=None, extra_body=FIXED)
    assert r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"


def test_stream_completion_matches_non_stream(client):
    full = complete(client, max_tokens=16, extra_body=FIXED)
    chunks = list(complete(client, max_tokens=16, stream=True, stream_options={"include_usage": True},
                           extra_body=FIXED))
    assert all(ch.object == "text_completion" for ch in chunks)
    assert len({ch.id for ch in chunks}) == 1 and chunks[0].id.startswith("cmpl-")
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 16
    assert last.usage.prompt_tokens == full.usage.prompt_tokens
    assert all(ch.usage is None for ch in body)
    assert "".join(ch.choices[0].text for ch in body) == full.choices[0].text
    finishes = [ch.choices[0].finish_reason for ch in body if ch.choices[0].finish_reason]
    assert finishes == ["length"]
    assert len(body) > 2, "tokens should arrive in several chunks"


def test_stream_without_include_usage(client):
    chunks = list(complete(client, max_tokens=4, stream=True))
    assert chunks and all(ch.choices for ch in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_stream_chat_matches_non_stream(client):
    full = chat(client, max_tokens=16)
    chunks = list(chat(client, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)
    assert chunks[0].id.startswith("chatcmpl-")
    assert chunks[0].choices[0].delta.role == "assistant"
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == full.usage.completion_tokens
    text = "".join(ch.choices[0].delta.content or "" for ch in body)
    assert text == full.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in body if ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]


def test_n2_completion_and_chat(client):
    r = complete(client, n=2, temperature=1.0, seed=7, max_tokens=8, extra_body=FIXED)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 16
    assert all(c.text and c.finish_reason == "length" for c in r.choices)
    r = chat(client, n=2, temperature=1.0, seed=7, max_tokens=8, extra_body=FIXED)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 16
    # Greedy choices are identical (the same logits, the same argmax).
    g = complete(client, n=2, max_tokens=8, extra_body=FIXED)
    assert g.choices[0].text == g.choices[1].text


def test_n2_stream(client):
    texts, finishes = {0: "", 1: ""}, {}
    for ch in chat(client, n=2, temperature=1.0, seed=3, max_tokens=8, stream=True, extra_body=FIXED):
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert finishes == {0: "length", 1: "length"}
    assert texts[0] and texts[1]


def test_completion_logprobs(client):
    r = complete(client, logprobs=3, max_tokens=6, extra_body=FIXED)
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert "".join(lp.tokens) == c.text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert value <= 0.0
        assert 3 <= len(top) <= 4 and tok in top
        # Greedy: the chosen token is the most likely one.
        assert math.isclose(value, max(top.values()), abs_tol=1e-4)


def test_echo_and_prompt_logprobs(client):
    r = complete(client, echo=True, max_tokens=3, extra_body=FIXED)
    plain = complete(client, max_tokens=3, extra_body=FIXED)
    assert r.choices[0].text == PROMPT + plain.choices[0].text
    r = complete(client, echo=True, logprobs=1, max_tokens=2, extra_body=FIXED)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == r.usage.prompt_tokens + 2
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0.0 for v in lp.token_logprobs[1:])
    # Scoring only: echo with max_tokens 0 generates nothing.
    r = complete(client, echo=True, logprobs=0, max_tokens=0)
    assert r.choices[0].text == PROMPT
    assert r.usage.completion_tokens == 0
    assert len(r.choices[0].logprobs.tokens) == r.usage.prompt_tokens


def test_chat_logprobs(client):
    r = chat(client, logprobs=True, top_logprobs=2, max_tokens=5, extra_body=FIXED)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        assert e.logprob <= 0.0
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token
        assert len(e.top_logprobs) == 2
        assert math.isclose(e.logprob, e.top_logprobs[0].logprob, abs_tol=1e-4)
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    r = chat(client, max_tokens=2)
    assert r.choices[0].logprobs is None


def pick_stop(text: str) -> str:
    """A piece of `text` from its second half (so something comes before it)."""
    words = [w for w in text.split() if len(w) >= 3]
    assert words, f"no usable word in {text!r}"
    half = text[len(text) // 2:]
    for w in words:
        if w in half:
            return w[1:]  # a suffix: the stop string then starts inside a token
    return words[-1]


def test_stop_string(client):
    full = complete(client, max_tokens=24, extra_body=FIXED).choices[0].text
    stop = pick_stop(full)
    expected = full[:full.index(stop)]
    r = complete(client, max_tokens=24, stop=[stop, "never-appears-xyz"], extra_body=FIXED)
    c = r.choices[0]
    assert c.text == expected
    assert stop not in c.text
    assert c.finish_reason == "stop"
    assert c.model_extra.get("stop_reason") == stop  # vLLM reports which stop string matched
    assert r.usage.completion_tokens < 24


def test_stop_string_stream(client):
    full = complete(client, max_tokens=24, extra_body=FIXED).choices[0].text
    stop = pick_stop(full)
    expected = full[:full.index(stop)]
    pieces, finish = [], None
    for ch in complete(client, max_tokens=24, stop=stop, stream=True, extra_body=FIXED):
        for c in ch.choices:
            pieces.append(c.text)
            finish = c.finish_reason or finish
    assert "".join(pieces) == expected
    assert all(stop not in p for p in pieces)
    assert finish == "stop"


def test_stop_string_chat_stream(client):
    full = chat(client, max_tokens=24, extra_body=FIXED).choices[0].message.content
    stop = pick_stop(full)
    text = "".join(ch.choices[0].delta.content or "" for ch in
                   chat(client, max_tokens=24, stop=stop, stream=True, extra_body=FIXED) if ch.choices)
    assert text == full[:full.index(stop)]


def test_seed_reproducibility(client):
    def sample(seed):
        return complete(client, temperature=1.0, seed=seed, max_tokens=12, extra_body=FIXED).choices[0].text

    assert sample(1234) == sample(1234)
    texts = {sample(s) for s in (1, 2, 3, 4, 5)}
    assert len(texts) >= 2, f"five seeds gave one answer: {texts}"


def test_sampling_parameters_accepted(client):
    r = complete(client, temperature=0.8, top_p=0.9, seed=1, presence_penalty=0.5, frequency_penalty=0.5,
                 max_tokens=6, user="someone",
                 extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "priority": 0,
                             "ignore_eos": True, "unknown_field": {"ignored": True}})
    assert r.usage.completion_tokens == 6


def test_concurrent_streams_match_solo_answers(client):
    from concurrent.futures import ThreadPoolExecutor

    prompts = [f"Question {i}: what is {i} plus {i}? Answer:" for i in range(6)]

    def solo(p):
        return complete(client, prompt=p, max_tokens=8, extra_body=FIXED).choices[0].text

    def streamed(p):
        return "".join(ch.choices[0].text for ch in
                       complete(client, prompt=p, max_tokens=8, stream=True, extra_body=FIXED))

    expected = [solo(p) for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(streamed, prompts))
    assert got == expected
