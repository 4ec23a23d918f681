"""`llmrt devices [PLAN]`: the CUDA driver is loaded at run time; without one the command says so
and exits 0 (llmrt runs on the CPU); with a plan it lists the plan's GPU targets and the driver
version its images need."""

import json

import pytest

from conftest import TINY, ok, run


def test_devices_without_or_with_a_driver(llmrt):
    out = ok([llmrt, "devices"]).stdout
    assert ("no CUDA driver" in out and "runs on the CPU" in out) or "CUDA driver " in out, out


def test_devices_reports_the_plan_targets(llmc, llmrt, tmp_path):
    plan = tmp_path / "gpu.fb"
    proc = run([llmc, "compile", TINY / "llama", "-o", plan, "-q", "--target", "sm_80,sm_90"])
    if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
        pytest.skip("llmc built without NVRTC: no kernel images to report")
    assert proc.returncode == 0, proc.stderr
    out = ok([llmrt, "devices", plan]).stdout
    first = out.splitlines()[0]
    assert first.startswith("plan: ") and "images for sm_80, sm_90" in first, out
    assert "need a driver for CUDA " in first, out  # recorded from the NVRTC that built them
    info = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)
    assert info["kernels"]["count"] > 0
