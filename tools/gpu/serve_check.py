"""Concurrent completions against a live `llmrt serve` (tools/gpu/run_checks.sh, stage serve).

    serve_check.py --url http://127.0.0.1:PORT --record expected.json    (make_bundle.sh: the CPU server)
    serve_check.py --url http://127.0.0.1:PORT --expected expected.json  (the GPU server)

Sends 12 completions at once (token-id prompts of 3 to 90 tokens, two sharing a prefix, greedy,
end-of-sequence ignored, 12 tokens each), so the engine batches prefill chunks and decodes
together. --record writes each request's text; --expected compares every text with the recorded
one and exits 1 on any difference, a failed request or a wrong token count. Standard library only.
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def prompts():
    out = []
    for i, n in enumerate([3, 5, 8, 13, 17, 21, 30, 34, 40, 55, 70, 90]):
        out.append([(31 * i + 7 * j + 1) % 250 + 3 for j in range(n)])
    out[9] = out[8] + out[9][: 55 - 40]  # shares a 40-token prefix with request 8 (prefix cache)
    return out


def post(url, body, timeout=60):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's error body names the problem
        return e.code, {"error": e.read().decode(errors="replace")[:400]}


def wait_ready(url, seconds=45):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:
            time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--record")
    ap.add_argument("--expected")
    a = ap.parse_args()
    if not wait_ready(a.url):
        print("serve: FAIL /health never answered 200")
        return 1
    bodies = [{"prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": True} for p in prompts()]
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(bodies)) as pool:
        results = list(pool.map(lambda b: post(a.url, b), bodies))
    seconds = time.monotonic() - t0
    texts, bad = [], []
    for i, (code, j) in enumerate(results):
        n = j.get("usage", {}).get("completion_tokens")
        if code != 200 or n != 12:
            bad.append(f"request {i}: status {code}, completion_tokens {n}, {j.get('error', '')}")
        texts.append(j["choices"][0]["text"] if code == 200 else None)
    if a.record:
        json.dump(texts, open(a.record, "w"))
        print(f"recorded {len(texts)} texts in {seconds:.2f} s" + (f"; errors: {bad}" if bad else ""))
        return 1 if bad else 0
    expected = json.load(open(a.expected))
    differ = [i for i, (t, e) in enumerate(zip(texts, expected)) if t != e]
    ok = not bad and not differ and len(texts) == len(expected)
    print(f"serve: {'PASS' if ok else 'FAIL'} {len(texts)} concurrent completions in {seconds:.2f} s; "
          f"texts equal to the CPU server's: {len(texts) - len(differ)}/{len(texts)}"
          + (f"; differing: {differ}" if differ else "") + (f"; errors: {bad}" if bad else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
