// A tiny Llama-shaped plan built with the FlatBuffers builder + PlanFileWriter (random weights),
// and a naive full-recompute reference of the same model, for executor tests. Reusable by other
// test folders (link llmrt_tiny_plan).
//
//   TinyPlanConfig cfg;                       // 2 layers, GQA, vocab 50 ...
//   TinyPlanSpec spec = make_tiny_plan(cfg);  // editable description (tests break it on purpose)
//   write_tiny_plan(spec, "/tmp/x.plan");     // -> Plan::open
//   reference_logits(spec, tokens)            // [n, vocab], every position, causal
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/plan/plan_file.h"

namespace llmrt::testing {

struct TinyPlanConfig {
  int vocab = 50;
  int hidden = 32;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 8;
  int intermediate = 40;
  /// true: fused QKV (weight concat + Split), fused gate_up SiluMul, AddRmsNorm.
  /// false: separate q/k/v and gate/up linears, Add + RmsNorm.
  bool fused = false;
  /// With fused (and no qk_norm): one RopeKvStore step in place of Split, Rope, Rope, KvStore.
  bool rope_kv_store = false;
  bool qkv_bias = false;       // Qwen2-style q/k/v biases
  bool qk_norm = false;        // Qwen3-style per-head RMSNorm of q and k (grouped RmsNorm)
  bool tie_embeddings = false;
  std::string rope_style = "neox";     // "neox" | "interleaved"
  std::string rope_type = "default";   // "default" | "linear" | "llama3"
  double rope_theta = 10000.0;
  double rope_factor = 2.0;            // linear / llama3
  double rope_low_freq_factor = 1.0;   // llama3
  double rope_high_freq_factor = 4.0;  // llama3
  int64_t rope_original_max_position = 16;  // llama3
  int sliding_window = 0;
  float eps = 1e-5f;
  int block_size = 4;
  std::string kv_dtype = "f32";  // KV cache: f32, bf16, f16, fp8 or int8 (codes + a scale per token and head)
  int max_tokens = 64;
  int max_seqs = 8;
  int max_model_len = 64;
  bool reuse_memory = true;  // plan the arena with liveness-based reuse (else one slot per value)
  uint32_t seed = 1;
};

struct TinyParam {
  std::string key;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
};

struct TinyStep {
  fb::OpKind op = fb::OpKind::Unknown;
  std::vector<int> inputs, outputs, weights;
  std::vector<TinyParam> params;  // sorted by key when written
  std::string name;
};

struct TinyValue {
  std::string name;
  fb::RowKind rows = fb::RowKind::Tokens;
  int64_t width = 0;
  fb::DType dtype = fb::DType::F32;
  uint64_t offset_per_row = 0;
};

struct TinyTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  fb::DType dtype = fb::DType::F32;
};

/// Everything the plan file will contain; fields are public so tests can corrupt them.
struct TinyPlanSpec {
  TinyPlanConfig config;
  std::vector<TinyTensor> tensors;
  std::vector<TinyValue> values;
  std::vector<TinyStep> steps;
  int token_input = 0, position_input = 1, output = -1;
  uint64_t arena_bytes_per_token = 0;
  int kv_layers = 0, kv_heads = 0, kv_head_dim = 0, kv_block_size = 0;
  fb::DType kv_dtype = fb::DType::F32;
  int max_tokens = 0, max_seqs = 0, max_model_len = 0;

  int tensor_index(const std::string& name) const;
  const std::vector<float>& weight(const std::string& name) const;
};

/// Random weights + the Llama forward program per PROGRAM.md, memory planned.
TinyPlanSpec make_tiny_plan(const TinyPlanConfig& config);
/// Recomputes offset_per_row of every F32 value (first fit; with reuse when `reuse`).
void plan_tiny_memory(TinyPlanSpec* spec, bool reuse);
/// Serializes the FlatBuffer (identifier LLMP) only.
std::vector<uint8_t> serialize_tiny_plan(const TinyPlanSpec& spec);
/// Writes a complete plan file (header, FlatBuffer, weights) with PlanFileWriter.
Status write_tiny_plan(const TinyPlanSpec& spec, const std::string& path);
/// write_tiny_plan to a unique temporary path, then Plan::open (the file is removed again).
StatusOr<std::unique_ptr<Plan>> open_tiny_plan(const TinyPlanSpec& spec);

/// Naive reference of the model in `spec` (from its config and weights, not its program):
/// logits [tokens.size(), vocab] for every position of one sequence, full causal recompute with
/// double accumulation.
std::vector<float> reference_logits(const TinyPlanSpec& spec, std::span<const int32_t> tokens);

}  // namespace llmrt::testing
