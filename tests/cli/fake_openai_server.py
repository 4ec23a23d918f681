"""A small OpenAI-compatible streaming server (standard library only) for testing bench-serve.

POST /v1/completions and /v1/chat/completions stream one SSE chunk per requested token
(max_tokens / max_completion_tokens), then a usage chunk (when stream_options.include_usage)
and `data: [DONE]`, with chunked transfer encoding. GET /v1/models lists one model, GET /health
answers 200, GET /stats reports how many requests it has seen and the most in flight at once.

  python3 fake_openai_server.py [--port 0] [--model NAME] [--fail-every K] [--no-usage]
                                [--chunk-delay S] [--log FILE] [--vocab-size N]

--fail-every K answers every K-th request with HTTP 500 (1: all). --log appends each request
body as one JSON line. Prints "listening on http://127.0.0.1:PORT" on stdout once bound.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.seen = 0
        self.in_flight = 0
        self.max_in_flight = 0


def make_handler(state):
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def send_json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                card = {"id": args.model, "object": "model"}
                if args.vocab_size:
                    card["vocab_size"] = args.vocab_size
                self.send_json(200, {"object": "list", "data": [card]})
            elif self.path == "/health":
                self.send_json(200, {})
            elif self.path == "/stats":
                with state.lock:
                    self.send_json(200, {"seen": state.seen, "max_in_flight": state.max_in_flight})
            else:
                self.send_json(404, {"error": {"message": "not found", "code": 404}})

        def chunk(self, data):
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            chat = self.path == "/v1/chat/completions"
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self.send_json(404, {"error": {"message": "unknown path", "code": 404}})
                return
            try:
                req = json.loads(raw)
            except ValueError:
                self.send_json(400, {"error": {"message": "bad JSON", "code": 400}})
                return
            with state.lock:
                state.seen += 1
                n = state.seen
                if args.log:
                    with open(args.log, "a") as f:
                        f.write(json.dumps(req) + "\n")
            if args.fail_every and n % args.fail_every == 0:
                self.send_json(500, {"error": {"message": f"injected failure {n}", "code": 500}})
                return
            count = req.get("max_completion_tokens" if chat else "max_tokens")
            if not isinstance(count, int) or count < 1 or not req.get("stream"):
                self.send_json(400, {"error": {"message": "need stream and a positive max_tokens", "code": 400}})
                return
            prompt = req.get("messages", [{}])[0].get("content", "") if chat else req.get("prompt")
            prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            with state.lock:
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(count):
                    if args.chunk_delay:
                        time.sleep(args.chunk_delay)
                    if chat:
                        choice = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
                    else:
                        choice = {"index": 0, "text": f"t{i} ", "finish_reason": None}
                    self.chunk(json.dumps({"id": f"cmpl-{n}", "object": "text_completion", "choices": [choice]}))
                if chat:
                    last = {"index": 0, "delta": {}, "finish_reason": "length"}
                else:
                    last = {"index": 0, "text": "", "finish_reason": "length"}
                self.chunk(json.dumps({"id": f"cmpl-{n}", "choices": [last]}))
                if not args.no_usage and (req.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count,
                             "total_tokens": prompt_tokens + count}
                    self.chunk(json.dumps({"id": f"cmpl-{n}", "choices": [], "usage": usage}))
            finally:
                # Before the last bytes: once the client has them it may start its next request,
                # so in_flight never counts a finished request (max_in_flight is an upper bound
                # check of the client's concurrency).
                with state.lock:
                    state.in_flight -= 1
            self.chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--no-usage", action="store_true")
    p.add_argument("--vocab-size", type=int, default=0, help="reported in the /v1/models card")
    p.add_argument("--chunk-delay", type=float, default=0.0)
    p.add_argument("--log", default="")
    args = p.parse_args()
    ThreadingHTTPServer.request_queue_size = 256  # many clients connect at once
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(State(args)))
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
