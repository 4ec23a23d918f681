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


def test_device_flag(llmc, llmrt, tmp_path):
    """--device cpu|cuda|auto on run, bench and serve: an unknown name is a clean error; auto runs
    on the CPU when no GPU can run the plan and says why; cuda without a driver is a clean error."""
    plan = tmp_path / "gpu.fb"
    ok([llmc, "compile", TINY / "llama", "-o", plan, "-q", "--target", "sm_90"])
    args = ["--prompt-ids", "1,2,3", "--max-tokens", "3", "--temperature", "0", "--ignore-eos", "--json"]
    cpu = json.loads(ok([llmrt, "run", plan, *args, "--device", "cpu"]).stdout)
    for cmd in (["run", plan, *args], ["bench", plan, "--pp", "4", "--tg", "2", "--batch", "0", "-r", "1"]):
        proc = run([llmrt, *cmd, "--device", "tpu"])
        assert proc.returncode != 0 and "unknown device 'tpu'" in proc.stderr, proc.stderr
    has_driver = "CUDA driver " in ok([llmrt, "devices"]).stdout
    auto = ok([llmrt, "run", plan, *args, "--device", "auto"])
    if not has_driver:
        assert "running on the CPU: no CUDA driver" in auto.stderr, auto.stderr
        assert json.loads(auto.stdout)["outputs"][0]["output_ids"] == cpu["outputs"][0]["output_ids"]
        proc = run([llmrt, "run", plan, *args, "--device", "cuda"])
        assert proc.returncode != 0 and "no CUDA driver" in proc.stderr, proc.stderr
        bench = ok([llmrt, "bench", plan, "--pp", "4", "--tg", "2", "--batch", "0", "-r", "1", "--json",
                    "--device", "auto"])
        assert json.loads(bench.stdout)["device"] == "cpu"
    proc = run([llmrt, "serve", plan, "--device", "gpu7", "--port", "0"])
    assert proc.returncode != 0 and "unknown device" in proc.stderr, proc.stderr


def test_compiling_for_gpus_says_which_steps_get_no_kernel(llmc, tmp_path):
    """Quantized weights in a CPU layout have no GPU kernel: with --target the compile warns (even
    with -q) and names the layout that fixes it; cuda-mma plans and --target none say nothing."""
    gptq = TINY.parent / "quant" / "gptq_8bit_sym"
    cpu_layout = run([llmc, "compile", gptq, "-o", tmp_path / "a.fb", "-q", "--target", "sm_90"])
    if cpu_layout.returncode != 0 and "NVRTC not available" in cpu_layout.stderr:
        pytest.skip("llmc built without NVRTC: no kernel images")
    assert cpu_layout.returncode == 0, cpu_layout.stderr
    assert "warning: 8 of 21 steps have no GPU kernel (8 llm.linear)" in cpu_layout.stderr, cpu_layout.stderr
    assert "--weight-layout cuda-mma" in cpu_layout.stderr
    gpu_layout = ok([llmc, "compile", gptq, "-o", tmp_path / "b.fb", "-q", "--target", "sm_90",
                     "--weight-layout", "cuda-mma"])
    assert "no GPU kernel" not in gpu_layout.stderr, gpu_layout.stderr
    assert ok([llmc, "compile", gptq, "-o", tmp_path / "c.fb", "-q", "--target", "none"]).stderr == ""
