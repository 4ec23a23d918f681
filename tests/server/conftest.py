"""Fixtures for the `llmrt serve` suite: a live server on the default real model, driven by the
official `openai` client (PyPI) and by raw HTTP for what a client library would not send.

Environment:
  LLMC_BUILD_DIR      build directory holding tools/llmrt (default: <repo>/build)
  LLMC_SMOLLM2_PLAN   plan of SmolLM2-135M-Instruct (default: <repo>/.cache/smollm2-135m-instruct.plan.fb)
"""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-test"
STARTUP_TIMEOUT = float(os.environ.get("LLMC_SERVER_STARTUP_TIMEOUT", "600"))
# Light settings: the CPU backend is slow and the machine is shared.
LIGHT = ["--kv-cache-memory", "512MiB", "--max-model-len", "2048"]


def build_dir() -> Path:
    return Path(os.environ.get("LLMC_BUILD_DIR", str(REPO / "build"))).resolve()


def llmrt_path() -> Path:
    path = build_dir() / "tools" / "llmrt"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"llmrt not built: no executable at {path} (build it or set LLMC_BUILD_DIR)")
    return path


def plan_path() -> Path:
    path = Path(os.environ.get("LLMC_SMOLLM2_PLAN", str(REPO / ".cache" / "smollm2-135m-instruct.plan.fb")))
    if not path.is_file():
        pytest.skip(f"no SmolLM2 plan at {path}: compile one with `llmc compile "
                    f"SmolLM2-135M-Instruct.Q4_1.gguf -o {path}` or set LLMC_SMOLLM2_PLAN")
    return path


class Server:
    """One `llmrt serve` process; its stderr is collected (and parsed for the port)."""

    def __init__(self, *extra: str):
        self.cmd = [str(llmrt_path()), "serve", str(plan_path()), "--port", "0",
                    "--served-model-name", MODEL, *LIGHT, *extra]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self.log = []
        self.port = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._listening.wait(STARTUP_TIMEOUT) or self.port is None:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"llmrt serve did not start listening: {' '.join(self.cmd)}\n{self.stderr()}")
        self.host = "127.0.0.1"
        self.url = f"http://{self.host}:{self.port}"
        deadline = time.monotonic() + 120
        while self.get("/health")[0] != 200:
            if time.monotonic() > deadline:
                pytest.fail(f"/health never became 200\n{self.stderr()}")
            time.sleep(0.2)

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"llmrt: listening on http://([^:]+):(\d+)", line)
            if m:
                self.port = int(m.group(2))
                self._listening.set()
        self._listening.set()  # exited: wake the waiter

    def stderr(self) -> str:
        return "".join(self.log[-200:])

    def connection(self, timeout=300) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=300):
        """Raw HTTP: returns (status, headers dict, body bytes)."""
        conn = self.connection(timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def get(self, path):
        try:
            status, _, body = self.request("GET", path, timeout=30)
            return status, body
        except OSError:
            return None, b""

    def metrics(self) -> dict:
        """Unlabelled and labelled llmrt:* samples of /metrics, by full series text."""
        status, body = self.get("/metrics")
        assert status == 200, body
        out = {}
        for line in body.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
        return out

    def gauge(self, name: str) -> float:
        series = {k: v for k, v in self.metrics().items() if k == name or k.startswith(name + "{")}
        assert series, f"{name} not in /metrics"
        return sum(series.values())

    def stop(self, timeout=120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"llmrt serve did not exit within {timeout}s of SIGTERM\n{self.stderr()}")
        self._reader.join(10)
        return rc


@pytest.fixture(scope="session")
def openai_module():
    return pytest.importorskip("openai", reason="the official openai client is needed (pip install openai)")


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    rc = s.stop()
    assert rc == 0, f"llmrt serve exited with {rc} after SIGTERM\n{s.stderr()}"


@pytest.fixture(scope="session")
def client(server, openai_module):
    return openai_module.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="session")
def guarded():
    """A second server: an API key, one sequence at a time and a waiting queue of one."""
    s = Server("--api-key", "sesame", "--max-num-seqs", "1", "--max-queue", "1")
    yield s
    rc = s.stop()
    assert rc == 0, f"llmrt serve (guarded) exited with {rc} after SIGTERM\n{s.stderr()}"


def sse_events(resp):
    """Yields the data payloads of an SSE response (http.client), comments skipped."""
    buf = b""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if buf:
                yield buf.decode()
                buf = b""
            continue
        if line.startswith(b":"):
            continue
        if line.startswith(b"data: "):
            buf += line[6:]
