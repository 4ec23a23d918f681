// The serving engine: one thread runs the scheduler loop over the executor.
//
// Every step it admits waiting requests and retires finished ones (continuous batching) under a
// token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs). Within each priority
// level of the running requests (higher first), decodes are scheduled first, then prompt chunks
// (chunked prefill), so a long prompt never stalls the decodes of its peers for more than one
// step, and a higher-priority prompt can take the blocks of lower-priority decodes. The waiting
// queue is ordered by (priority, arrival): smaller priority first, FCFS among equals, as vLLM's
// priority policy.
//
// KV blocks come from BlockManager with automatic prefix caching. When a decode needs a block and
// none is free, the newest request of the lowest priority is preempted: its blocks are freed and
// it goes back to the front of the waiting queue, to be recomputed (prompt + generated tokens as
// one prefill) later. A request that could never fit (its worst-case footprint exceeds the whole
// pool) is refused at submit() with invalid_argument.
//
// n > 1: the prompt is prefilled once; the first tokens of the n choices are drawn from the same
// logits and the sequence is forked n ways (shared blocks, copy-on-write inside the last one).
//
// Sampling randomness is keyed by (seed, choice index, step) (see sampler.h), so an answer is the
// same whatever else runs with it; without a seed the engine draws one per request.
//
// Thread safety: submit/abort/drain/stats/... may be called from any thread; events are read
// through the RequestHandle returned by submit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sampler/sampler.h"

namespace llmrt {
class Executor;
struct ExecutorOptions;
}  // namespace llmrt

namespace llmrt {

class Plan;
class Metrics;

struct EngineOptions {
  /// Builds the executor instead of make_executor (tests: one on an emulated device).
  std::function<StatusOr<std::unique_ptr<Executor>>(const ExecutorOptions&)> make_executor;
  int threads = 0;                 // CPU threads; 0: all cores
  bool pin_threads = false;        // pin each CPU thread to one core
  int max_num_batched_tokens = 0;  // token budget per step; 0: min(plan cap, 512)
  int max_num_seqs = 0;            // sequences per step; 0: min(plan cap, 64)
  int max_model_len = 0;           // 0: the plan's; may only lower it
  uint64_t kv_cache_bytes = 0;     // KV pool; 0: from memory_utilization
  double memory_utilization = 0;   // fraction of physical memory for weights + workspace + KV;
                                   // 0 (and no kv_cache_bytes): a pool for max_num_seqs sequences
                                   // of max_model_len tokens, capped at min(4 GiB, memory / 8)
  bool enable_prefix_caching = true;
  int max_queue = 0;               // waiting requests allowed (submit → resource_exhausted); 0: no limit
  std::vector<int32_t> eos_ids;    // empty: the plan's generation defaults
  std::string cpu_kernels;         // quantized kernel contract; "": the plan's
  std::string device = "cpu";      // cpu | cuda[:N] | auto (runtime/engine/make_executor.h); on a GPU
                                   // memory_utilization is the device's share (0: 0.9)
  bool cuda_graphs = true;         // --no-cuda-graphs: launch decode steps kernel by kernel
  bool tiled_attention = true;     // --no-tiled-attention: paged attention on the per-row kernel only
  bool gemm_library = true;        // --no-gemm-library: dense GEMMs on the plan's generated kernels
  bool programmatic_launch = true; // --no-programmatic-launch: kernels one after the other (cuda)
  bool tensor_core_linear = true;  // --no-tensor-core-linear: linear/logits on the CUDA-core GEMV only
  bool fused_quantize = true;      // --no-fused-quantize: int8 GEMVs quantize their input themselves
  bool rope_in_attention = true;   // --no-rope-in-attention: decode launches rope_kv_store apart
  bool silu_in_gemv = true;        // --no-silu-in-gemv: decode launches silu_mul apart
  bool device_sampling = true;     // --no-device-sampling: draws the summary cannot decide go to the host
  bool norm_in_gemv = true;        // --no-norm-in-gemv: batch-1 decode launches add_rms_norm apart
};

/// What create() settled on (for the startup log and /health).
struct EngineConfig {
  int max_model_len = 0;
  int block_size = 0;
  int num_kv_blocks = 0;
  int max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int threads = 0;
  int vocab_size = 0;
  uint64_t weight_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  int64_t max_concurrency_at_max_len = 0;  // sequences of max_model_len tokens the pool holds
  std::string device = "cpu";              // the executor's device_name()
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;         // seed: see has_seed
  bool has_seed = false;           // false: the engine draws a random seed
  int32_t max_tokens = -1;         // -1: until the context is full
  int32_t n = 1;                   // choices (1..64)
  int32_t priority = 0;            // smaller first
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // finish with "stop" (the token is included)
  int32_t logprobs = -1;           // -1: none; k >= 0: the chosen token's logprob + top k (k <= 20)
  int32_t prompt_logprobs = -1;    // -1: none; k >= 0: per prompt token (the first has none);
                                   // such a request bypasses the prefix cache
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;            // log_softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;  // k most likely (id, logprob), most likely first
};

/// New tokens of one choice since the previous event.
struct ChoiceDelta {
  int32_t index = 0;
  std::vector<TokenLogprob> tokens;  // logprob fields filled only when requested
  std::string finish_reason;         // "" running; "stop" (EOS / stop id), "length", "abort"
};

struct RequestEvent {
  std::vector<ChoiceDelta> choices;  // only choices with news
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;         // prompt tokens served by the prefix cache
  std::vector<TokenLogprob> prompt_logprobs;  // first event, when requested ([0] is token only)
  bool finished = false;             // last event of the request (every choice finished)
  uint64_t step = 0;                 // engine step that produced it (1-based; tests and traces)
  Status error;                      // not ok → finished; the request failed in the engine
};

/// The consumer side of a request. Events arrive in order; the last has finished = true.
class RequestHandle {
 public:
  uint64_t id() const { return id_; }
  /// Waits up to `timeout` for the next event (nullopt on timeout).
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  /// Asks the engine to stop the request and free its blocks (a final event with
  /// finish_reason "abort" follows unless it had finished).
  void cancel();

  // Engine side.
  RequestHandle(uint64_t id, class Engine* engine) : id_(id), engine_(engine) {}
  void push(RequestEvent event);

 private:
  uint64_t id_;
  class Engine* engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
};

struct EngineStats {
  int num_running = 0;     // requests holding blocks (prefilling or decoding)
  int num_waiting = 0;     // queued (new or preempted)
  int num_kv_blocks = 0;
  int num_used_blocks = 0; // referenced by some sequence (cached-but-free blocks not counted)
  int num_cached_blocks = 0;  // unreferenced blocks kept for the prefix cache
  uint64_t num_preemptions = 0;
  uint64_t num_steps = 0;
};

class Engine {
 public:
  /// Builds the executor and starts the engine thread. `plan` and `metrics` (optional) must
  /// outlive the engine.
  static StatusOr<std::unique_ptr<Engine>> create(const Plan& plan, const EngineOptions& options,
                                                  Metrics* metrics = nullptr);
  ~Engine();  // shutdown()

  /// Queues a request. Errors, before any work: invalid_argument (empty prompt, ids outside the
  /// vocabulary, bad sampling parameters, n or logprobs out of range, a request that could never
  /// fit the KV pool), out_of_range (prompt of max_model_len tokens or more), resource_exhausted
  /// (the waiting queue is full), unavailable (draining or shut down).
  StatusOr<std::shared_ptr<RequestHandle>> submit(EngineRequest request);
  /// Stops a request (unknown or finished ids are ignored).
  void abort(uint64_t id);
  /// Stops admitting: later submit() calls fail with unavailable; running and queued requests
  /// continue.
  void drain();
  bool draining() const;
  /// Waits until no request runs or waits; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  /// Aborts every request and joins the engine thread.
  void shutdown();

  const EngineConfig& config() const { return config_; }
  EngineStats stats() const;

 private:
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  EngineConfig config_;
};

}  // namespace llmrt
