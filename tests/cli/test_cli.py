"""llmc / llmrt as a user drives them: inspect, IR dumps, pass toggles, --from-ir, linkage."""

import json
import math
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO, TINY, clean_error, logits, ok, run

PROMPTS = [[1, 5, 9, 33, 70, 2, 14], [3, 4], [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110]]


def test_llmrt_links_no_llvm_mlir_or_cuda(llmrt):
    out = subprocess.run(["ldd", str(llmrt)], capture_output=True, text=True).stdout
    for lib in ("libLLVM", "libMLIR", "libcuda", "libcudart", "libnvrtc", "libcublas"):
        assert lib not in out, f"llmrt links {lib}:\n{out}"


def test_inspect_reports_model_kv_and_memory_fit(llmc, tiny_plan):
    cfg = json.loads((TINY / "llama" / "config.json").read_text())
    j = json.loads(ok([llmc, "inspect", tiny_plan, "--json", "--memory", "8GiB"]).stdout)
    assert j["model"]["architecture"] == "LlamaForCausalLM"
    assert j["model"]["num_layers"] == cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 4
    assert j["kv_cache"]["bytes_per_token"] == per_token
    fit = j["memory_fit"]
    assert fit["budget"] == 8 << 30
    assert fit["weights"] == j["tensors"]["bytes"]
    block = j["kv_cache"]["block_size"]
    assert fit["kv_blocks"] == (fit["budget"] - fit["weights"] - fit["workspace"]) // (block * per_token)
    for ctx in ("512", "2048", "4096"):
        assert fit["max_sequences_at_context"][ctx] == fit["kv_blocks"] // math.ceil(int(ctx) / block)
    text = ok([llmc, "inspect", tiny_plan, "--memory", "1GiB"]).stdout
    assert "LlamaForCausalLM" in text and "KV blocks" in text and "concurrent sequences" in text
    clean_error(run([llmc, "inspect", tiny_plan, "--memory", "lots"]), "--memory")


def test_dump_ir_writes_each_stage(llmc, tmp_path):
    dump = tmp_path / "ir"
    ok([llmc, "compile", TINY / "llama", "-o", tmp_path / "p.fb", "--target", "none", "-q", "--dump-ir", dump])
    names = sorted(p.name for p in dump.iterdir())
    assert names == ["00-import.mlir", "01-pack-weights.mlir", "02-fuse-qkv.mlir", "03-fuse-gate-up.mlir",
                     "04-fuse-add-rmsnorm.mlir", "05-kv-cache-layout.mlir", "06-fuse-rope-kv-store.mlir",
                     "07-plan-memory.mlir"], names
    imported = (dump / "00-import.mlir").read_text()
    assert "llm.weight_concat" not in imported and "llm.linear" in imported
    assert "llm.weight_layout" in (dump / "01-pack-weights.mlir").read_text()
    assert "llm.weight_concat" in (dump / "02-fuse-qkv.mlir").read_text()
    assert "llm.add_rms_norm" in (dump / "04-fuse-add-rmsnorm.mlir").read_text()
    assert "block_size" in (dump / "05-kv-cache-layout.mlir").read_text()
    assert "llm.rope_kv_store" in (dump / "06-fuse-rope-kv-store.mlir").read_text()
    assert "llm.arena_offsets" in (dump / "07-plan-memory.mlir").read_text()


@pytest.mark.parametrize("pass_name,op,changes", [
    ("fuse-qkv", "Linear", "more"), ("fuse-gate-up", "Linear", "more"), ("fuse-add-rmsnorm", "AddRmsNorm", "fewer"),
    ("fuse-rope-kv-store", "RopeKvStore", "fewer")])
def test_disable_pass_changes_plan_not_logits(llmc, llmrt, tiny_plan, tmp_path, pass_name, op, changes):
    plan = tmp_path / f"no-{pass_name}.fb"
    ok([llmc, "compile", TINY / "llama", "-o", plan, "--target", "none", "-q", "--disable-pass", pass_name])
    base = json.loads(ok([llmc, "inspect", tiny_plan, "--json"]).stdout)["program"]
    off = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)["program"]
    assert off["steps"] != base["steps"], "disabling the pass did not change the plan"
    n_base, n_off = base["ops"].get(op, 0), off["ops"].get(op, 0)
    assert (n_off < n_base) if changes == "fewer" else (n_off > n_base), (op, n_base, n_off)
    # The arithmetic of each fusion is the same per element: the logits stay bit-identical.
    a = logits(llmrt, tiny_plan, PROMPTS, tmp_path)
    b = logits(llmrt, plan, PROMPTS, tmp_path)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("pass_name", ["kv-cache-layout", "plan-memory"])
def test_disabling_a_required_pass_is_a_clear_error(llmc, tmp_path, pass_name):
    out = tmp_path / "p.fb"
    clean_error(run([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "--disable-pass", pass_name]),
                pass_name)
    assert not out.exists(), "a failed compile left a plan behind"


def test_unknown_pass_name(llmc, tmp_path):
    clean_error(run([llmc, "compile", TINY / "llama", "-o", tmp_path / "p.fb", "--disable-pass", "fuse-everything"]),
                "fuse-everything")


def test_from_ir_compiles_edited_ir(llmc, llmrt, tiny_plan, tmp_path):
    dump = tmp_path / "ir"
    ok([llmc, "compile", TINY / "llama", "-o", tmp_path / "a.fb", "--target", "none", "-q", "--dump-ir", dump])
    text = (dump / "00-import.mlir").read_text()
    same = tmp_path / "same.fb"
    ok([llmc, "compile", TINY / "llama", "--from-ir", dump / "00-import.mlir", "-o", same, "--target", "none", "-q"])
    assert np.array_equal(logits(llmrt, same, PROMPTS[0], tmp_path), logits(llmrt, tiny_plan, PROMPTS[0], tmp_path))
    edited_text, n = re.subn(r"theta = [-+0-9.e]+", "theta = 5.000000e+01", text)
    assert n > 0, "no rope theta found in the imported IR"
    edited = tmp_path / "edited.mlir"
    edited.write_text(edited_text)
    plan = tmp_path / "edited.fb"
    ok([llmc, "compile", TINY / "llama", "--from-ir", edited, "-o", plan, "--target", "none", "-q"])
    a = logits(llmrt, tiny_plan, PROMPTS[0], tmp_path)
    b = logits(llmrt, plan, PROMPTS[0], tmp_path)
    assert np.abs(a - b).max() > 1e-3 * np.abs(a).max(), "editing the IR did not change the result"
    broken = tmp_path / "broken.mlir"
    broken.write_text(text.replace("llm.embedding", "llm.embeding", 1))
    clean_error(run([llmc, "compile", TINY / "llama", "--from-ir", broken, "-o", tmp_path / "x.fb"]), "embeding")


def test_batch_invariance_end_to_end(llmrt, tiny_plan, tmp_path):
    alone = [logits(llmrt, tiny_plan, p, tmp_path) for p in PROMPTS]
    together = logits(llmrt, tiny_plan, PROMPTS, tmp_path)
    reordered = logits(llmrt, tiny_plan, PROMPTS[::-1], tmp_path)
    for i, a in enumerate(alone):
        assert np.array_equal(a, together[i])
        assert np.array_equal(a, reordered[len(PROMPTS) - 1 - i])
    one = logits(llmrt, tiny_plan, PROMPTS, tmp_path, "--threads", "1")
    two = logits(llmrt, tiny_plan, PROMPTS, tmp_path, "--threads", "2")
    assert np.array_equal(one, two)


def test_greedy_generation_json(llmrt, tiny_plan):
    out = ok([llmrt, "run", tiny_plan, "--prompt-ids", "1,2,3", "--prompt-ids", "7,8",
              "--max-tokens", "5", "--temperature", "0", "--ignore-eos", "--json"]).stdout
    res = json.loads(out)["outputs"]
    assert [len(o["output_ids"]) for o in res] == [5, 5]
    assert all(o["finish_reason"] == "length" for o in res)
    seeded = [ok([llmrt, "run", tiny_plan, "--prompt-ids", "1,2,3", "--max-tokens", "8", "--temperature", "1",
                  "--seed", "7", "--ignore-eos", "--json"]).stdout for _ in range(2)]
    assert seeded[0] == seeded[1]


def test_kernel_images_per_target_are_valid(llmc, tmp_path):
    """Every kernel image in the plan: ptxas accepts the PTX, llvm-readelf shows a CUDA ELF for
    the right SM with the kernel symbol in the CUBIN."""
    import shutil
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    readelf = shutil.which("llvm-readelf-19") or "/usr/lib/llvm-19/bin/llvm-readelf"
    from pathlib import Path
    if not Path(ptxas).exists():
        pytest.skip("no CUDA toolkit (ptxas) on this machine: kernel images cannot be checked")
    # Every SKU the plans workflow (.github/workflows/plans.yml) builds for.
    skus = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"]
    plan = tmp_path / "gpu.fb"
    proc = run([llmc, "compile", TINY / "llama", "-o", plan, "--target", ",".join(skus)])
    if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
        pytest.skip("llmc built without NVRTC")
    assert proc.returncode == 0, proc.stderr
    j = json.loads(ok([llmc, "inspect", plan, "--json", "--extract-kernels", tmp_path / "k"]).stdout)
    assert j["kernels"]["count"] >= 4  # embedding, add_rms_norm, rms_norm, rope (q and kv), silu_mul
    assert j["kernels"]["images_per_target"] == {t: j["kernels"]["count"] for t in skus}
    # Every step of the forward has its kernel (embedding, norms, linear, rope, kv_store,
    # paged_attention, silu_mul, split, logits).
    assert j["program"]["steps_with_gpu_kernel"] == j["program"]["steps"], j["program"]
    # ptxas' report travels with every image: registers known (0 < r <= 255), nothing spills.
    assert all(0 < j["kernels"]["max_registers_per_target"][t] <= 255 for t in skus), j["kernels"]
    assert j["kernels"]["images_spilling_per_target"] == {}, j["kernels"]
    cubins = sorted((tmp_path / "k").glob("*.cubin"))
    assert len(cubins) == len(skus) * j["kernels"]["count"]
    for cubin in cubins:
        entry, target = cubin.name[: -len(".cubin")].rsplit(".", 1)
        sm = int(target[3:].rstrip("a"))
        ok([ptxas, f"-arch={target}", cubin.with_suffix(".ptx"), "-o", tmp_path / "check.cubin"])
        elf = ok([readelf, "-h", "-s", cubin]).stdout
        assert "NVIDIA CUDA" in elf
        flags = int(re.search(r"Flags:\s+0x([0-9a-fA-F]+)", elf).group(1), 16)
        assert (flags >> 8) & 0xFF == sm, (cubin.name, hex(flags))
        assert entry in elf, f"kernel symbol {entry} missing in {cubin.name}"


def test_quantized_linear_kernels_need_the_cuda_layout(llmc, tmp_path):
    """GPTQ weights (desc_act: permuted columns too): in the CPU tile layout the linear steps
    have no GPU kernel; with --weight-layout cuda-mma every step has one."""
    import shutil
    from pathlib import Path
    if not Path(shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas").exists():
        pytest.skip("no CUDA toolkit on this machine")
    fixture = TINY.parent / "quant" / "gptq_4bit_desc_act"
    steps = {}
    for layout in ["interleaved8", "cuda-mma"]:
        plan = tmp_path / f"{layout}.fb"
        proc = run([llmc, "compile", fixture, "-o", plan, "--target", "sm_90", "--weight-layout", layout])
        if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
            pytest.skip("llmc built without NVRTC")
        assert proc.returncode == 0, proc.stderr
        j = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)
        steps[layout] = (j["program"]["steps_with_gpu_kernel"], j["program"]["steps"], j["program"]["ops"])
    with_kernel, total, ops = steps["cuda-mma"]
    assert with_kernel == total, steps
    assert "PermuteColumns" in ops
    with_kernel, total, ops = steps["interleaved8"]
    assert with_kernel == total - ops["Linear"], steps


def test_gguf_model_has_a_gpu_kernel_for_every_step(llmc, tmp_path):
    """SmolLM2's GGUF (Q4_1 layers, Q8_0 token table shared with the logits) in the CUDA tile
    layout: every step, the quantized embedding gather included, has its kernel."""
    import os
    import shutil
    from pathlib import Path
    gguf = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not gguf or not Path(gguf).is_file():
        pytest.skip("LLMC_SMOLLM2_GGUF not set (tools/test.sh sets it)")
    if not Path(shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas").exists():
        pytest.skip("no CUDA toolkit on this machine")
    plan = tmp_path / "smol_cuda.fb"
    proc = run([llmc, "compile", gguf, "-o", plan, "--target", "sm_90", "--weight-layout", "cuda-mma"])
    if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
        pytest.skip("llmc built without NVRTC")
    assert proc.returncode == 0, proc.stderr
    j = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)
    assert j["program"]["ops"]["Embedding"] == 1
    assert j["program"]["steps_with_gpu_kernel"] == j["program"]["steps"], j["program"]


def test_logits_summary_kernel_up_to_its_longest_row(llmc, tmp_path):
    """GPU plans summarize each logits row on the device for vocabularies of up to 524288 entries
    (codegen/LogitsSummaryKernel.cpp: 64 parts of 8192), and draw at a temperature there
    (codegen/SamplingKernel.cpp); a longer row gets neither kernel and the plan still compiles
    (the runtime then copies whole rows)."""
    import shutil
    from pathlib import Path
    if not Path(shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas").exists():
        pytest.skip("no CUDA toolkit on this machine")
    cfg = json.loads((TINY / "llama" / "config.json").read_text())
    for vocab, summarized in ((524288, True), (524289, False)):
        model = tmp_path / f"v{vocab}"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({**cfg, "vocab_size": vocab}))
        plan = tmp_path / f"v{vocab}.fb"
        proc = run([llmc, "compile", "--synthetic-weights", "1", model, "-o", plan, "--target", "sm_90", "-q"])
        if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
            pytest.skip("llmc built without NVRTC")
        assert proc.returncode == 0, proc.stderr
        prog = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)["program"]
        assert prog["logits_summary_on_gpu"] is summarized, (vocab, prog)
        assert prog["sampling_on_gpu"] is summarized, (vocab, prog)  # it reads the summaries' max
        assert prog["steps_with_gpu_kernel"] == prog["steps"], prog
        assert (f"llm_logits_summary_v{vocab}_".encode() in plan.read_bytes()) is summarized
        assert (f"llm_sample_v{vocab}_".encode() in plan.read_bytes()) is summarized


def test_no_tensor_cores_flag_reaches_the_linear_kernels(llmc, tmp_path):
    """Linear/logits and paged-attention steps have a tensor-core kernel (entry suffix _tc: TF32
    tiles, the tiled prefill attention) unless --no-tensor-cores."""
    import shutil
    from pathlib import Path
    if not Path(shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas").exists():
        pytest.skip("no CUDA toolkit on this machine")
    blobs = {}
    for flag in ([], ["--no-tensor-cores"]):
        plan = tmp_path / f"p{len(flag)}.fb"
        proc = run([llmc, "compile", TINY / "llama", "-o", plan, "--target", "sm_90", *flag])
        if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
            pytest.skip("llmc built without NVRTC")
        assert proc.returncode == 0, proc.stderr
        blobs[bool(flag)] = plan.read_bytes()
    assert re.search(rb"llm_linear_n\d+_k\d+_f32_tc_", blobs[False])
    assert re.search(rb"llm_logits_n\d+_k\d+_f32_tc_", blobs[False])
    assert re.search(rb"llm_paged_attention_h4_kv2_d16_b\d+_tc_", blobs[False])
    assert not re.search(rb"_tc_[0-9a-f]{12}", blobs[True])
    for no_tc, plan in ((False, tmp_path / "p0.fb"), (True, tmp_path / "p1.fb")):
        prog = json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)["program"]
        want = 0 if no_tc else prog["ops"]["Linear"] + prog["ops"]["Logits"] + prog["ops"]["PagedAttention"]
        assert prog["steps_with_tensor_core_kernel"] == want, prog


def test_dense_gemm_choice_reaches_the_plan(llmc, tmp_path):
    """Linear steps with dense bf16 or f32 weights go to cuBLASLt for steps of 16+ rows by
    default (--dense-gemm cublaslt), keeping their generated tensor-core kernel as the fallback;
    --dense-gemm generated and --no-tensor-cores keep them on the generated kernels; f16 weights
    never use the library. bf16 steps carry a to_bf16 input kernel. Quantized weights (cuda-mma)
    go to the library too (--quant-gemm cublaslt, the default), each with a dequant_bf16 weight
    kernel and a to_bf16 input kernel; --quant-gemm generated keeps them on the generated ones."""
    import shutil
    from pathlib import Path
    if not Path(shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas").exists():
        pytest.skip("no CUDA toolkit on this machine")

    def program(name, *flags, model=TINY / "qwen2"):
        plan = tmp_path / f"{name}.fb"
        proc = run([llmc, "compile", model, "-o", plan, "--target", "sm_90", "-q", *flags])
        if proc.returncode != 0 and "NVRTC not available" in proc.stderr:
            pytest.skip("llmc built without NVRTC")
        assert proc.returncode == 0, proc.stderr
        return json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)["program"], plan.read_bytes()

    bf16 = ["--weight-dtype", "bf16"]
    default, default_blob = program("default", *bf16)
    linear = default["ops"]["Linear"]
    assert linear == 8, default  # 2 layers: q|k|v, o, gate|up, down
    assert default["steps_with_gemm_library"] == linear, default
    # The fallback stays: linear, logits and paged attention keep their tensor-core kernels.
    tc = linear + default["ops"]["Logits"] + default["ops"]["PagedAttention"]
    assert default["steps_with_tensor_core_kernel"] == tc, default
    assert re.search(rb"llm_linear_n\d+_k\d+_bf16(_bias)?_tc_[0-9a-f]{12}", default_blob)
    to_bf16 = set(re.findall(rb"llm_to_bf16_k(\d+)_[0-9a-f]{12}", default_blob))
    assert to_bf16 == {b"64", b"128"}, to_bf16  # the hidden and intermediate widths

    explicit, _ = program("cublaslt", *bf16, "--dense-gemm", "cublaslt")
    assert explicit["steps_with_gemm_library"] == linear, explicit
    generated, generated_blob = program("generated", *bf16, "--dense-gemm", "generated")
    assert generated["steps_with_gemm_library"] == 0, generated
    assert generated["steps_with_tensor_core_kernel"] == tc, generated
    assert not re.search(rb"llm_to_bf16_k", generated_blob)
    no_tc, _ = program("no_tc", *bf16, "--no-tensor-cores")
    assert no_tc["steps_with_gemm_library"] == 0, no_tc
    assert no_tc["steps_with_tensor_core_kernel"] == 0, no_tc

    # f32 weights: the library reads the f32 input itself (TF32), no conversion kernel.
    f32, f32_blob = program("f32")
    assert f32["steps_with_gemm_library"] == f32["ops"]["Linear"] == 8, f32
    assert not re.search(rb"llm_to_bf16_k", f32_blob)
    f16, _ = program("f16", "--weight-dtype", "f16")
    assert f16["steps_with_gemm_library"] == 0, f16
    assert default["steps_with_dequantized_library_weight"] == f32["steps_with_dequantized_library_weight"] == 0
    gptq_model = TINY.parent / "quant" / "gptq_4bit_desc_act"
    gptq, gptq_blob = program("gptq", "--weight-layout", "cuda-mma", model=gptq_model)
    assert gptq["ops"]["Linear"] > 0, gptq
    assert gptq["steps_with_gemm_library"] == gptq["steps_with_dequantized_library_weight"] == gptq["ops"]["Linear"]
    assert re.search(rb"llm_dequant_bf16_n\d+_k\d+_int4_g\d+_f16_\w+_mma8_[0-9a-f]{12}", gptq_blob)
    assert re.search(rb"llm_to_bf16_k\d+_[0-9a-f]{12}", gptq_blob)
    gptq_gen, gptq_gen_blob = program("gptq_gen", "--weight-layout", "cuda-mma", "--quant-gemm", "generated",
                                      model=gptq_model)
    assert gptq_gen["steps_with_gemm_library"] == gptq_gen["steps_with_dequantized_library_weight"] == 0, gptq_gen
    assert not re.search(rb"llm_dequant_bf16_", gptq_gen_blob)
    # Quantized GEMVs read int8 activations (--quant-gemv int8, the default): each linear step
    # carries a quantize_q8 kernel for its input and its GEMV is the dp4a one; dense steps none.
    assert gptq["steps_with_int8_activation_gemv"] == gptq["ops"]["Linear"], gptq
    assert re.search(rb"llm_quantize_q8_k\d+_[0-9a-f]{12}", gptq_blob)
    assert re.search(rb"llm_linear_n\d+_k\d+_int4_g\d+_f16_\w+_mma8_q8a_[0-9a-f]{12}", gptq_blob)
    assert default["steps_with_int8_activation_gemv"] == f32["steps_with_int8_activation_gemv"] == 0
    # The steps before three of each layer's four GEMVs (input norm, post-attention norm,
    # SiLU*mul) write those int8 rows themselves; o_proj's input is quantized by its own kernel
    # here (head_dim 16: the attention writes them when it is a multiple of 32).
    # With act-order (desc_act) the column permutation before each GEMV writes them, o_proj's too.
    sym, sym_blob = program("gptq_sym", "--weight-layout", "cuda-mma", model=TINY.parent / "quant" / "gptq_4bit_sym")
    assert sym["steps_writing_int8_activations"] == 3 * sym["ops"]["PagedAttention"] > 0, sym
    assert re.search(rb"llm_add_rms_norm_d\d+_e[0-9a-f]{8}_q8_[0-9a-f]{12}", sym_blob)
    assert re.search(rb"llm_silu_mul_fused_i\d+_q8_[0-9a-f]{12}", sym_blob)
    assert gptq["steps_writing_int8_activations"] == gptq["ops"]["PermuteColumns"] == gptq["ops"]["Linear"], gptq
    assert default["steps_writing_int8_activations"] == 0, default
    gptq_f32, gptq_f32_blob = program("gptq_f32", "--weight-layout", "cuda-mma", "--quant-gemv", "f32",
                                      model=gptq_model)
    assert gptq_f32["steps_with_int8_activation_gemv"] == gptq_f32["steps_writing_int8_activations"] == 0, gptq_f32
    assert not re.search(rb"llm_quantize_q8_|_q8a_|_q8_[0-9a-f]{12}", gptq_f32_blob)
    # The decode GEMVs (CUDA cores) ask the L2 for their first weight bytes before waiting on the
    # kernel before (sm_90), --gemv-l2-prefetch MiB in all (default 16); 0: none of them does.
    asks = [int(b) for b in re.findall(rb"kPrefetchBlocks = (\d+);", gptq_blob)]
    assert asks and max(asks) > 0, asks
    _, off_blob = program("gptq_noprefetch", "--weight-layout", "cuda-mma", "--gemv-l2-prefetch", "0",
                          model=gptq_model)
    assert {int(b) for b in re.findall(rb"kPrefetchBlocks = (\d+);", off_blob)} == {0}
    # Every layer's decode attention can do the rope_kv_store before it (plan Step.rope_kernel):
    # one more paged_attention kernel with it inside (one for all layers: the same shapes).
    for prog, blob in ((default, default_blob), (gptq, gptq_blob), (sym, sym_blob)):
        assert prog["steps_with_rope_kernel"] == prog["ops"]["PagedAttention"] == prog["ops"]["RopeKvStore"] > 0, prog
        rope = rb"llm_paged_attention_h\d+_kv\d+_d\d+_b\d+(?:_w\d+)?(?:_i8|_bf16|_f16)?_rope(?:_q8)?_[0-9a-f]{12}(?!\w)"
        assert len(set(re.findall(rope, blob))) == 1
    # Every layer's decode gate|up GEMV can do the silu_mul after it (plan Step.silu_kernel): one
    # more GEMV kernel with it inside, for all layers; quantized (mma layout) or dense.
    for prog, blob in ((gptq, gptq_blob), (sym, sym_blob)):
        assert prog["steps_with_silu_kernel"] == prog["ops"]["SiluMul"] > 0, prog
        assert len(set(re.findall(rb"llm_linear_n\d+_k\d+_\w+?_mma8_q8a_silu_[0-9a-f]{12}(?!\w)", blob))) == 1
    assert default["steps_with_silu_kernel"] == default["ops"]["SiluMul"] > 0, default
    assert len(set(re.findall(rb"llm_linear_n\d+_k\d+_bf16_silu_[0-9a-f]{12}(?!\w)", default_blob))) == 1
    # Quantized, only where the plain GEMV has one warp per tile (these fixtures: one 128-wide
    # span): a gate|up of 64 tiles over 4096 inputs splits K over 8 warps and keeps its silu_mul.
    split = tmp_path / "split_k"
    split.mkdir()
    config = json.loads((REPO / "tests" / "gpu" / "llama3_8b_config.json").read_text())
    config.update(intermediate_size=256, num_hidden_layers=1, vocab_size=256, bos_token_id=1, eos_token_id=2)
    (split / "config.json").write_text(json.dumps(config))
    split_prog, _ = program("split_k", "--synthetic-weights", "1", "--weight-layout", "cuda-mma", "--quantize",
                            "int4-g128", model=split)
    assert split_prog["ops"]["SiluMul"] == 1 and split_prog["steps_with_silu_kernel"] == 0, split_prog
    # Every o_proj and down projection can do the add_rms_norm after it in its last block (plan
    # Step.norm_kernel): one more GEMV kernel per shape (o_proj's and down's), writing the next
    # GEMV's int8 rows where that reads them (sym: not the last down's, before the final norm;
    # act-order: the permutation writes them); any weights, any K split.
    for prog, blob, tag, kinds in ((gptq, gptq_blob, rb"\w+?_mma8_q8a", 2), (sym, sym_blob, rb"\w+?_mma8_q8a", 3),
                                   (default, default_blob, rb"bf16", 2), (split_prog, None, None, 0)):
        assert prog["steps_with_norm_kernel"] == prog["ops"]["AddRmsNorm"] == 2 * prog["ops"]["PagedAttention"], prog
        if blob is not None:
            found = set(re.findall(rb"llm_linear_n\d+_k\d+_" + tag + rb"_addnorm(?:_q8)?_[0-9a-f]{12}(?!\w)", blob))
            assert len(found) == kinds, found
    assert len(set(re.findall(rb"_mma8_q8a_addnorm_q8_[0-9a-f]{12}", sym_blob))) == 2
    assert gptq_f32["steps_with_norm_kernel"] == gptq_f32["ops"]["AddRmsNorm"], gptq_f32

    # Without GPU targets nothing goes to the library (there is no GPU path at all).
    ok([llmc, "compile", TINY / "qwen2", "-o", tmp_path / "none.fb", "--target", "none", "-q", *bf16])
    none = json.loads(ok([llmc, "inspect", tmp_path / "none.fb", "--json"]).stdout)["program"]
    assert none["steps_with_gemm_library"] == none["steps_with_rope_kernel"] == 0, none


def test_dense_gemm_bad_value_is_a_clean_error(llmc, tmp_path):
    out = tmp_path / "p.fb"
    proc = run([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "--dense-gemm", "cutlass"])
    assert proc.returncode > 0, proc  # an exit code, not a signal
    assert "--dense-gemm" in proc.stderr and "cutlass" in proc.stderr, proc.stderr
    proc = run([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "--quant-gemm", "marlin"])
    assert proc.returncode > 0, proc
    assert "--quant-gemm" in proc.stderr and "marlin" in proc.stderr, proc.stderr
    assert "cublaslt" in proc.stderr and "generated" in proc.stderr, proc.stderr  # says what is allowed
    proc = run([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "--quant-gemv", "fp8"])
    assert proc.returncode > 0, proc
    assert "--quant-gemv" in proc.stderr and "fp8" in proc.stderr, proc.stderr
    assert "int8" in proc.stderr and "f32" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "terminate" not in proc.stderr, proc.stderr
    proc = run([llmc, "compile", TINY / "llama", "-o", out, "--target", "none", "--gemv-l2-prefetch", "-3"])
    assert proc.returncode > 0, proc
    assert "--gemv-l2-prefetch" in proc.stderr, proc.stderr
    assert not out.exists()


def test_no_gemm_library_flag(llmrt, tiny_plan, tmp_path):
    """llmrt run|bench|serve --no-gemm-library and --no-tensor-core-linear: CUDA executor
    options; on the CPU they change nothing."""
    a = logits(llmrt, tiny_plan, PROMPTS[0], tmp_path)
    for flag in ("--no-gemm-library", "--no-tensor-core-linear"):
        b = logits(llmrt, tiny_plan, PROMPTS[0], tmp_path, flag)
        assert np.array_equal(a, b), flag
        for sub in ("run", "bench", "serve"):
            assert flag in ok([llmrt, sub, "--help"]).stdout, (sub, flag)


def test_compile_real_model_streams_weights(llmc, tmp_path):
    """Compiling SmolLM2 to f32 (--dequantize: 513 MiB of weights) must not hold the model in
    memory: the peak RSS llmc reports stays below the plan's weight bytes."""
    import os
    from pathlib import Path
    gguf = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not gguf or not Path(gguf).is_file():
        pytest.skip("LLMC_SMOLLM2_GGUF not set (tools/test.sh sets it)")
    plan = tmp_path / "smol.fb"
    err = ok([llmc, "compile", gguf, "-o", plan, "--target", "none", "--dequantize"]).stderr
    m = re.search(r"([0-9.]+) MiB weights.*peak RSS ([0-9.]+) MiB", err)
    assert m, err
    weights, peak = float(m.group(1)), float(m.group(2))
    print(f"compile: {weights:.1f} MiB weights, peak RSS {peak:.1f} MiB")
    assert weights > 400
    assert peak < weights, f"peak RSS {peak} MiB >= weights {weights} MiB"


SHARED_VOCAB = TINY.parents[2].parent / "shared" / "data" / "tokenizers" / "gguf-vocab"
SEP = "\n__ggml_vocab_test__\n"


@pytest.mark.parametrize("vocab", ["gpt-2", "llama-bpe", "qwen2", "llama-spm"])
def test_tokenize_cli_matches_llamacpp_vectors(llmc, vocab):
    gguf = SHARED_VOCAB / f"ggml-vocab-{vocab}.gguf"
    if not gguf.exists():
        pytest.fail(f"shared tokenizer data missing at {gguf}")
    inp = (SHARED_VOCAB / f"ggml-vocab-{vocab}.gguf.inp").read_bytes()
    expected = (SHARED_VOCAB / f"ggml-vocab-{vocab}.gguf.out").read_text().splitlines()
    proc = subprocess.run([str(llmc), "tokenize", "--tokenizer", str(gguf), "--no-bos", "--input-sep", SEP],
                          input=inp, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    got = proc.stdout.decode().splitlines()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.split() == e.split(), f"case {i}"
    # --decode restores the text from the ids.
    back = subprocess.run([str(llmc), "tokenize", "--tokenizer", str(gguf), "--decode", "--input-sep", SEP],
                          input=proc.stdout, capture_output=True, timeout=300)
    assert back.returncode == 0, back.stderr.decode()


def test_plan_tokenizer_equals_gguf_tokenizer(llmc, tmp_path):
    """The tokenizer compiled into a plan encodes exactly like the GGUF it came from."""
    import os
    from pathlib import Path
    gguf = os.environ.get("LLMC_SMOLLM2_GGUF")
    if not gguf or not Path(gguf).is_file():
        pytest.skip("LLMC_SMOLLM2_GGUF not set (tools/test.sh sets it)")
    plan = tmp_path / "smol.fb"
    ok([llmc, "compile", gguf, "-o", plan, "--target", "none", "-q"])
    text = "Hello world! <|im_start|>user\nCombien coûte 1234 € ? 🤖 def f(x): return x**2\n".encode()
    a = subprocess.run([str(llmc), "tokenize", "--tokenizer", gguf], input=text, capture_output=True)
    b = subprocess.run([str(llmc), "tokenize", "--tokenizer", str(plan)], input=text, capture_output=True)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout and len(a.stdout.split()) > 10


def test_tokenize_bad_tokenizer_path(llmc, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{ not json")
    proc = subprocess.run([str(llmc), "tokenize", "--tokenizer", str(bad)], input=b"hi", capture_output=True, text=False)
    assert proc.returncode == 1 and b"tokenizer.json" in proc.stderr


HF_TOKENIZERS = SHARED_VOCAB.parent / "hf"


def test_chat_template_cli(llmc, tmp_path):
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]))
    out = ok([llmc, "chat-template", "--tokenizer", HF_TOKENIZERS / "qwen3", "--messages", msgs,
              "--add-generation-prompt"]).stdout
    assert out.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")
    assert out.endswith("<|im_start|>assistant\n")
    no_prompt = ok([llmc, "chat-template", "--tokenizer", HF_TOKENIZERS / "qwen3", "--messages", msgs]).stdout
    assert not no_prompt.endswith("<|im_start|>assistant\n")
    # A template error (Qwen3 rejects a conversation without a user query) is a clear error.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "system", "content": "x"}, {"role": "tool", "content": "y"}]))
    proc = run([llmc, "chat-template", "--tokenizer", HF_TOKENIZERS / "qwen3", "--messages", bad])
    assert proc.returncode in (0, 1)
    if proc.returncode == 1:
        assert "chat template" in proc.stderr
    notjson = tmp_path / "nj.json"
    notjson.write_text("[{")
    clean_error(run([llmc, "chat-template", "--tokenizer", HF_TOKENIZERS / "qwen3", "--messages", notjson]),
                "not valid JSON")


def test_unsupported_chat_template_fails_at_compile_time(llmc, tmp_path):
    m = tmp_path / "m"
    import shutil
    shutil.copytree(TINY / "llama", m)
    shutil.copy(HF_TOKENIZERS / "qwen3" / "tokenizer.json", m / "tokenizer.json")
    cfg = json.loads((HF_TOKENIZERS / "qwen3" / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}"
    (m / "tokenizer_config.json").write_text(json.dumps(cfg))
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb", "--target", "none"]), "chat template",
                "no_such_filter")


def test_tokenizer_larger_than_model_vocab(llmc, tmp_path):
    import shutil
    m = tmp_path / "m"
    shutil.copytree(TINY / "llama", m)
    shutil.copy(HF_TOKENIZERS / "qwen3" / "tokenizer.json", m / "tokenizer.json")
    clean_error(run([llmc, "compile", m, "-o", tmp_path / "p.fb", "--target", "none"]), "vocabulary")


def test_kv_cache_dtypes(llmc, llmrt, tmp_path):
    """--kv-cache-dtype: bf16 and f16 caches hold half the bytes of an f32 one per token, fp8 a quarter
    (inspect and its memory fit), and their logits stay within the elements' rounding of the f32
    cache's; auto (the default) follows --weight-dtype; an unknown type is a clean error naming the
    choices."""
    cfg = json.loads((TINY / "llama" / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rows = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"]
    want = {"f32": ("F32", rows * head_dim * 4), "bf16": ("BF16", rows * head_dim * 2),
            "f16": ("F16", rows * head_dim * 2), "fp8": ("F8E4M3", rows * head_dim),
            "int8": ("I8", rows * (head_dim + 4))}
    plans, fits = {}, {}
    for kv, (dtype, per_token) in want.items():
        plans[kv] = tmp_path / f"{kv}.fb"
        ok([llmc, "compile", TINY / "llama", "-o", plans[kv], "--target", "none", "-q", "--kv-cache-dtype", kv])
        j = json.loads(ok([llmc, "inspect", plans[kv], "--json", "--memory", "1GiB"]).stdout)
        assert (j["kv_cache"]["dtype"], j["kv_cache"]["bytes_per_token"]) == (dtype, per_token), j["kv_cache"]
        fits[kv] = j["memory_fit"]["kv_blocks"]
    assert fits["bf16"] == fits["f16"] >= 2 * fits["f32"] - 1, fits  # twice the tokens in the same budget
    assert fits["fp8"] >= 2 * fits["f16"] - 1, fits  # and twice again
    ref = logits(llmrt, plans["f32"], PROMPTS, tmp_path)
    scale = np.abs(ref).max()
    for kv, tol in (("bf16", 1e-2), ("f16", 1e-3), ("fp8", 1e-1)):  # (measured: 2.3e-3, 1.9e-4, 5.2e-2)
        got = logits(llmrt, plans[kv], PROMPTS, tmp_path)
        err = np.abs(got - ref).max() / scale
        print(f"{kv}: max |logit error| / max |logit| = {err:.3g}")
        assert 0 < err < tol, (kv, err)  # rounded (not the f32 cache), within the rounding
    for weights, dtype in (("f32", "F32"), ("bf16", "BF16"), ("f16", "F16")):
        plan = tmp_path / f"auto_{weights}.fb"
        ok([llmc, "compile", TINY / "llama", "-o", plan, "--target", "none", "-q", "--weight-dtype", weights])
        assert json.loads(ok([llmc, "inspect", plan, "--json"]).stdout)["kv_cache"]["dtype"] == dtype
    proc = run([llmc, "compile", TINY / "llama", "-o", tmp_path / "x.fb", "--target", "none", "--kv-cache-dtype",
                "e5m2"])
    assert proc.returncode > 0 and "--kv-cache-dtype" in proc.stderr and "bf16" in proc.stderr, proc.stderr
