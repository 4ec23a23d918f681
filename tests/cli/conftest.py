"""Fixtures for the CLI suite: built tools, a compiled tiny plan, helpers to run and read results."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny"
# The stand-in CUDA driver (tests/unit/fake_libcuda.cc), found through LD_LIBRARY_PATH.
FAKE_CUDA = Path(os.environ.get("LLMC_BUILD_DIR", REPO / "build")) / "tests" / "unit" / "fake-cuda"


def tool(name):
    path = Path(os.environ.get("LLMC_BUILD_DIR", REPO / "build")) / "tools" / name
    if not path.is_file():
        pytest.skip(f"{name} not built at {path}")
    return path


def run(cmd, timeout=600, env=None):
    """Runs a command (in `env`, else this process's environment); never raises on failure (tests
    look at returncode/stderr)."""
    # errors="replace": messages may quote bytes of a corrupted input file.
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace",
                          timeout=timeout, env=env)


def ok(cmd, timeout=600):
    proc = run(cmd, timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def clean_error(proc, *needles):
    """A bad input must end in a clear error: exit code 1 (not a signal), an 'error:' line
    and every needle (case-insensitive) in stderr."""
    assert proc.returncode == 1, f"expected exit 1, got {proc.returncode}:\n{proc.stderr}"
    err = proc.stderr.lower()
    assert "error:" in err, proc.stderr
    for n in needles:
        assert n.lower() in err, f"'{n}' not in: {proc.stderr}"


def fake_env(**knobs):
    """The environment with the stand-in driver first on the library path; knobs set its
    LLMC_FAKE_CUDA_* variables (version, cc, memory_mib, no_graphs)."""
    if not (FAKE_CUDA / "libcuda.so.1").is_file():
        pytest.skip(f"the stand-in driver is not built at {FAKE_CUDA}")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{FAKE_CUDA}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(FAKE_CUDA)
    env.update({f"LLMC_FAKE_CUDA_{k.upper()}": str(v) for k, v in knobs.items()})
    return env


@pytest.fixture(scope="session")
def llmc():
    return tool("llmc")


@pytest.fixture(scope="session")
def llmrt():
    return tool("llmrt")


@pytest.fixture(scope="session")
def tiny_plan(llmc, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "llama.fb"
    ok([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "-q"])
    return out


def logits(llmrt, plan, ids, tmp_path, *extra):
    """Last-position logits of `ids` (several lists → one ragged batch, [n, vocab])."""
    out = tmp_path / f"logits_{abs(hash((str(plan), str(ids), extra)))}.npy"
    cmd = [llmrt, "run", plan, "--max-tokens", "0", "--logits-out", out, *extra]
    for seq in (ids if isinstance(ids[0], list) else [ids]):
        cmd += ["--prompt-ids", ",".join(map(str, seq))]
    ok(cmd)
    return np.load(out)
