// Executes a plan's `forward` program on a CUDA device with the plan's generated kernels: the
// same batch contract and results as CpuExecutor (runtime/engine/cpu_executor.h), every step one
// launch of its kernel (Step.kernel), in program order on one stream.
//
// create() checks everything before the first request: the program (decoded and validated by
// the CPU executor's checks at capacity 1, so both backends accept exactly the same plans), that
// every step has a kernel, which image each kernel loads on this device (module_select.h), and
// the device memory plan under memory_utilization (launch_plan.h). It then allocates once
// (weights, activation arena, batch buffers, logits, KV cache), uploads the weights and loads the
// modules. forward() uploads the batch (block tables repacked to a fixed stride), launches every
// step with its grid rule and copies the requested logits back; forward_summary() instead runs
// the plan's logits_summary kernel and copies back only each row's summary
// (runtime/sampler/logits_summary.h), whole rows on demand (read_logits). Kernels that declare a
// workspace (paged attention's split-context parts) share one device buffer, zero-filled once.
//
// Decode steps (one new token per sequence, logits for each) replay a CUDA graph instead: the
// batch is padded to the next size of graph_batch_sizes() (launch_plan.h) with rows that write no
// KV (slot -1) and whose logits are not copied back (rows are independent in every kernel), and
// the graph of that size, captured on first use, launches the whole forward at once. Every kernel
// reads the batch from device buffers at fixed addresses, so a captured graph stays valid.
//
// Linear steps the plan gives to a GEMM library (Step.gemm_library, gemm_library.h) call
// cuBLASLt for steps of library_min_rows rows or more (after the step's to_bf16 kernel wrote the
// input in bf16, once for consecutive library steps reading the same value, and, for quantized
// weights, its dequant_bf16 kernel wrote the weight in bf16); when the library does not load, or
// gemm_library is off, they run the plan's generated kernels, with a warning. Its workspace, the
// bf16 input copy and the bf16 weight buffer are part of the memory plan.
//
// All device calls go through cuda::Driver, so tests run this executor over a driver that
// emulates the device on the host (tests/unit/cuda_executor_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gemm_library.h"
#include "runtime/cuda/launch_plan.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/plan/plan_file.h"

namespace llmrt::cuda {

struct CudaExecutorOptions {
  int device = 0;                    // ordinal
  double memory_utilization = 0.9;   // share of the device's memory this executor may use
  int max_tokens_per_step = 0;       // 0: the plan's cap
  int max_seqs_per_step = 0;         // 0: the plan's cap
  int num_kv_blocks = 0;             // 0: what memory_utilization leaves after the rest
  int max_grid = 65535 * 32;         // cap on gridDim.x (the kernels walk items grid-stride)
  bool cuda_graphs = true;           // replay decode steps as CUDA graphs (when the driver has them)
  bool tiled_attention = true;       // steps of batched_min_rows rows or more run the plan's tiled
                                     // paged attention (false: the per-row kernel, to compare)
  bool tensor_core_linear = true;    // linear / logits steps of batched_min_rows rows or more run
                                     // the plan's tensor-core kernel or GEMM library (false: the
                                     // CUDA-core GEMV at every row count, to compare)
  bool gemm_library = true;          // steps the plan gives to a GEMM library (cuBLASLt) call it
                                     // when it loads (false: their generated kernels, to compare)
  bool programmatic_launch = true;   // a step's kernel whose image waits on griddepcontrol (plan
                                     // KernelImage.grid_dependency_control) and follows another
                                     // of the plan's kernels is launched overlapped with it
                                     // (programmatic dependent launch: compute capability 9.0+,
                                     // a CUDA 12.3+ driver); false: one after the other, to compare
  bool fused_quantize = true;        // a step the plan marks quantized_output writes the int8 rows
                                     // of its output for the int8-activation GEMV after it (no
                                     // quantize_q8 launch); false: that GEMV quantizes, to compare
  bool rope_in_attention = true;     // steps in which every sequence has one row (decode) launch a
                                     // paged_attention step's rope_kernel (plan Step.rope_kernel)
                                     // in place of the rope_kv_store before it and its own kernel;
                                     // false: both, to compare
  bool silu_in_gemv = true;          // a linear step whose plan kernel does the silu_mul after it
                                     // too (plan Step.silu_kernel: the quantized gate|up GEMV),
                                     // run by its GEMV (not the tensor cores or the library),
                                     // launches that kernel in place of both; false: both
  bool device_sampling = true;       // draws at a temperature (no penalties, bias or processors)
                                     // run the plan's sampling kernel (plan Program.sampling_kernel);
                                     // false: their rows are copied back and drawn on the host
  bool norm_in_gemv = true;          // a linear step whose plan kernel does the add_rms_norm
                                     // after it too (plan Step.norm_kernel), run by its GEMV at
                                     // one row (batch-1 decode), launches that kernel in place of
                                     // both; false: both
  /// Loads the GEMM library over the driver (tests: an emulation); empty: load_cublaslt.
  std::function<StatusOr<std::unique_ptr<GemmLibrary>>(Driver*)> load_gemm_library;
};

class CudaExecutor : public Executor {
 public:
  /// Errors: anything CpuExecutor::create refuses; failed_precondition when a step has no GPU
  /// kernel (quantized weights in a CPU layout: recompile) or no image runs on the
  /// device; resource_exhausted (memory plan, allocation); driver errors naming the call.
  static StatusOr<std::unique_ptr<CudaExecutor>> create(const Plan& plan, Driver* driver,
                                                        const CudaExecutorOptions& options);
  /// The same, owning the driver.
  static StatusOr<std::unique_ptr<CudaExecutor>> create(const Plan& plan, std::unique_ptr<Driver> driver,
                                                        const CudaExecutorOptions& options);
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  /// As CpuExecutor::forward: logits [L, vocab] for the batch's logits_indices.
  Status forward(const BatchInput& batch, float* logits) override;
  /// The step with each logits row reduced on the device by the plan's logits_summary kernel
  /// (only the summaries come back; read_logits copies whole rows on demand); plans without
  /// that kernel: Executor's host summary of the whole rows.
  Status forward_summary(const BatchInput& batch, LogitsSummary* summaries) override;
  Status read_logits(int first, int count, float* out) override;
  /// Whether logits rows are summarized on the device.
  bool summarizes_on_device() const { return summary_.kernel >= 0; }
  /// The plan's sampling kernel over the last forward_summary()'s rows (summarized on the
  /// device), unless options.device_sampling is off.
  bool samples_on_device() const override { return sampling_.kernel >= 0 && summarized_rows_ > 0; }
  Status sample_on_device(std::span<const DeviceDraw> draws, int32_t* tokens, float* logits) override;
  /// Copies KV block src to dst in every layer.
  Status copy_kv_block(int32_t src, int32_t dst) override;

  int vocab_size() const override { return vocab_size_; }
  int block_size() const override { return block_size_; }
  int num_kv_blocks() const override { return num_kv_blocks_; }
  int num_layers() const { return num_layers_; }
  int max_tokens_per_step() const override { return max_tokens_; }
  int max_seqs_per_step() const override { return max_seqs_; }
  int max_model_len() const override { return max_model_len_; }
  size_t workspace_bytes() const override { return memory_.activations + memory_.batch + memory_.library; }
  size_t kv_cache_bytes() const override { return memory_.kv; }
  std::string device_name() const override;
  int num_threads() const override { return 0; }
  const char* cpu_kernels() const override { return "cuda"; }
  const DeviceInfo& device() const { return device_; }
  const DeviceMemoryPlan& memory() const { return memory_; }
  /// Module-selection notes (PTX JIT, compatible CUBIN), one per target used.
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// Kernels per decode forward() of `rows` sequences: one per step, two for a GEMV step over
  /// int8 activations (its input's quantize_q8 kernel; fewer when consecutive steps read one
  /// input; a GEMM library
  /// step of a bigger forward may add its to_bf16 conversion and the library's own kernels;
  /// one fewer per attention step that does its rope_kv_store's work, rope_in_attention_steps(),
  /// per linear step that does its silu_mul's, silu_in_gemv_steps(), and per linear step that
  /// does its add_rms_norm's at one row, norm_in_gemv_steps()).
  int launches_per_step(int rows = 1) const;
  /// Attention steps whose decode launches do the rope_kv_store before them too (plan
  /// Step.rope_kernel, CudaExecutorOptions::rope_in_attention): a forward with a sequence of
  /// several rows launches this many kernels more than launches_per_step().
  int rope_in_attention_steps() const;
  /// Linear steps whose decode launch does the silu_mul after them too (plan Step.silu_kernel,
  /// CudaExecutorOptions::silu_in_gemv): one launch fewer each.
  int silu_in_gemv_steps() const;
  /// Linear steps whose one-row launch does the add_rms_norm after them too (plan
  /// Step.norm_kernel, CudaExecutorOptions::norm_in_gemv): one launch fewer each.
  int norm_in_gemv_steps() const;
  /// The GEMM library the steps call ("" when none loaded or none is asked for), and how many
  /// steps call it.
  const std::string& gemm_library_name() const { return library_name_; }
  int gemm_library_steps() const;
  /// Decode graphs captured so far (one per padded batch size used), and whether they are used.
  int graphs_captured() const {
    return static_cast<int>(graphs_.size() - std::count(graphs_.begin(), graphs_.end(), nullptr));
  }
  bool graphs_enabled() const { return graphs_enabled_; }
  /// Whether steps' kernels are launched overlapped with the kernel before them (options above),
  /// and how many of the kernels the steps launch can be.
  bool programmatic_launch() const { return programmatic_launch_; }
  int overlapped_kernels() const;
  /// Times every step on the device with CUDA events into `profiler` (nullptr detaches), plus a
  /// "LogitsSummary" step for the summary kernel: while one is attached, decode steps launch
  /// kernel by kernel instead of replaying their graph (a graph's kernels cannot be timed one by
  /// one), so the table shows each kernel's device time without the launch gaps graphs remove.
  /// A driver without events makes forward() fail with failed_precondition saying so.
  void set_profiler(Profiler* profiler) override;

  struct Step;

 private:
  CudaExecutor() = default;
  Status init(const Plan& plan, const CudaExecutorOptions& options);
  Status decode(const Plan& plan);
  DevicePtr value_ptr(int id) const;
  /// Device address of step `st`'s weight i (0 when it has none there).
  DevicePtr weight_ptr(const Step& st, size_t i) const;
  /// Launches every step for T rows, S sequences and L logits rows (the buffers hold the batch);
  /// with `timed`, records events_[i + 1] after step i.
  /// `one_row`: every sequence has exactly one row (decode: a step's rope_kernel may run).
  Status launch_steps(int T, int S, int L, bool one_row, bool timed = false);
  /// The profiled forward's device times into profiler_ (events_ recorded).
  Status record_profile(int T, int S, int L, int64_t begin_ns);
  /// One step; its L logits rows come back whole (logits) or summarized (summaries).
  Status run(const BatchInput& b, float* logits, LogitsSummary* summaries);
  /// The decode forward through the graph of padded size B (captured on first use).
  Status replay_decode(const BatchInput& b, int B);
  /// A library step's GEMM of `rows` rows (its input converted first unless *converted names it
  /// already); Unimplemented when the library has no algorithm (the caller falls back).
  Status library_gemm(const Step& st, int rows, int* converted);
  /// Copies the step's L logits rows to `logits`, or summarizes them into `summaries`.
  Status fetch_logits(int L, float* logits, LogitsSummary* summaries);

  std::unique_ptr<Driver> owned_driver_;
  Driver* driver_ = nullptr;
  DeviceInfo device_;
  DeviceMemoryPlan memory_;
  std::vector<std::string> warnings_;
  std::vector<Step> steps_;
  struct Launch {
    int kernel = -1;              // index into Plan.kernels
    FunctionHandle fn = nullptr;  // its function, once the module is loaded
    int block[3] = {1, 1, 1};
    unsigned shared = 0;
    bool work = false;            // takes the workspace (work_) before T
    bool overlap = false;         // its image waits on griddepcontrol and programmatic launch is on
    GridRule rule;
  };
  Launch summary_;  // the logits summary kernel (kernel -1: none in the plan)
  Launch sampling_;  // the sampling kernel (kernel -1: none in the plan, or options.device_sampling off)
  static constexpr int kMaxDraws = 256;  // draws per sampling launch (more: several launches)
  std::vector<int32_t> drawn_host_;      // a launch's (token, logit bits) pairs
  int summarized_rows_ = 0;  // logits rows of the last forward_summary() on the device
  std::vector<uint64_t> value_offset_;  // per value: byte offset in the arena; UINT64_MAX = not there
  int token_input_ = -1, position_input_ = -1, output_ = -1;
  int vocab_size_ = 0, embedding_rows_ = 0;
  int num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0, block_size_ = 0;
  int num_kv_blocks_ = 0, max_tokens_ = 0, max_seqs_ = 0, max_model_len_ = 0, table_stride_ = 0;
  int max_grid_ = 1;

  // Device memory: one allocation per part, freed by the destructor.
  std::vector<DevicePtr> allocations_;
  DevicePtr weights_ = 0, arena_ = 0, kv_ = 0, logits_ = 0;
  DevicePtr tokens_ = 0, positions_ = 0, slots_ = 0, query_start_ = 0, tables_ = 0, logit_rows_ = 0;
  DevicePtr perms_ = 0, summaries_ = 0, work_ = 0, draws_ = 0, drawn_ = 0;
  bool kv_i8_ = false;  // int8 codes plus f32 scales per row
  uint64_t kv_layer_bytes_ = 0, kv_half_bytes_ = 0, kv_codes_bytes_ = 0, kv_block_bytes_per_layer_ = 0;
  std::vector<uint64_t> tensor_offset_;  // per plan tensor: offset in weights_
  std::vector<int32_t> table_staging_;   // [max_seqs, table_stride]
  // Decode graphs: sizes, and per size its graph (null until captured); padded batch staging.
  bool graphs_enabled_ = false;
  bool programmatic_launch_ = false;
  bool fused_quantize_ = true;
  bool rope_in_attention_ = true;
  bool silu_in_gemv_ = true;
  bool norm_in_gemv_ = true;
  bool device_sampling_ = true;
  uint64_t quant_input_bytes_ = 0;  // quant_input_'s size
  /// Whether linear step steps_[i] at `rows` rows launches its silu kernel (the silu_mul step
  /// after it inside), and where in quant_input_ that kernel writes the silu_mul's int8 rows
  /// (after the rows of the GEMV's own int8 input, which it reads meanwhile).
  bool does_silu(size_t i, int rows, uint64_t* q8_at = nullptr) const;
  /// Whether linear step steps_[i] at `rows` rows launches its norm kernel (the add_rms_norm step
  /// after it inside, in the GEMV's last block): one row only, where the GEMV runs.
  bool does_norm(size_t i, int rows) const;
  bool tiled_attention_ = true;
  bool tensor_core_linear_ = true;
  std::vector<int> graph_sizes_;
  std::vector<GraphHandle> graphs_;  // parallel to graph_sizes_
  std::vector<int32_t> pad_tokens_, pad_positions_, pad_rows_;
  std::vector<int64_t> pad_slots_;
  std::vector<ModuleHandle> modules_;
  // The GEMM library (null: none), its workspace and the bf16 copy of a library step's input.
  std::unique_ptr<GemmLibrary> library_;
  std::string library_name_;
  DevicePtr library_work_ = 0, library_input_ = 0;
  DevicePtr library_weight_ = 0;  // a quantized library step's weight in bf16 (0: none)
  DevicePtr quant_input_ = 0;     // a GEMV's input as int8 rows (quant_input_bytes; 0: none)
  int library_min_rows_ = INT32_MAX;  // the fewest rows at which a step calls it
  // Profiling: the attached profiler and its events (one before the first step, one after each
  // step, one after the summary kernel), created when it is attached.
  Profiler* profiler_ = nullptr;
  std::vector<EventHandle> events_;
  Status events_status_;
  // One launch's parameter slots and the pointers cuLaunchKernel takes, reused by every step.
  std::vector<uint64_t> args_;
  std::vector<void*> params_;
};

}  // namespace llmrt::cuda
