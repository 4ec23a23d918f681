// Host-side planning of the CUDA backend, decided before any GPU call so that it is unit-tested
// without a GPU: launch geometry from a kernel's grid rule, the decode batch sizes captured as
// CUDA graphs, and the device memory plan (weights, activations, KV cache under
// --memory-utilization) that the runtime states before it serves a request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/plan/plan_generated.h"

namespace llmrt::cuda {

/// A kernel's grid rule (codegen/KernelSpec.h): gridDim.x = ceil(T / per) * times, small_times
/// times that for steps of at most small_rows rows, plus seq_times per sequence of the step.
///   "rows" -> {1, 1};  "rows*<k>" -> {1, k};  "rows/<c>*<k>" -> {c, k};
///   "rows*<k> x<m> when rows<=<r>" -> {1, k, r, m};  "rows/<c>*<k> + seqs*<s>" -> {c, k, .., s}.
struct GridRule {
  int64_t per = 1;
  int64_t times = 1;
  int64_t small_rows = 0;
  int64_t small_times = 1;
  int64_t seq_times = 0;
};
/// Errors name the rule; numbers are positive decimals below 2^31.
StatusOr<GridRule> parse_grid_rule(std::string_view rule);
/// gridDim.x for T rows of S sequences, at most max_grid (the kernels walk their items with
/// grid-stride loops, so a capped grid is still correct); 0 for T = 0 (nothing to launch).
int64_t grid_size(const GridRule& rule, int64_t T, int64_t max_grid, int64_t S = 0);

/// Decode batch sizes captured as CUDA graphs: 1, 2, 4, then every multiple of 8 up to
/// max_seqs, and max_seqs itself (so every batch up to max_seqs replays a graph).
std::vector<int> graph_batch_sizes(int max_seqs);
/// The smallest captured size >= n (a batch of n pads to it), or -1 when n exceeds them all.
int graph_bucket(const std::vector<int>& sizes, int n);

/// The kernels' shared workspace: the largest Kernel.workspace_bytes of the plan (steps launch
/// one at a time on one stream, so one buffer serves them all).
uint64_t kernel_workspace_bytes(const fb::Plan& plan);

/// The device memory of the steps that call a GEMM library (Step.gemm_library): the library's
/// workspace, one buffer holding the bf16 copy of a step's input (max_tokens rows of the widest
/// input a to_bf16 kernel converts), then one holding a step's dequantized weight
/// (gemm_library_weight_bytes). 0 when no step calls one.
uint64_t gemm_library_bytes(const fb::Plan& plan, int max_tokens, uint64_t library_workspace);
/// The bf16 copy of the largest quantized weight a library step dequantizes
/// (Step.library_weight_kernel: n * k * 2 bytes, 256-aligned); 0 when none.
uint64_t gemm_library_weight_bytes(const fb::Plan& plan);

/// The int8 activations of the steps whose GEMV reads them (Step.input_quant_kernel), or which
/// steps write for such a GEMV (Step.quantized_output): one buffer of max_tokens rows of the
/// widest such value, each row in quantize_q8's layout
/// (codegen/KernelFamilies.h, q8RowBytes: 160 bytes per 128 values, the last 128 padded); twice
/// that and 256 bytes when a step has a silu_kernel (which writes the silu_mul's rows after those
/// of its own input, 256-aligned). 0 when no step has one.
uint64_t quant_input_bytes(const fb::Plan& plan, int max_tokens);
/// Bytes of one such int8 row of k values (quantize_q8's layout).
inline uint64_t q8_row_bytes(uint64_t k) { return (k + 127) / 128 * 160; }

struct DeviceMemoryPlan {
  uint64_t budget = 0;          // utilization * total device memory
  uint64_t weights = 0;         // every tensor of the plan
  uint64_t activations = 0;     // arena (per token * max_tokens) + workspace + int8 GEMV inputs
  uint64_t batch = 0;           // per-step inputs (tokens, positions, slots, tables) and logits
  uint64_t library = 0;         // GEMM library workspace and input copies (gemm_library_bytes)
  uint64_t kv_block_bytes = 0;  // one block of every layer, K and V
  int64_t kv_blocks = 0;        // what the rest of the budget holds
  uint64_t kv = 0;              // kv_blocks * kv_block_bytes
  uint64_t total() const { return weights + activations + batch + library + kv; }
};

/// The device memory of `plan` on `device` (total_memory) for steps of up to max_tokens rows and
/// max_seqs sequences, `library` bytes for the GEMM library's steps (gemm_library_bytes; 0 when
/// the steps run the generated kernels). Errors: utilization outside (0, 1]; a plan without forward program, KV
/// spec or memory plan; resource_exhausted naming every part when weights and activations leave
/// less KV cache than one sequence of max_model_len tokens needs.
StatusOr<DeviceMemoryPlan> plan_device_memory(const fb::Plan& plan, const DeviceInfo& device,
                                              double utilization, int max_tokens, int max_seqs,
                                              uint64_t library = 0);

/// "1.50 GiB", "3.25 MiB" or "0.50 KiB": two decimals in the largest unit (KiB at least) that is
/// not more than the value.
std::string format_bytes(uint64_t bytes);

}  // namespace llmrt::cuda
