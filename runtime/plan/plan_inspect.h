// Human- and machine-readable summary of a plan: what `llmc inspect` prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/plan/plan_file.h"

namespace llmrt {

/// Bytes of one KV cache element: F32 4, BF16 / F16 2, F8E4M3 / I8 1 (int8's per-row scales
/// apart); 0 for a type no backend keeps.
uint64_t kv_elem_bytes(fb::DType dtype);
/// A KV cache element type: its name in the compiler (llm.kv_spec's kv_dtype, --kv-cache-dtype),
/// the plan's DType and the required feature that names it to runtimes.
struct KvCacheType {
  const char* name;
  fb::DType dtype;
  const char* feature;
};
/// The type called `name` ("f32", "bf16", "f16", "fp8", "int8", or the DType's own name, e.g.
/// "F8E4M3"); null for none.
const KvCacheType* kv_cache_type(std::string_view name);
/// Bytes of K and V for one token across all layers, from the plan's KvSpec.
uint64_t kv_bytes_per_token(const fb::Plan& plan);
/// Workspace (activation arena + attention scratch) for a step of `tokens` tokens on `threads`.
uint64_t workspace_bytes(const fb::Plan& plan, int64_t tokens, int threads);

struct MemoryFit {
  uint64_t budget = 0;          // total bytes offered
  uint64_t weights = 0;
  uint64_t workspace = 0;       // at the plan's max tokens per step
  uint64_t kv_budget = 0;       // what is left for the KV cache
  int64_t kv_blocks = 0;        // whole blocks that fit
  int64_t tokens_in_cache = 0;
};
MemoryFit fit_memory(const Plan& plan, uint64_t budget, int threads);
/// Max sequences that fit at `context` tokens each (whole blocks per sequence).
int64_t max_sequences(const fb::Plan& plan, const MemoryFit& fit, int64_t context);

/// Parses "8GiB", "512MiB", "1.5GB", "1000000" → bytes.
std::optional<uint64_t> parse_bytes(const std::string& text);

/// The text (or JSON) `llmc inspect` prints; `memory` adds the KV fit table.
std::string inspect_plan(const Plan& plan, bool json, std::optional<uint64_t> memory);

}  // namespace llmrt
