// Executes a plan's `forward` program on the CPU over a ragged batch with a paged KV cache
// (runtime/plan/PROGRAM.md). create() decodes and validates the program once into typed steps
// and allocates everything (arena, KV cache, scratch); forward() validates the batch and runs the
// steps without allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/executor.h"
#include "runtime/plan/plan_file.h"

namespace llmrt {

class Profiler;
namespace cpu {
class QuantScratch;
}
class ThreadPool;

/// munmap()s the executor's KV cache mapping.
struct KvUnmapDeleter {
  size_t bytes = 0;
  void operator()(float* p) const;
};

struct CpuExecutorOptions {
  int threads = 0;              // 0: the CPUs this process may use (its affinity mask)
  bool pin_threads = false;     // pin each pool thread to one of those CPUs
  int max_tokens_per_step = 0;  // 0: the plan's cap
  int max_seqs_per_step = 0;    // 0: the plan's cap
  int num_kv_blocks = 0;        // 0: enough for one sequence of max_model_len tokens
  uint64_t max_memory_bytes = 0;  // 0: no limit; else create() refuses a plan needing more
  /// Numerical contract of the quantized kernels (runtime/cpu/kernels.h): "" = the plan's
  /// (Plan.cpu_kernels), "reference" or "fast".
  std::string cpu_kernels;
};

class CpuExecutor : public Executor {
 public:
  /// Decodes and validates plan.program("forward"). The executor reads weights in place: `plan`
  /// must outlive it. Errors: not_found (no forward program), invalid_argument (inconsistent
  /// plan or options beyond the plan's caps), unimplemented (dtypes/layouts/ops the CPU backend
  /// lacks), resource_exhausted (allocation).
  static StatusOr<std::unique_ptr<CpuExecutor>> create(const Plan& plan,
                                                       const CpuExecutorOptions& options);
  ~CpuExecutor() override;
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  /// Runs one step; writes logits [L, vocab] (row i for logits_indices[i]). Every sequence's
  /// positions must be context_len - n .. context_len - 1 (n = its rows in this step) and every
  /// row's kv slot must be the block-table slot of its position.
  Status forward(const BatchInput& batch, float* logits) override;
  /// Attaches a profiler (nullptr detaches): forward() then times every step into it
  /// (runtime/engine/profiler.h). Without one, forward() does no profiling work.
  void set_profiler(Profiler* profiler) override;
  /// Copies physical KV block src to dst in every layer (copy-on-write after BlockManager::fork).
  Status copy_kv_block(int32_t src, int32_t dst) override;

  int vocab_size() const override { return vocab_size_; }
  int block_size() const override { return block_size_; }
  int num_kv_blocks() const override { return num_kv_blocks_; }
  int num_layers() const { return num_layers_; }
  int max_tokens_per_step() const override { return max_tokens_; }
  int max_seqs_per_step() const override { return max_seqs_; }
  int max_model_len() const override { return max_model_len_; }
  int num_threads() const override;
  size_t workspace_bytes() const override;
  size_t kv_cache_bytes() const override { return kv_bytes_; }
  std::string device_name() const override { return "cpu"; }
  bool kv_int8() const { return kv_i8(); }
  /// "reference" | "fast": the contract quantized weights run under.
  const char* cpu_kernels() const override;

  struct Step;
  struct ValueInfo;

 private:
  CpuExecutor();
  Status init(const Plan& plan, const CpuExecutorOptions& options);
  Status decode_step(const Plan& plan, const fb::Step& step, int index, Step* out);
  Status check_memory_plan();
  Status validate_batch(const BatchInput& batch, const float* logits);
  float* value_ptr(int id, float* logits) const;

  std::vector<ValueInfo> values_;
  std::vector<Step> steps_;
  int token_input_ = -1, position_input_ = -1, output_ = -1;
  int vocab_size_ = 0, embedding_rows_ = 0;
  int num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0, block_size_ = 0;
  int num_kv_blocks_ = 0, max_tokens_ = 0, max_seqs_ = 0, max_model_len_ = 0;

  std::unique_ptr<ThreadPool> pool_;
  Profiler* profiler_ = nullptr;
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<float, FreeDeleter> arena_;
  size_t arena_bytes_ = 0;
  std::unique_ptr<float, KvUnmapDeleter> kv_cache_;  // [layers][K|V][blocks, kv_heads, block_size, head_dim]
  size_t kv_bytes_ = 0;
  size_t kv_layer_bytes_ = 0;          // one layer: K and V (int8: codes, then per-row scales)
  size_t kv_elem_bytes_ = 4;           // kv_elem_bytes(kv_dtype_)
  fb::DType kv_dtype_ = fb::DType::F32;  // F32, BF16, F16, F8E4M3 or I8
  bool kv_i8() const { return kv_dtype_ == fb::DType::I8; }
  std::vector<float> attn_scratch_;    // [threads][attn_stride()]
  // Per thread: the scores of cpu::kAttentionUnitRows rows (fewer past spans of 8192).
  int64_t attn_stride() const;
  std::vector<int32_t> seq_of_row_;    // [max_tokens]
  uint8_t contract_ = 0;               // cpu::CpuContract
  std::unique_ptr<cpu::QuantScratch> quant_scratch_;  // sized at init; null without quantized weights
};

}  // namespace llmrt
