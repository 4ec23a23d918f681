// What the engine, the generator and the tools need from a backend: one forward step over a
// ragged batch with a paged KV cache (runtime/plan/PROGRAM.md), KV block copies, and the sizes
// the scheduler plans with. CpuExecutor (runtime/engine/cpu_executor.h) and CudaExecutor
// (runtime/cuda/cuda_executor.h) implement it; make_executor() (runtime/engine/make_executor.h)
// picks one for --device auto|cpu|cuda.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sampler/logits_summary.h"
#include "runtime/sampler/sampler.h"

namespace llmrt {

class Profiler;

/// One step's batch (see PROGRAM.md). Rows query_start[S] .. T-1 are padding (kv_slots -1).
struct BatchInput {
  std::span<const int32_t> tokens, positions;  // [T]
  std::span<const int64_t> kv_slots;           // [T], -1 = padding
  std::span<const int32_t> query_start;        // [S+1]
  std::span<const int32_t> context_lens;       // [S]
  std::span<const int32_t> block_tables;       // [S * max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  std::span<const int32_t> logits_indices;     // [L]
};

/// What a step may hold (runtime/engine/batch_check.h checks a batch against it).
struct BatchLimits {
  int64_t max_tokens = 0, max_seqs = 0, max_model_len = 0;
  int64_t block_size = 0, num_kv_blocks = 0;
  int64_t vocab_rows = 0;  // token ids must be below this (the embedding table's rows)
};

class Executor {
 public:
  virtual ~Executor() = default;
  /// Runs one step; writes logits [L, vocab] (row i for logits_indices[i]).
  virtual Status forward(const BatchInput& batch, float* logits) = 0;
  /// Runs one step and reduces each logits row to its summary (summaries[L], logits_summary.h);
  /// the rows themselves stay with the backend until the next step, for read_logits. The
  /// default runs forward() into a host buffer and summarizes there; a GPU backend summarizes
  /// on the device and copies back only the summaries.
  virtual Status forward_summary(const BatchInput& batch, LogitsSummary* summaries);
  /// Copies logits rows [first, first + count) of the last forward_summary() to out [count, vocab].
  virtual Status read_logits(int first, int count, float* out);
  /// Whether sample_on_device can draw from the last forward_summary()'s rows (a GPU plan with
  /// the sampling kernel).
  virtual bool samples_on_device() const { return false; }
  /// Draws tokens[i] for draws[i] (its row: an index into the last forward_summary()'s rows) on
  /// the device, Sampler::sample's token for that row and those settings, and logits[i] that
  /// token's logit; token -1 where the row has nothing to draw (the host sampler names why).
  /// Backends without it: unimplemented.
  virtual Status sample_on_device(std::span<const DeviceDraw> draws, int32_t* tokens, float* logits);
  /// Copies physical KV block src to dst in every layer (copy-on-write after a fork).
  virtual Status copy_kv_block(int32_t src, int32_t dst) = 0;
  /// Per-step profiling (nullptr detaches); backends without it ignore the call.
  virtual void set_profiler(Profiler* profiler) { (void)profiler; }

  virtual int vocab_size() const = 0;
  virtual int block_size() const = 0;
  virtual int num_kv_blocks() const = 0;
  virtual int max_tokens_per_step() const = 0;
  virtual int max_seqs_per_step() const = 0;
  virtual int max_model_len() const = 0;
  virtual size_t workspace_bytes() const = 0;
  virtual size_t kv_cache_bytes() const = 0;
  /// "cpu", or "cuda:0 (NVIDIA H200)".
  virtual std::string device_name() const = 0;
  /// CPU threads of the backend (0 for a GPU).
  virtual int num_threads() const = 0;
  /// The quantized kernels' numerical contract ("reference" | "fast"; "cuda" for the GPU kernels).
  virtual const char* cpu_kernels() const = 0;

 private:
  std::vector<float> host_logits_;  // the default forward_summary's rows
  int host_rows_ = 0;
};

/// The draws of contexts[i] from rows rows[i] of the last forward_summary() (whose summaries are
/// `summaries`) on the executor's device, in one launch (a block each), where it samples there
/// and the draw is one its kernel makes (Sampler::device_draw): the token and its raw logprob
/// (from the row's summary, as Sampler::sample with it gives); nullopt for the others, and where
/// the row has nothing to draw (Sampler::sample says why).
StatusOr<std::vector<std::optional<SampleResult>>> draws_on_device(Executor& executor,
                                                                   std::span<const SamplingContext> contexts,
                                                                   std::span<const int32_t> rows,
                                                                   std::span<const LogitsSummary> summaries);

}  // namespace llmrt
