// Offline generation over the CPU executor: several requests run together as one ragged batch
// per step (prompts chunked to the step's token budget, then one decode row per sequence), with
// the paged KV cache managed by BlockManager and tokens drawn by the Sampler. This is what
// `llmrt run` uses; the serving scheduler (continuous batching, preemption) builds on the same
// pieces.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/sampler/sampler.h"

namespace llmrt {

class Plan;

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  bool want_prompt_logits = false;  // logits at every prompt position (teacher forcing)
  bool want_last_logits = false;    // logits at the last prompt position
};

struct GenerationOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;        // "stop" (EOS) | "length" (max_tokens or context)
  std::vector<float> prompt_logits; // [prompt_len, vocab]
  std::vector<float> last_logits;   // [vocab]
};

struct GeneratorOptions {
  /// --device: "cpu" (default), "auto", "cuda" or "cuda:N" (runtime/engine/make_executor.h). The
  /// capacities and KV blocks of `executor` apply to every backend.
  std::string device = "cpu";
  CpuExecutorOptions executor;
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;          // --no-cuda-graphs: launch decode steps kernel by kernel
  bool tiled_attention = true;      // --no-tiled-attention: paged attention on the per-row kernel only
  bool gemm_library = true;         // --no-gemm-library: dense GEMMs on the plan's generated kernels
  bool programmatic_launch = true;  // --no-programmatic-launch: kernels one after the other (cuda)
  bool tensor_core_linear = true;   // --no-tensor-core-linear: linear/logits on the CUDA-core GEMV only
  bool fused_quantize = true;       // --no-fused-quantize: int8 GEMVs quantize their input themselves
  bool rope_in_attention = true;    // --no-rope-in-attention: decode launches rope_kv_store apart
  bool silu_in_gemv = true;         // --no-silu-in-gemv: decode launches silu_mul apart
  bool device_sampling = true;      // --no-device-sampling: draws the summary cannot decide go to the host
  bool norm_in_gemv = true;         // --no-norm-in-gemv: batch-1 decode launches add_rms_norm apart
  std::vector<int32_t> eos_ids;     // stop tokens; empty: the plan's generation defaults
};

/// Called after each generated token: (request index, token).
using TokenCallback = std::function<void(size_t, int32_t)>;

class Generator {
 public:
  static StatusOr<std::unique_ptr<Generator>> create(const Plan& plan, const GeneratorOptions& options);
  /// Over an executor made elsewhere (tests: one on an emulated device); eos_ids empty: the plan's.
  static std::unique_ptr<Generator> over(std::unique_ptr<Executor> executor, const Plan& plan,
                                         std::vector<int32_t> eos_ids = {});
  ~Generator();

  /// Runs every request to completion. Errors (prompt longer than the context, ids outside the
  /// vocabulary, bad sampling parameters, KV cache too small) are reported before any work.
  StatusOr<std::vector<GenerationOutput>> generate(const std::vector<GenerationRequest>& requests,
                                                   const TokenCallback& on_token = {});

  Executor& executor() { return *executor_; }
  /// Why --device auto runs on the CPU ("" otherwise).
  const std::string& device_note() const { return device_note_; }
  int vocab_size() const { return executor_->vocab_size(); }
  int max_model_len() const { return executor_->max_model_len(); }

  /// KV blocks needed to run `requests` together (for CpuExecutorOptions::num_kv_blocks).
  static int64_t blocks_needed(const std::vector<GenerationRequest>& requests, int block_size,
                               int max_model_len);

 private:
  Generator() = default;
  std::unique_ptr<Executor> executor_;
  std::string device_note_;
  std::vector<int32_t> eos_ids_;
};

}  // namespace llmrt
