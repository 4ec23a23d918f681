"""Malformed and hostile requests get OpenAI-shaped errors with the right status, and the server
keeps serving."""

import json

import pytest

from conftest import MODEL


def error_of(body: bytes) -> dict:
    j = json.loads(body)
    assert set(j) == {"error"}, j
    e = j["error"]
    assert {"message", "type", "param", "code"} <= set(e), e
    assert isinstance(e["message"], str) and e["message"]
    return e


@pytest.mark.parametrize("kw,param", [
    ({"max_tokens": -1}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"),
    ({"n": 17}, "n"),
    ({"logprobs": 21}, "logprobs"),
    ({"stop": 5}, "stop"),
    ({"seed": "abc"}, "seed"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"max_tokens": 2.5}, "max_tokens"),
])
def test_bad_parameters_are_400(client, openai_module, kw, param):
    args = dict(model=MODEL, prompt="Hello", max_tokens=2)
    args.update(kw)
    with pytest.raises(openai_module.BadRequestError) as e:
        client.completions.create(**args)
    assert e.value.status_code == 400
    assert e.value.body["param"] == param, e.value.body
    assert param in e.value.body["message"]


@pytest.mark.parametrize("body,param", [
    ({"model": MODEL, "prompt": {"a": 1}}, "prompt"),
    ({"model": MODEL, "prompt": []}, "prompt"),
    ({"model": MODEL, "prompt": [1, "x"]}, "prompt"),
    ({"model": MODEL, "prompt": [-5]}, "prompt"),
    ({"model": MODEL, "prompt": [10 ** 9]}, "prompt"),
    ({"model": MODEL}, "prompt"),
    ({"model": MODEL, "prompt": "hi", "stream": "yes"}, "stream"),
    ({"model": MODEL, "prompt": "hi", "stop_token_ids": [-1]}, "stop_token_ids"),
    ({"model": MODEL, "prompt": "hi", "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"model": 5, "prompt": "hi"}, "model"),
])
def test_bad_completion_bodies_are_400(server, body, param):
    status, _, raw = server.request("POST", "/v1/completions", body)
    assert status == 400, raw
    e = error_of(raw)
    assert e["param"] == param and e["type"] == "invalid_request_error"


@pytest.mark.parametrize("body", [
    {"model": MODEL},
    {"model": MODEL, "messages": []},
    {"model": MODEL, "messages": "hello"},
    {"model": MODEL, "messages": [{"content": "no role"}]},
    {"model": MODEL, "messages": [{"role": "user", "content": 5}]},
    {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "logprobs": False, "top_logprobs": 2},
    {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 21, "logprobs": True},
    {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": "none"},
])
def test_bad_chat_bodies_are_400(server, body):
    status, _, raw = server.request("POST", "/v1/chat/completions", body)
    assert status == 400, raw
    error_of(raw)


def test_chat_content_parts_are_joined(client):
    parts = [{"type": "text", "text": "Name three"}, {"type": "text", "text": "fruits."}]
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": parts}],
                                       max_tokens=2, temperature=0)
    assert r.choices[0].message.content is not None


def test_prompt_longer_than_max_model_len(client, openai_module):
    with pytest.raises(openai_module.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[260] * 2100, max_tokens=1)
    assert "maximum context length" in e.value.body["message"]
    with pytest.raises(openai_module.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 3000}],
                                       max_tokens=1)
    assert "maximum context length" in e.value.body["message"]
    # Within the context, but not with that many new tokens.
    with pytest.raises(openai_module.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[260] * 2000, max_tokens=100)
    assert e.value.body["param"] == "max_tokens"


def test_unknown_model_is_404(client, openai_module):
    with pytest.raises(openai_module.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=1)
    assert e.value.status_code == 404 and "no-such-model" in e.value.body["message"]
    with pytest.raises(openai_module.NotFoundError):
        client.models.retrieve("no-such-model")


def test_unknown_path_is_404(server):
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v2/completions"), ("GET", "/")):
        status, _, raw = server.request(method, path, {} if method == "POST" else None)
        assert status == 404, (path, raw)
        assert error_of(raw)["code"] == 404


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b"\"text\"", b"{\"prompt\": \"\xff\xfe\"}",
                                 b"[" * 200000, b"{\"a\":" * 100000])
def test_bad_json_is_400(server, raw):
    status, _, body = server.request("POST", "/v1/completions", raw)
    assert status == 400, body
    assert error_of(body)["type"] == "invalid_request_error"


def test_huge_body_is_413(server):
    big = b'{"model": "%s", "prompt": "' % MODEL.encode() + b"a" * (17 << 20) + b'"}'
    try:
        status, _, body = server.request("POST", "/v1/completions", big)
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server dropped the connection instead of answering 413")
    assert status == 413
    assert error_of(body)["code"] == 413
    # The connection still works for others.
    assert server.get("/health")[0] == 200


def test_still_serving_after_hostile_requests(client, server):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3
    assert server.proc.poll() is None
