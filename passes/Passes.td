//===- Passes.td - `llm` passes ---------------------------------*- tablegen -*-===//
//
// Every pass of the llmc pipeline, in pipeline order (see Pipeline.h).
// One implementation file per pass; one lit test per flag
// (tests/lit/passes/<flag without llm->.mlir).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PASSES_PASSES_TD
#define LLMC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def PackWeights : Pass<"llm-pack-weights", "::mlir::ModuleOp"> {
  let summary = "Choose how every weight matrix is stored: f32 or a quantized format, in the backend's layout";
  let description = [{
    Candidates are `llm.weight` ops whose every use is the weight operand of
    `llm.linear`, `llm.logits` or `llm.embedding` and that are 2-D. Each gets
    `quant = <format>` (runtime/quant/quant_format.h):
      * its `source_quant` (the checkpoint's blocks are kept bit for bit),
        unless `dequantize`; for target cuda a format with sub-scales becomes
        its expansion (groups of the sub-block, f32 scales: the same values),
        which the CUDA kernels read;
      * else, with `quantize = <format>`, that format (round-to-nearest
        quantization by the plan writer), for embedding / lm_head matrices
        only when `quantize-embeddings`. When the rows are not a whole number
        of groups, the largest multiple of 32 below the group size that
        divides them is used (a 576-wide row takes int4-g64 for int4-g128;
        with sub-scales a multiple of the sub-block above it, else groups of
        the sub-block without sub-scales). Target cuda refuses a format with
        sub-scales here.
    Other matrices are stored as `dense-dtype`: f32 (default, no `quant`),
    or `quant = "bf16"` / `"f16"` (dense, row-major, rounded to nearest
    even). Norm weights and biases stay f32. (With `dequantize` and no `quantize`: every
    weight, the float plan of a quantized checkpoint; with both: the
    checkpoint is dequantized, then re-quantized). The module gets `llm.weight_layout` = the target's
    layout (runtime/quant/quant_format.h): for target cpu, `layout=interleaved8`
    (default) gives "cpu_interleaved8": rows in tiles of 8 whose codes are
    interleaved in 4-byte chunks, so one 32-byte load feeds 8 rows' dot
    products (what the SIMD kernels read); `layout=row-groups` gives
    "cpu_row_groups": each row its groups (scale, offset, codes), the
    checkpoint's own block order. For target cuda, `layout=cuda-mma` (its
    default and only layout) gives "cuda_mma_n8": tiles of 8 rows whose codes
    sit where each lane of a warp finds its B-operand fragment of
    mma.sync.m16n8k16 (one 16-byte load per lane per 128 int4 codes).
    Runs before the fusion passes, which then only concatenate weights of one
    format. Fails on an unknown target or format.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "backend whose weight layout to use (cpu, cuda)">,
    Option<"quantize", "quantize", "std::string", /*default=*/"\"\"",
           "format for float weights (e.g. int4-g128-f16-min); empty: keep f32">,
    Option<"quantizeEmbeddings", "quantize-embeddings", "bool", /*default=*/"true",
           "also quantize embedding tables and lm_head">,
    Option<"dequantize", "dequantize", "bool", /*default=*/"false",
           "store every weight as f32, even quantized checkpoint tensors">,
    Option<"denseDtype", "dense-dtype", "std::string", /*default=*/"\"f32\"",
           "storage of matrices that are not quantized: f32, f16 or bf16">,
    Option<"layout", "layout", "std::string", /*default=*/"\"\"",
           "weight layout: interleaved8 or row-groups (cpu), cuda-mma (cuda); empty: the target's default">,
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def FuseQkv : Pass<"llm-fuse-qkv", "::mlir::func::FuncOp"> {
  let summary = "Fuse llm.linear ops that share their input into one linear + split";
  let description = [{
    Every set of two or more `llm.linear` ops that read the same input value,
    whose results do not feed `llm.silu_mul` (those are left to
    --llm-fuse-gate-up), whose weights (and biases) are `llm.weight` /
    `llm.weight_concat` values, and that all have a bias or all have none,
    becomes one `llm.linear` over `llm.weight_concat` of the weights (and of
    the biases) followed by `llm.split` into the original widths. The typical
    catch is the q/k/v projection of every attention block. A set that mixes
    biased and unbiased linears is left alone. Linears whose weights are
    stored in different formats (`quant`) form separate sets.
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def FuseGateUp : Pass<"llm-fuse-gate-up", "::mlir::func::FuncOp"> {
  let summary = "Fuse the gate and up projections of a SwiGLU MLP";
  let description = [{
    `llm.silu_mul(llm.linear(x, wg), llm.linear(x, wu))` where both linears
    read the same `x`, have no bias, have weights of one storage format
    (`quant`), and feed only this `silu_mul` becomes
    `llm.silu_mul(llm.linear(x, llm.weight_concat(wg, wu)))`, the one-operand
    (fused [rows, 2I], gate first) form.
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def FuseAddRmsNorm : Pass<"llm-fuse-add-rmsnorm", "::mlir::func::FuncOp"> {
  let summary = "Fuse a residual add with the plain RMSNorm that reads it";
  let description = [{
    `%s = llm.add %a, %b` used by a plain `llm.rms_norm %s, %w` (weight size
    equal to the width, i.e. not a per-head norm) becomes
    `%n, %s2 = llm.add_rms_norm %a, %b, %w`; the norm's uses take `%n` and
    every other use of `%s` takes `%s2`. When several plain norms read the
    same sum, the first in program order is fused.
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def KvCacheLayout : Pass<"llm-kv-cache-layout", "::mlir::ModuleOp"> {
  let summary = "Choose the paged KV-cache layout and record it in the module";
  let description = [{
    Writes `block_size`, `kv_dtype` and `layout = "block_head_slot_dim"` on
    every `llm.kv_store` and `llm.paged_attention`, and the module attribute
    `llm.kv_spec = {num_layers, num_kv_heads, head_dim, block_size, kv_dtype,
    layout}` (num_layers = highest layer + 1). Fails when the cache ops
    disagree on num_kv_heads or head_dim, when a paged_attention reads a layer
    no kv_store writes, or for a kv dtype other than f32, bf16, f16, fp8 or
    int8 (bf16, f16: elements rounded to nearest even when stored; fp8: E4M3,
    rounded to nearest even, saturating at +-448; int8: codes with one f32
    scale per token and head, see runtime/cpu/kernels.h).
    A module without cache ops is left unchanged.
  }];
  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"16",
           "tokens per KV-cache block">,
    Option<"kvDtype", "kv-dtype", "std::string", /*default=*/"\"f32\"",
           "element type of the KV cache: f32, bf16, f16, fp8 (E4M3) or int8">,
  ];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def FuseRopeKvStore : Pass<"llm-fuse-rope-kv-store", "::mlir::func::FuncOp"> {
  let summary = "Fuse the split of a q|k|v projection, the rotations of q and k and the KV-cache write";
  let description = [{
    `%q, %k, %v = llm.split %qkv`, `llm.rope %q` (its only use), `llm.rope %k`
    and `llm.kv_store(rope(k), v)` (their only uses) become
    `%q_rot, %kv = llm.rope_kv_store %qkv, %positions, %kv, %batch` in the
    store's place, when both ropes rotate alike (positions, head_dim, theta,
    style, rope type and its factors), the k rope's heads are the store's
    num_kv_heads and the split's sizes are exactly q, k and v of those heads.
    The fused op carries the q rope's attributes and the store's layer and
    KV layout. Runs after --llm-kv-cache-layout. Not matched: projections
    that are not fused (--llm-fuse-qkv off), or ops between the split and the
    ropes (Qwen3's per-head q/k norms).
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

def PlanMemory : Pass<"llm-plan-memory", "::mlir::func::FuncOp"> {
  let summary = "Assign every activation an arena offset per row of capacity";
  let description = [{
    Liveness over the function body in program order. Every ranked-tensor
    result of an op other than llm.weight / llm.weight_concat (function
    arguments excluded) gets a slot of `width * element bytes` rounded up to
    64 bytes per row. Slots are allocated best-fit from the space of values
    whose last use lies strictly before the defining op (a value dies after
    its last user; values returned by the function live to the end), so an
    op's outputs never overlap its own inputs or each other.
    Records `llm.arena_offsets = [i64, ...]` (an ArrayAttr of i64
    IntegerAttrs: bytes per row, one per result, -1 for results without a
    slot, e.g. a !llm.kv_cache) on every op with a slot and
    `llm.arena_bytes_per_token` (i64) on the function.
  }];
  let dependentDialects = ["::llmc::llm::LLMDialect"];
}

#endif // LLMC_PASSES_PASSES_TD
