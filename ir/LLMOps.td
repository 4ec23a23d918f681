//===- LLMOps.td - the `llm` dialect ----------------------------*- tablegen -*-===//
//
// The `llm` dialect: one op per step of the forward contract in
// runtime/plan/PROGRAM.md. Activations are row-major f32 tensors [rows, width]
// whose row count is dynamic (T tokens, or L logit rows); weights are symbolic
// references (`llm.weight "name"`) into the model's tensor table.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_IR_LLMOPS_TD
#define LLMC_IR_LLMOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

def LLM_Dialect : Dialect {
  let name = "llm";
  let cppNamespace = "::llmc::llm";
  let summary = "Ahead-of-time LLM forward programs over a ragged token batch";
  let description = [{
    Ops of the forward contract (runtime/plan/PROGRAM.md). A module holds one
    `func.func @forward(%tokens, %positions, %batch, %kv)`; the passes fuse ops,
    fix the KV-cache layout and plan activation memory before the plan writer
    lowers each op to one plan step.
  }];
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
  }];
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class LLM_Type<string name, string typeMnemonic> : TypeDef<LLM_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def LLM_BatchType : LLM_Type<"Batch", "batch"> {
  let summary = "the opaque batch descriptor of one forward call";
  let description = [{
    Carries query_start, context_lens, block_tables, kv_slots and
    logits_indices (PROGRAM.md, "The batch"). Tokens and positions are
    separate tensor arguments.
  }];
}

def LLM_KvCacheType : LLM_Type<"KvCache", "kv_cache"> {
  let summary = "the paged KV cache, threaded through kv_store";
  let description = [{
    `llm.kv_store` returns the updated cache, so store-before-read is an SSA
    dependency and no op has hidden side effects.
  }];
}

//===----------------------------------------------------------------------===//
// Op base
//===----------------------------------------------------------------------===//

class LLM_Op<string mnemonic, list<Trait> traits = []>
    : Op<LLM_Dialect, mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

// Attributes of the KV layout, written by --llm-kv-cache-layout.
defvar LLM_KvLayoutArgs = (ins OptionalAttr<I64Attr>:$block_size,
                               OptionalAttr<StrAttr>:$kv_dtype,
                               OptionalAttr<StrAttr>:$layout);

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def LLM_WeightOp : LLM_Op<"weight"> {
  let summary = "reference to a tensor of the model's tensor table";
  let description = [{
    A symbolic weight: it becomes a `Tensor` index in the plan, never a step.
    The shape is static; linear weights are `[out, in]`.

    ```mlir
    %w = llm.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xf32>
    ```

    Quantization travels as attributes (formats of runtime/quant/quant_format.h,
    e.g. "int4-g32-f16-min"); the result type stays the logical f32 tensor:
    `source_quant` is the format the checkpoint stores the tensor in (set by
    the importer when it can be kept without requantization); `quant` is the
    format the plan stores it in (set by --llm-pack-weights), its bytes in
    the `cpu_row_groups` layout. `quant` may also name a dense storage,
    "f16" or "bf16" (row-major, 2 bytes per element). Without `quant` the
    plan holds f32.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<StrAttr>:$source_quant,
                       OptionalAttr<StrAttr>:$quant);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def LLM_WeightConcatOp : LLM_Op<"weight_concat"> {
  let summary = "a derived weight: concatenation of weights along an axis";
  let description = [{
    Materialized by the plan writer as a new tensor (e.g. fused QKV).
    Operands must be `llm.weight` or `llm.weight_concat` results of equal rank
    whose dims agree except along `axis`; the result's `axis` dim is the sum.

    ```mlir
    %wqkv = llm.weight_concat %wq, %wk, %wv {axis = 0 : i64}
        : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs,
                       DefaultValuedAttr<I64Attr, "0">:$axis,
                       OptionalAttr<StrAttr>:$quant);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let builders = [
    /// Infers the result type (static shape, summed along `axis`).
    OpBuilder<(ins "::mlir::ValueRange":$inputs, CArg<"int64_t", "0">:$axis)>
  ];
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

def LLM_EmbeddingOp : LLM_Op<"embedding"> {
  let summary = "row gather: out[t] = table[tokens[t]]";
  let arguments = (ins AnyRankedTensor:$tokens, AnyRankedTensor:$table);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $table attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$tokens, "::mlir::Value":$table)>];
}

def LLM_RmsNormOp : LLM_Op<"rms_norm"> {
  let summary = "RMS normalization of each group of G columns";
  let description = [{
    `x[T, D]`, `w[G]` with `D % G == 0`: `G == D` is a plain RMSNorm,
    `G == head_dim` a per-head q/k norm. `y = x / sqrt(mean(x^2) + eps) * w`.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$weight, F64Attr:$eps);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                                 "double":$eps)>];
}

def LLM_AddOp : LLM_Op<"add", [AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let summary = "elementwise sum of two activations of the same shape";
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let builders = [OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs)>];
}

def LLM_AddRmsNormOp : LLM_Op<"add_rms_norm"> {
  let summary = "fused residual add and RMSNorm: sum = x + residual, normed = rms_norm(sum)";
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$residual,
                       AnyRankedTensor:$weight, F64Attr:$eps);
  let results = (outs AnyRankedTensor:$normed, AnyRankedTensor:$sum);
  let assemblyFormat = [{
    $x `,` $residual `,` $weight attr-dict `:` functional-type(operands, results)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$residual,
                                 "::mlir::Value":$weight, "double":$eps)>];
}

def LLM_LinearOp : LLM_Op<"linear"> {
  let summary = "y = x * w^T (+ bias)";
  let description = [{
    `x[T, K]`, `w[N, K]` (Hugging Face `[out, in]` layout), optional `bias[N]`
    → `[T, N]`.

    ```mlir
    %y = llm.linear %x, %w : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
    %z = llm.linear %x, %w, %b
        : (tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$weight,
                       Optional<AnyRankedTensor>:$bias);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let builders = [
    /// Infers [rows(x), N]; pass a null `bias` for none.
    OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                   CArg<"::mlir::Value", "{}">:$bias)>
  ];
}

def LLM_SplitOp : LLM_Op<"split"> {
  let summary = "column split of x[T, sum(sizes)] into one result per size";
  let description = [{
    ```mlir
    %q, %k, %v = llm.split %qkv sizes [64, 32, 32]
        : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
    ```
    A split with a single size folds to its input.
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $x `sizes` $sizes attr-dict `:` type($x) `->` type($results)
  }];
  let hasFolder = 1;
  let builders = [
    /// Infers one [rows(x), size] result per size.
    OpBuilder<(ins "::mlir::Value":$x, "::llvm::ArrayRef<int64_t>":$sizes)>
  ];
}

def LLM_PermuteColumnsOp : LLM_Op<"permute_columns"> {
  let summary = "y[:, j] = x[:, perm[j]]: the input order of a linear with permuted columns";
  let description = [{
    `x[T, K]` → `[T, K]`; `perm` is a permutation of `0..K-1`. A GPTQ
    `desc_act` checkpoint quantizes the input columns in its own order
    (`g_idx`); the importer stores such a weight with its columns grouped
    (column j holds input perm[j]) and feeds the linear `x[:, perm]`, so the
    groups are contiguous like every other format. Linears that share an input
    and a permutation share one permute_columns (and may then be fused).

    ```mlir
    %xp = llm.permute_columns %x perm [2, 0, 3, 1] : tensor<?x4xf32> -> tensor<?x4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x `perm` $perm attr-dict `:` type($x) `->` type($result)
  }];
}

def LLM_RopeOp : LLM_Op<"rope"> {
  let summary = "rotary position embedding (Hugging Face semantics)";
  let description = [{
    `x[T, num_heads * head_dim]`, `positions[T]` (i32) → same shape as x.
    `style`: "neox" rotates halves, "interleaved" rotates pairs.
    `rope_type`: "default", "linear" (positions / factor) or "llama3"
    (uses factor, low_freq_factor, high_freq_factor, original_max_position).
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$positions,
                       I64Attr:$num_heads, I64Attr:$head_dim, F64Attr:$theta,
                       DefaultValuedAttr<StrAttr, "\"neox\"">:$style,
                       DefaultValuedAttr<StrAttr, "\"default\"">:$rope_type,
                       DefaultValuedAttr<F64Attr, "1.0">:$factor,
                       DefaultValuedAttr<F64Attr, "1.0">:$low_freq_factor,
                       DefaultValuedAttr<F64Attr, "4.0">:$high_freq_factor,
                       DefaultValuedAttr<I64Attr, "0">:$original_max_position);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x `,` $positions attr-dict `:` functional-type(operands, results)
  }];
}

def LLM_KvStoreOp : LLM_Op<"kv_store"> {
  let summary = "write k/v rows of this batch into the paged KV cache of one layer";
  let description = [{
    `K/V[layer][slot] = k/v[t]` for every token `t` with `kv_slots[t] >= 0`.
    `k`, `v` are `[T, num_kv_heads * head_dim]`. Returns the updated cache.
    `block_size`, `kv_dtype`, `layout` are set by `--llm-kv-cache-layout`.
  }];
  let arguments = !con((ins AnyRankedTensor:$k, AnyRankedTensor:$v,
                            LLM_KvCacheType:$kv, LLM_BatchType:$batch,
                            I64Attr:$layer, I64Attr:$num_kv_heads, I64Attr:$head_dim),
                       LLM_KvLayoutArgs);
  let results = (outs LLM_KvCacheType:$result);
  let assemblyFormat = [{
    $k `,` $v `,` $kv `,` $batch attr-dict `:` type($k) `,` type($v)
  }];
}

def LLM_RopeKvStoreOp : LLM_Op<"rope_kv_store"> {
  let summary = "rotary embedding of a fused q|k|v row, with k and v written into the paged KV cache";
  let description = [{
    `qkv[T, (num_heads + 2 * num_kv_heads) * head_dim]` (columns q, then k,
    then v: the fused projection of --llm-fuse-qkv) and `positions[T]` (i32)
    give `q[T, num_heads * head_dim]`, rotated as `llm.rope` rotates it, and
    the updated cache: `K[layer][slot] = rope(k)[t]`, `V[layer][slot] = v[t]`
    for every token `t` with `kv_slots[t] >= 0`. The same numbers as
    `llm.split` + `llm.rope` of q and of k + `llm.kv_store`, in one pass over
    each row (--llm-fuse-rope-kv-store). Rope attributes as `llm.rope`'s, cache
    attributes as `llm.kv_store`'s.
  }];
  let arguments = !con((ins AnyRankedTensor:$qkv, AnyRankedTensor:$positions,
                            LLM_KvCacheType:$kv, LLM_BatchType:$batch,
                            I64Attr:$layer, I64Attr:$num_heads,
                            I64Attr:$num_kv_heads, I64Attr:$head_dim, F64Attr:$theta,
                            DefaultValuedAttr<StrAttr, "\"neox\"">:$style,
                            DefaultValuedAttr<StrAttr, "\"default\"">:$rope_type,
                            DefaultValuedAttr<F64Attr, "1.0">:$factor,
                            DefaultValuedAttr<F64Attr, "1.0">:$low_freq_factor,
                            DefaultValuedAttr<F64Attr, "4.0">:$high_freq_factor,
                            DefaultValuedAttr<I64Attr, "0">:$original_max_position),
                       LLM_KvLayoutArgs);
  let results = (outs AnyRankedTensor:$q, LLM_KvCacheType:$kv_out);
  let assemblyFormat = [{
    $qkv `,` $positions `,` $kv `,` $batch attr-dict `:` type($qkv) `,` type($positions) `->` type($q)
  }];
}

def LLM_PagedAttentionOp : LLM_Op<"paged_attention"> {
  let summary = "causal GQA attention over the paged KV cache";
  let description = [{
    `q[T, num_heads * head_dim]` → `[T, num_heads * head_dim]`; head `h` reads
    kv head `h / (num_heads / num_kv_heads)`. `sliding_window` 0 means none.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, LLM_KvCacheType:$kv,
                            LLM_BatchType:$batch, I64Attr:$layer,
                            I64Attr:$num_heads, I64Attr:$num_kv_heads,
                            I64Attr:$head_dim, F64Attr:$scale,
                            DefaultValuedAttr<I64Attr, "0">:$sliding_window),
                       LLM_KvLayoutArgs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $q `,` $kv `,` $batch attr-dict `:` type($q) `->` type($result)
  }];
}

def LLM_SiluMulOp : LLM_Op<"silu_mul"> {
  let summary = "silu(gate) * up; one fused operand [T, 2I] (gate first) or two [T, I]";
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let builders = [
    /// Infers [rows, I] from one fused [rows, 2I] operand or two [rows, I] operands.
    OpBuilder<(ins "::mlir::ValueRange":$inputs)>
  ];
}

def LLM_LogitsOp : LLM_Op<"logits"> {
  let summary = "logits of the rows logits_indices: x[rows] * w^T";
  let description = [{
    `x[T, D]`, `w[V, D]` → `[L, V]`, L = number of logits_indices in `batch`.
  }];
  let arguments = (ins AnyRankedTensor:$x, AnyRankedTensor:$weight, LLM_BatchType:$batch);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight `,` $batch attr-dict `:` functional-type(operands, results)
  }];
}

#endif // LLMC_IR_LLMOPS_TD
