#include "runtime/serve/engine.h"
#include "runtime/plan/plan_inspect.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "runtime/cpu/thread_pool.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/engine/make_executor.h"
#include "runtime/kv/block_manager.h"
#include "runtime/plan/plan_file.h"
#include "runtime/serve/metrics.h"

namespace llmrt {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// RequestHandle

std::optional<RequestEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestHandle::cancel() {
  if (engine_) engine_->abort(id_);
}

void RequestHandle::push(RequestEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Engine state (owned by the engine thread unless noted).

namespace {

struct Seq {
  int64_t id = -1;                 // BlockManager sequence id
  int32_t index = 0;               // choice index
  std::vector<int32_t> tokens;     // prompt + output
  std::vector<int32_t> output;
  std::vector<TokenLogprob> pending_out;  // produced this step, not yet sent
  int32_t num_computed = 0;        // tokens whose KV is in the cache
  bool in_cache = false;           // registered with the BlockManager
  std::string finish_reason;       // "" while running
  bool finish_sent = false;
  bool finished() const { return !finish_reason.empty(); }
  int32_t pending() const { return static_cast<int32_t>(tokens.size()) - num_computed; }
};

struct Group {
  uint64_t id = 0;
  uint64_t order = 0;              // arrival order (FCFS among equal priorities)
  EngineRequest req;
  std::shared_ptr<RequestHandle> handle;
  Clock::time_point arrival, first_token, last_token;
  bool has_first_token = false;
  bool forked = false;             // the n choices exist
  bool admitted_once = false;
  int32_t cached_tokens = 0;
  bool prompt_reported = false;
  std::vector<TokenLogprob> prompt_logprobs;  // collected while prefilling
  std::vector<Seq> seqs;
  bool running = false;
  bool done = false;
  uint64_t scheduled_step = 0;     // last step (1-based) that fed one of its sequences
};

bool before(const Group* a, const Group* b) {
  if (a->req.priority != b->req.priority) return a->req.priority < b->req.priority;
  return a->order < b->order;
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

struct Engine::Impl {
  Engine* self = nullptr;
  EngineConfig cfg;
  bool prefix_caching = true;
  int max_queue = 0;
  std::vector<int32_t> eos_ids;
  Metrics* metrics = nullptr;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<Sampler> sampler;

  // Shared with other threads (under mu).
  mutable std::mutex mu;
  std::condition_variable cv;       // wakes the engine thread
  std::condition_variable idle_cv;  // wakes wait_idle
  std::vector<std::unique_ptr<Group>> incoming;
  std::vector<uint64_t> aborts;
  bool stop = false;
  bool draining = false;
  int active = 0;                   // submitted and not finished
  int queued = 0;                   // incoming + waiting (for max_queue)
  EngineStats stats;
  uint64_t next_id = 1;
  std::thread thread;

  // Engine thread only.
  std::vector<std::unique_ptr<Group>> groups;  // all live requests
  std::vector<Group*> waiting;                 // sorted by before()
  std::vector<Group*> running;                 // sorted by before()
  int64_t next_seq_id = 1;
  uint64_t num_steps = 0, num_preemptions = 0;
  int retired_unpublished = 0;

  // Step buffers, reused.
  struct Item {
    Group* group;
    size_t seq;          // index in group->seqs
    int32_t start;       // first position fed
    int32_t count;       // tokens fed
    bool logits_last;    // sample from the last row
    bool prompt_rows;    // logits at every row (prompt logprobs)
    int32_t first_logit = 0;  // index of its first logits row
  };
  std::vector<Item> items;
  std::vector<int32_t> tokens, positions, query_start, context_lens, block_tables, logits_indices;
  std::vector<int64_t> kv_slots, slots;
  int32_t budget = 0, seq_slots = 0;
  std::vector<BlockCopy> copies;
  // The step's logits rows as summaries; a whole row is read from the executor only where a
  // summary cannot answer (Sampler::sample_from_summary), into row_buf (row_at: which).
  std::vector<LogitsSummary> summaries;
  // The step's draws the summaries cannot decide, made on the device in one launch before the
  // items are walked: (logits row, request index) -> result.
  std::map<std::pair<int32_t, int32_t>, SampleResult> drawn;
  std::vector<float> row_buf;
  int32_t row_at = -1;
  std::vector<int32_t> topk_ids;

  void loop();
  void step();
  void admit_incoming(std::vector<std::unique_ptr<Group>>& fresh);
  void apply_abort(uint64_t id);
  void preempt(Group* g);
  int32_t schedule_seq(Group* g, size_t si, int32_t want, bool allow_preempt, bool* preempted_any);
  Status feed(Group* g, size_t si, int32_t count);
  void register_seqs(Group* g);
  void fail_group(Group* g, const Status& status);
  void finish_seq(Seq& s, const std::string& reason);
  void release_seq(Seq& s);
  void emit(Group* g, bool include_prompt);
  void retire(Group* g);
  StatusOr<const float*> logits_row(int32_t li);
  Status sample_for(Group* g, size_t si, int32_t li);
  // The draw of choice `index` after sequence s's tokens so far.
  static SamplingContext context_of(const Group& g, const Seq& s, int32_t index);
  void draw_step_on_device();
  Status add_token(Group* g, size_t si, const SampleResult& r, int32_t li);
  Status fill_logprob(int32_t li, int32_t token, int k, TokenLogprob* out);
  void publish_stats();
};

Engine::Engine() : impl_(std::make_unique<Impl>()) { impl_->self = this; }

Engine::~Engine() { shutdown(); }

StatusOr<std::unique_ptr<Engine>> Engine::create(const Plan& plan, const EngineOptions& options,
                                                 Metrics* metrics) {
  const fb::MemoryPlan* mp = plan.fb().memory();
  const fb::KvSpec* kv = plan.fb().kv();
  if (!mp || !kv || kv->block_size() <= 0 || kv->num_layers() <= 0 || kv->num_kv_heads() <= 0 ||
      kv->head_dim() <= 0 || mp->max_model_len() <= 0 || mp->max_tokens_per_step() <= 0 ||
      mp->max_seqs_per_step() <= 0)
    return invalid_argument("the plan has no usable memory plan or KV spec");
  if (options.max_num_batched_tokens < 0 || options.max_num_seqs < 0 || options.max_model_len < 0 ||
      options.max_queue < 0 || options.memory_utilization < 0 || options.memory_utilization > 1 ||
      !std::isfinite(options.memory_utilization))
    return invalid_argument("engine options must not be negative (memory utilization in [0, 1])");

  std::unique_ptr<Engine> engine(new Engine());
  Impl& m = *engine->impl_;
  EngineConfig& c = m.cfg;
  c.max_model_len = mp->max_model_len();
  if (options.max_model_len) {
    if (options.max_model_len > mp->max_model_len())
      return invalid_argument("max_model_len " + std::to_string(options.max_model_len) +
                              " exceeds the model's " + std::to_string(mp->max_model_len()));
    c.max_model_len = options.max_model_len;
  }
  c.block_size = kv->block_size();
  c.max_num_batched_tokens = options.max_num_batched_tokens
                                 ? options.max_num_batched_tokens
                                 : std::min(mp->max_tokens_per_step(), 512);
  if (c.max_num_batched_tokens > mp->max_tokens_per_step())
    return invalid_argument("max_num_batched_tokens " + std::to_string(c.max_num_batched_tokens) +
                            " exceeds the plan's cap of " + std::to_string(mp->max_tokens_per_step()));
  c.max_num_seqs = options.max_num_seqs ? options.max_num_seqs : std::min(mp->max_seqs_per_step(), 64);
  if (c.max_num_seqs > mp->max_seqs_per_step())
    return invalid_argument("max_num_seqs " + std::to_string(c.max_num_seqs) + " exceeds the plan's cap of " +
                            std::to_string(mp->max_seqs_per_step()));
  c.max_num_seqs = std::min(c.max_num_seqs, c.max_num_batched_tokens);
  c.threads = options.threads > 0 ? options.threads : available_cpus();

  // KV pool: f32, bf16 or f16 elements, or int8 codes plus a scale per token and head
  // (plan_inspect.h).
  const uint64_t block_bytes = kv_bytes_per_token(plan.fb()) * kv->block_size();
  c.weight_bytes = plan.weights_size();
  CpuExecutorOptions eo;
  eo.threads = c.threads;
  eo.pin_threads = options.pin_threads;
  eo.cpu_kernels = options.cpu_kernels;
  eo.max_tokens_per_step = c.max_num_batched_tokens;
  eo.max_seqs_per_step = c.max_num_seqs;
  const int64_t blocks_per_max_seq = (c.max_model_len + c.block_size - 1) / c.block_size;
  // Workspace estimate from the plan (the executor's own figure is reported after creation).
  const uint64_t workspace_est = mp->arena_bytes_per_token() * static_cast<uint64_t>(c.max_num_batched_tokens) +
                                 mp->workspace_bytes_fixed() + mp->workspace_bytes_per_seq() * c.max_num_seqs +
                                 mp->workspace_bytes_per_thread_per_ctx() * c.threads * mp->max_model_len();
  uint64_t kv_bytes = 0;
  if (options.kv_cache_bytes) {
    kv_bytes = options.kv_cache_bytes;
  } else if (options.memory_utilization > 0 && options.device.rfind("cuda", 0) != 0) {
    // (On --device cuda the share is the GPU's: the CUDA executor sizes its pool itself.)
    const uint64_t total = static_cast<uint64_t>(options.memory_utilization * static_cast<double>(physical_memory()));
    if (total <= c.weight_bytes + workspace_est)
      return resource_exhausted("memory utilization " + std::to_string(options.memory_utilization) +
                                " leaves no room for the KV cache after " + std::to_string(c.weight_bytes) +
                                " bytes of weights and " + std::to_string(workspace_est) + " of workspace");
    kv_bytes = total - c.weight_bytes - workspace_est;
  } else {
    // Like vLLM's CPU backend (a fixed KV space, 4 GiB by default): enough for max_num_seqs
    // sequences of max_model_len tokens, at most 4 GiB or 1/8 of physical memory, at least one
    // sequence. The pages are committed as they fill.
    kv_bytes = std::min<uint64_t>({block_bytes * blocks_per_max_seq * c.max_num_seqs, 4ull << 30,
                                   physical_memory() / 8});
    kv_bytes = std::max<uint64_t>(kv_bytes, block_bytes * blocks_per_max_seq);
  }
  const int64_t num_blocks = static_cast<int64_t>(kv_bytes / block_bytes);
  if (num_blocks < blocks_per_max_seq)
    return resource_exhausted("the KV cache (" + std::to_string(kv_bytes) + " bytes, " + std::to_string(num_blocks) +
                              " blocks of " + std::to_string(block_bytes) + " bytes) cannot hold one sequence of " +
                              std::to_string(c.max_model_len) + " tokens (" + std::to_string(blocks_per_max_seq) +
                              " blocks): give more KV memory or a lower max_model_len");
  if (num_blocks > std::numeric_limits<int32_t>::max() / 2)
    return invalid_argument("KV cache of " + std::to_string(num_blocks) + " blocks is too large");
  eo.num_kv_blocks = static_cast<int>(num_blocks);
  ExecutorOptions xo;
  xo.device = options.device;
  xo.cpu = eo;
  xo.cuda.max_tokens_per_step = eo.max_tokens_per_step;
  xo.cuda.max_seqs_per_step = eo.max_seqs_per_step;
  xo.cuda.cuda_graphs = options.cuda_graphs;
  xo.cuda.tiled_attention = options.tiled_attention;
  xo.cuda.gemm_library = options.gemm_library;
  xo.cuda.programmatic_launch = options.programmatic_launch;
  xo.cuda.tensor_core_linear = options.tensor_core_linear;
  xo.cuda.fused_quantize = options.fused_quantize;
  xo.cuda.rope_in_attention = options.rope_in_attention;
  xo.cuda.silu_in_gemv = options.silu_in_gemv;
  xo.cuda.norm_in_gemv = options.norm_in_gemv;
  xo.cuda.device_sampling = options.device_sampling;
  xo.cuda.memory_utilization = options.memory_utilization > 0 ? options.memory_utilization : 0.9;
  // On a GPU the KV pool is what the device's budget leaves, unless a size was given.
  xo.cuda.num_kv_blocks = options.kv_cache_bytes ? static_cast<int>(num_blocks) : 0;
  std::string note;
  if (options.make_executor) {
    ASSIGN_OR_RETURN(m.executor, options.make_executor(xo));
  } else {
    ASSIGN_OR_RETURN(m.executor, make_executor(plan, xo, &note));
  }
  if (!note.empty()) std::fprintf(stderr, "llmrt: %s\n", note.c_str());
  c.device = m.executor->device_name();
  c.num_kv_blocks = m.executor->num_kv_blocks();
  c.vocab_size = m.executor->vocab_size();
  c.workspace_bytes = m.executor->workspace_bytes();
  c.kv_cache_bytes = m.executor->kv_cache_bytes();
  c.max_concurrency_at_max_len = c.num_kv_blocks / blocks_per_max_seq;
  engine->config_ = c;

  m.prefix_caching = options.enable_prefix_caching;
  m.max_queue = options.max_queue;
  m.metrics = metrics;
  m.eos_ids = options.eos_ids;
  if (m.eos_ids.empty() && plan.fb().generation() && plan.fb().generation()->eos_ids())
    for (int32_t id : *plan.fb().generation()->eos_ids()) m.eos_ids.push_back(id);
  m.blocks = std::make_unique<BlockManager>(c.num_kv_blocks, c.block_size, m.prefix_caching);
  m.sampler = std::make_unique<Sampler>(c.vocab_size);
  m.stats.num_kv_blocks = c.num_kv_blocks;
  if (metrics) {
    metrics->set_num_kv_blocks(c.num_kv_blocks);
    metrics->set_queue(0, 0);
    metrics->set_kv_usage(0);
  }
  m.thread = std::thread([&m] { m.loop(); });
  return engine;
}

StatusOr<std::shared_ptr<RequestHandle>> Engine::submit(EngineRequest r) {
  const EngineConfig& c = config_;
  if (r.prompt.empty()) return invalid_argument("the prompt is empty");
  if (static_cast<int64_t>(r.prompt.size()) >= c.max_model_len)
    return out_of_range("the prompt has " + std::to_string(r.prompt.size()) + " tokens but the context is " +
                        std::to_string(c.max_model_len) + " tokens (at least one must remain for the answer)");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary (" +
                              std::to_string(c.vocab_size) + ")");
  if (r.n < 1 || r.n > 64) return invalid_argument("n must be between 1 and 64");
  if (r.max_tokens < -1) return invalid_argument("max_tokens must not be negative");
  if (r.logprobs < -1 || r.logprobs > 20) return invalid_argument("logprobs must be between 0 and 20");
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20)
    return invalid_argument("prompt_logprobs must be between 0 and 20");
  for (int32_t t : r.stop_token_ids)
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument("stop token id " + std::to_string(t) + " is outside the vocabulary");
  RETURN_IF_ERROR(validate_sampling_params(r.sampling, c.vocab_size));
  // Worst case footprint: the prompt's blocks once, then each choice's own blocks.
  const int64_t len = r.max_tokens < 0 ? c.max_model_len
                                       : std::min<int64_t>(c.max_model_len, int64_t(r.prompt.size()) + r.max_tokens);
  const int64_t full = (len + c.block_size - 1) / c.block_size;
  const int64_t shared = static_cast<int64_t>(r.prompt.size()) / c.block_size;
  const int64_t need = full + (r.n - 1) * (full - shared);
  if (need > c.num_kv_blocks)
    return invalid_argument("the request needs up to " + std::to_string(need) + " KV blocks (n=" +
                            std::to_string(r.n) + ", " + std::to_string(len) + " tokens) but the cache has " +
                            std::to_string(c.num_kv_blocks));
  if (!r.has_seed) {
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    r.sampling.seed = (uint64_t{rd()} << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
  }

  Impl& m = *impl_;
  auto g = std::make_unique<Group>();
  g->req = std::move(r);
  g->arrival = Clock::now();
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stop || m.draining) return unavailable("the server is shutting down");
    if (m.max_queue > 0 && m.queued >= m.max_queue)
      return resource_exhausted("the waiting queue is full (" + std::to_string(m.max_queue) + " requests)");
    g->id = m.next_id++;
    g->order = g->id;
    g->handle = std::make_shared<RequestHandle>(g->id, this);
    handle = g->handle;
    ++m.active;
    ++m.queued;
    m.incoming.push_back(std::move(g));
  }
  m.cv.notify_all();
  return handle;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->aborts.push_back(id);
  }
  impl_->cv.notify_all();
}

void Engine::drain() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->draining = true;
}

bool Engine::draining() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->draining || impl_->stop;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->idle_cv.wait_for(lock, timeout, [&] { return impl_->active == 0; });
}

void Engine::shutdown() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stop = true;
  }
  m.cv.notify_all();
  if (m.thread.joinable()) m.thread.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

// ---------------------------------------------------------------------------------------------
// Engine thread.

void Engine::Impl::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Group>> fresh;
    std::vector<uint64_t> abort_ids;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      const bool busy = !running.empty() || !waiting.empty();
      cv.wait(lock, [&] { return stop || busy || !incoming.empty() || !aborts.empty(); });
      stopping = stop;
      fresh.swap(incoming);
      abort_ids.swap(aborts);
    }
    admit_incoming(fresh);
    for (uint64_t id : abort_ids) apply_abort(id);
    if (stopping) {
      std::vector<Group*> live;
      for (auto& g : groups) live.push_back(g.get());
      for (Group* g : live) fail_group(g, unavailable("the engine is shutting down"));
      publish_stats();
      return;
    }
    if (!running.empty() || !waiting.empty()) step();
    publish_stats();
  }
}

void Engine::Impl::admit_incoming(std::vector<std::unique_ptr<Group>>& fresh) {
  for (auto& owned : fresh) {
    Group* g = owned.get();
    Seq s;
    s.index = 0;
    s.tokens = g->req.prompt;
    g->seqs.push_back(std::move(s));
    groups.push_back(std::move(owned));
    waiting.insert(std::upper_bound(waiting.begin(), waiting.end(), g, before), g);
  }
}

void Engine::Impl::apply_abort(uint64_t id) {
  for (auto& owned : groups) {
    Group* g = owned.get();
    if (g->id != id || g->done) continue;
    for (Seq& s : g->seqs)
      if (!s.finished()) finish_seq(s, "abort");
    emit(g, false);
    retire(g);
    return;
  }
}

void Engine::Impl::release_seq(Seq& s) {
  if (s.in_cache) {
    (void)blocks->free_sequence(s.id);
    s.in_cache = false;
  }
  s.num_computed = 0;
}

void Engine::Impl::preempt(Group* g) {
  for (Seq& s : g->seqs) release_seq(s);
  g->running = false;
  running.erase(std::find(running.begin(), running.end(), g));
  waiting.insert(std::upper_bound(waiting.begin(), waiting.end(), g, before), g);
  ++num_preemptions;
  if (metrics) metrics->preempted();
}

void Engine::Impl::finish_seq(Seq& s, const std::string& reason) {
  s.finish_reason = reason;
  release_seq(s);
}

void Engine::Impl::fail_group(Group* g, const Status& status) {
  for (Seq& s : g->seqs)
    if (!s.finished()) finish_seq(s, "abort");
  RequestEvent e;
  e.prompt_tokens = static_cast<int32_t>(g->req.prompt.size());
  e.cached_tokens = g->cached_tokens;
  e.finished = true;
  e.step = num_steps;
  e.error = status;
  g->handle->push(std::move(e));
  g->done = true;
  retire(g);
}

// Sends the tokens produced since the last event; the final event when every choice finished.
void Engine::Impl::emit(Group* g, bool include_prompt) {
  if (g->done) return;
  RequestEvent e;
  e.prompt_tokens = static_cast<int32_t>(g->req.prompt.size());
  e.cached_tokens = g->cached_tokens;
  // Prompt logprobs go out once the whole prompt has been through (with the first token).
  if (include_prompt && !g->prompt_reported && g->req.prompt_logprobs >= 0 && g->forked) {
    e.prompt_logprobs = std::move(g->prompt_logprobs);
    g->prompt_reported = true;
  }
  bool all_done = !g->seqs.empty();
  for (Seq& s : g->seqs) {
    all_done = all_done && s.finished();
    const bool report_finish = s.finished() && !s.finish_sent;
    if (s.pending_out.empty() && !report_finish) continue;
    ChoiceDelta d;
    d.index = s.index;
    d.tokens = std::move(s.pending_out);
    s.pending_out.clear();
    if (report_finish) {
      d.finish_reason = s.finish_reason;
      s.finish_sent = true;
    }
    e.choices.push_back(std::move(d));
  }
  // Before the fork a request has one sequence standing for all n choices.
  if (all_done && !g->forked && g->req.n > 1) {
    for (int32_t i = 1; i < g->req.n; ++i) {
      ChoiceDelta d;
      d.index = i;
      d.finish_reason = g->seqs[0].finish_reason;
      e.choices.push_back(std::move(d));
    }
  }
  if (e.choices.empty() && e.prompt_logprobs.empty() && !all_done) return;
  e.step = num_steps;
  e.finished = all_done;
  if (all_done) g->done = true;
  g->handle->push(std::move(e));
}

void Engine::Impl::retire(Group* g) {
  const auto now = Clock::now();
  if (metrics) {
    int gen = 0, longest = 0;
    for (const Seq& s : g->seqs) {
      gen += static_cast<int>(s.output.size());
      longest = std::max(longest, static_cast<int>(s.output.size()));
    }
    // The request's reason: abort wins, then length, then stop (as the last choice saw it).
    bool aborted = false, length = false;
    for (const Seq& s : g->seqs) {
      aborted = aborted || s.finish_reason == "abort";
      length = length || s.finish_reason == "length";
    }
    const std::string reason = aborted ? "abort" : length ? "length" : "stop";
    const double e2e = std::chrono::duration<double>(now - g->arrival).count();
    const double tpot = longest > 1 ? std::chrono::duration<double>(g->last_token - g->first_token).count() / (longest - 1) : 0;
    metrics->request_finished(reason, e2e, tpot, static_cast<int>(g->req.prompt.size()), gen, longest > 1);
  }
  for (Seq& s : g->seqs) release_seq(s);
  if (g->running) running.erase(std::find(running.begin(), running.end(), g));
  else if (auto it = std::find(waiting.begin(), waiting.end(), g); it != waiting.end()) waiting.erase(it);
  ++retired_unpublished;  // `active` drops when the stats that show it are published
  if (!g->admitted_once) {
    std::lock_guard<std::mutex> lock(mu);
    --queued;
  }
  for (auto it = groups.begin(); it != groups.end(); ++it)
    if (it->get() == g) {
      groups.erase(it);
      break;
    }
}

// Largest count <= want whose blocks are free now (0 if none).
int32_t Engine::Impl::schedule_seq(Group* g, size_t si, int32_t want, bool allow_preempt, bool* preempted_any) {
  want = std::min(want, budget);
  if (want <= 0 || seq_slots <= 0) return 0;
  for (;;) {
    const Seq& s = g->seqs[si];
    int32_t lo = 0, hi = want;  // binary search: blocks_needed is monotone in count
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo + 1) / 2;
      auto need = blocks->blocks_needed(s.id, mid);
      if (need.ok() && *need <= blocks->num_free_blocks()) lo = mid;
      else hi = mid - 1;
    }
    if (lo > 0) return lo;
    if (!allow_preempt) return 0;
    // Preempt the lowest-priority, newest running request not fed in this step.
    Group* victim = nullptr;
    for (auto it = running.rbegin(); it != running.rend(); ++it)
      if (*it != g && (*it)->scheduled_step != num_steps) {
        victim = *it;
        break;
      }
    // Never a request that ranks before g; a waiting request being admitted only takes blocks
    // from strictly lower priorities.
    if (!victim || !before(g, victim) || (!g->running && victim->req.priority <= g->req.priority)) return 0;
    preempt(victim);
    *preempted_any = true;
  }
}

// Appends `count` of the sequence's pending tokens to the batch.
Status Engine::Impl::feed(Group* g, size_t si, int32_t count) {
  Seq& s = g->seqs[si];
  slots.clear();
  copies.clear();
  RETURN_IF_ERROR(blocks->append_tokens(
      s.id, std::span<const int32_t>(s.tokens.data() + s.num_computed, static_cast<size_t>(count)), &slots, &copies));
  for (const BlockCopy& c : copies) RETURN_IF_ERROR(executor->copy_kv_block(c.src, c.dst));
  Item item;
  item.group = g;
  item.seq = si;
  item.start = s.num_computed;
  item.count = count;
  item.logits_last = s.num_computed + count == static_cast<int32_t>(s.tokens.size());
  item.prompt_rows = g->req.prompt_logprobs >= 0 && !g->prompt_reported && !g->forked;
  item.first_logit = static_cast<int32_t>(logits_indices.size());
  for (int32_t k = 0; k < count; ++k) {
    const int32_t row = static_cast<int32_t>(tokens.size());
    tokens.push_back(s.tokens[s.num_computed + k]);
    positions.push_back(s.num_computed + k);
    kv_slots.push_back(slots[k]);
    if (item.prompt_rows || (item.logits_last && k == count - 1)) logits_indices.push_back(row);
  }
  context_lens.push_back(s.num_computed + count);
  query_start.push_back(static_cast<int32_t>(tokens.size()));
  items.push_back(item);
  budget -= count;
  --seq_slots;
  g->scheduled_step = num_steps;
  return ok_status();
}

// Gives every unfinished sequence of a waiting request its BlockManager sequence (reusing cached
// prefix blocks).
void Engine::Impl::register_seqs(Group* g) {
  const bool first = !g->admitted_once;
  const bool lookup = prefix_caching && !(g->req.prompt_logprobs >= 0 && !g->prompt_reported);
  for (Seq& s : g->seqs) {
    if (s.finished()) continue;
    s.id = next_seq_id++;
    int32_t cached = 0;
    if (lookup) {
      auto c = blocks->add_sequence_with_prefix(s.id, s.tokens);
      cached = c.ok() ? *c : 0;
    } else {
      (void)blocks->add_sequence(s.id);
    }
    s.in_cache = true;
    s.num_computed = cached;
    if (first && s.index == 0) {
      g->cached_tokens = cached;
      if (metrics && prefix_caching) metrics->prefix_cache(static_cast<int>(s.tokens.size()), cached);
    }
  }
}

void Engine::Impl::step() {
  ++num_steps;
  items.clear();
  tokens.clear();
  positions.clear();
  kv_slots.clear();
  query_start.assign(1, 0);
  context_lens.clear();
  logits_indices.clear();
  budget = cfg.max_num_batched_tokens;
  seq_slots = cfg.max_num_seqs;
  bool preempted_any = false;
  std::vector<Group*> failed;

  // 1. Decodes, then 2. prompt chunks of running requests, one priority level at a time (running
  // is sorted by priority): a lower level's decodes come after a higher level's prompt chunks, so
  // the higher request can still take a lower one's blocks (a victim must not be in this step yet).
  // Across levels in one pass, a higher request whose chunk found no block would step back itself
  // while the lower one it should have preempted kept decoding, again every step.
  for (size_t level = 0; level < running.size();) {
    const int32_t priority = running[level]->req.priority;
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t gi = level; gi < running.size() && running[gi]->req.priority == priority; ++gi) {
        Group* g = running[gi];
        for (size_t si = 0; si < g->seqs.size() && g->running; ++si) {
          const Seq& s = g->seqs[si];
          if (s.finished() || !s.in_cache) continue;
          const int32_t pending = s.pending();
          if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
          const int32_t count = schedule_seq(g, si, pending, /*allow_preempt=*/true, &preempted_any);
          if (count == 0) {
            // No block for it even after preempting the others: step back itself unless part of it
            // already runs in this step (then it waits a step).
            if (budget > 0 && seq_slots > 0 && g->scheduled_step != num_steps) {
              preempt(g);
              preempted_any = true;
              --gi;
            }
            break;
          }
          if (Status st = feed(g, si, count); !st.ok()) {
            failed.push_back(g);
            break;
          }
        }
      }
    }
    while (level < running.size() && running[level]->req.priority == priority) ++level;
  }
  // 3. Admit waiting requests (not in a step that had to preempt).
  while (!preempted_any && !waiting.empty() && budget > 0 && seq_slots > 0) {
    Group* g = waiting.front();
    int unfinished = 0;
    for (const Seq& s : g->seqs) unfinished += !s.finished();
    // All its sequences in this step, or (n above the cap) a step of its own.
    if (std::min(unfinished, cfg.max_num_seqs) > seq_slots) break;
    register_seqs(g);
    size_t first = 0;
    while (g->seqs[first].finished()) ++first;
    // Admission may preempt running requests of lower priority only (priority scheduling).
    const int32_t count = schedule_seq(g, first, g->seqs[first].pending(), true, &preempted_any);
    if (count == 0) {
      for (Seq& s : g->seqs) release_seq(s);
      break;
    }
    waiting.erase(waiting.begin());
    running.insert(std::upper_bound(running.begin(), running.end(), g, before), g);
    g->running = true;
    if (!g->admitted_once) {
      g->admitted_once = true;
      if (metrics) metrics->prompt_tokens(static_cast<int>(g->req.prompt.size()));
      std::lock_guard<std::mutex> lock(mu);
      --queued;
    }
    if (Status st = feed(g, first, count); !st.ok()) {
      failed.push_back(g);
      continue;
    }
    for (size_t si = first + 1; si < g->seqs.size(); ++si) {
      if (g->seqs[si].finished()) continue;
      const int32_t c = schedule_seq(g, si, g->seqs[si].pending(), false, &preempted_any);
      if (c == 0) break;
      if (Status st = feed(g, si, c); !st.ok()) {
        failed.push_back(g);
        break;
      }
    }
  }
  for (Group* g : failed)
    if (!g->done) fail_group(g, internal_error("KV cache bookkeeping failed"));
  if (items.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing fits this step
    return;
  }

  // Block tables.
  int max_blocks = 1;
  for (const Item& it : items) {
    auto table = blocks->block_table(it.group->seqs[it.seq].id);
    if (table.ok()) max_blocks = std::max<int>(max_blocks, static_cast<int>(table->size()));
  }
  block_tables.assign(items.size() * static_cast<size_t>(max_blocks), 0);
  for (size_t j = 0; j < items.size(); ++j) {
    auto table = blocks->block_table(items[j].group->seqs[items[j].seq].id);
    if (table.ok()) std::copy(table->begin(), table->end(), block_tables.begin() + j * max_blocks);
  }
  summaries.resize(logits_indices.size());
  row_at = -1;
  BatchInput batch;
  batch.tokens = tokens;
  batch.positions = positions;
  batch.kv_slots = kv_slots;
  batch.query_start = query_start;
  batch.context_lens = context_lens;
  batch.block_tables = block_tables;
  batch.max_blocks_per_seq = max_blocks;
  batch.logits_indices = logits_indices;
  if (Status st = executor->forward_summary(batch, summaries.data()); !st.ok()) {
    for (const Item& it : items)
      if (!it.group->done) fail_group(it.group, st.with_context("forward"));
    return;
  }

  draw_step_on_device();
  std::vector<Group*> touched;
  for (const Item& it : items) {
    Group* g = it.group;
    if (g->done) continue;
    if (std::find(touched.begin(), touched.end(), g) == touched.end()) touched.push_back(g);
    Seq& s = g->seqs[it.seq];
    s.num_computed += it.count;
    (void)blocks->mark_computed(s.id, s.num_computed);
    if (it.prompt_rows) {
      const int32_t plen = static_cast<int32_t>(g->req.prompt.size());
      if (it.start == 0) {
        g->prompt_logprobs.clear();
        TokenLogprob first;
        first.token = g->req.prompt[0];
        first.logprob = std::numeric_limits<float>::quiet_NaN();
        g->prompt_logprobs.push_back(first);
      }
      for (int32_t k = 0; k < it.count; ++k) {
        const int32_t p = it.start + k;
        if (p + 1 >= plen) break;
        TokenLogprob tl;
        if (Status st = fill_logprob(it.first_logit + k, g->req.prompt[p + 1], g->req.prompt_logprobs, &tl);
            !st.ok()) {
          fail_group(g, st);
          break;
        }
        g->prompt_logprobs.push_back(std::move(tl));
      }
      if (g->done) continue;
    }
    if (!it.logits_last) continue;
    const int32_t li = it.first_logit + (it.prompt_rows ? it.count - 1 : 0);
    if (Status st = sample_for(g, it.seq, li); !st.ok()) fail_group(g, st);
  }
  const auto now = Clock::now();
  for (Group* g : touched) {
    if (g->done) continue;
    bool produced = false;
    for (const Seq& s : g->seqs) produced = produced || !s.pending_out.empty();
    if (produced) {
      if (!g->has_first_token) {
        g->has_first_token = true;
        g->first_token = now;
        if (metrics) metrics->first_token(std::chrono::duration<double>(now - g->arrival).count());
      } else if (metrics) {
        metrics->inter_token(std::chrono::duration<double>(now - g->last_token).count());
      }
      g->last_token = now;
    }
    emit(g, /*include_prompt=*/true);
    if (g->done) retire(g);
  }
}

StatusOr<const float*> Engine::Impl::logits_row(int32_t li) {
  if (row_at != li) {
    row_buf.resize(static_cast<size_t>(cfg.vocab_size));
    row_at = -1;
    RETURN_IF_ERROR(executor->read_logits(li, 1, row_buf.data()));
    row_at = li;
  }
  return row_buf.data();
}

Status Engine::Impl::fill_logprob(int32_t li, int32_t token, int k, TokenLogprob* out) {
  out->token = token;
  out->top.clear();
  // From the summary when it holds the token and the k largest entries: the same numbers as
  // from the whole row (lse = max + log_sum in double either way).
  const LogitsSummary& s = summaries[static_cast<size_t>(li)];
  const int at = s.find(token);
  if (at >= 0 && k <= s.count) {
    const double lse = s.max + s.log_sum;
    out->logprob = static_cast<float>(s.logits[at] - lse);
    for (int i = 0; i < k; ++i) out->top.emplace_back(s.ids[i], static_cast<float>(s.logits[i] - lse));
    return ok_status();
  }
  ASSIGN_OR_RETURN(const float* row, logits_row(li));
  const int vocab = cfg.vocab_size;
  const double lse = s.max + s.log_sum;
  out->logprob = static_cast<float>(row[token] - lse);
  if (k <= 0) return ok_status();
  topk_ids.resize(vocab);
  for (int i = 0; i < vocab; ++i) topk_ids[i] = i;
  k = std::min(k, vocab);
  std::partial_sort(topk_ids.begin(), topk_ids.begin() + k, topk_ids.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  for (int i = 0; i < k; ++i)
    out->top.emplace_back(topk_ids[i], static_cast<float>(row[topk_ids[i]] - lse));
  return ok_status();
}

Status Engine::Impl::add_token(Group* g, size_t si, const SampleResult& r, int32_t li) {
  Seq& s = g->seqs[si];
  s.tokens.push_back(r.token);
  s.output.push_back(r.token);
  TokenLogprob tl;
  if (g->req.logprobs >= 0) RETURN_IF_ERROR(fill_logprob(li, r.token, g->req.logprobs, &tl));
  tl.token = r.token;
  tl.logprob = r.logprob;
  s.pending_out.push_back(std::move(tl));
  if (metrics) metrics->generation_tokens(1);
  const EngineRequest& q = g->req;
  const bool eos = !q.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), r.token) != eos_ids.end();
  const bool stop_id = std::find(q.stop_token_ids.begin(), q.stop_token_ids.end(), r.token) != q.stop_token_ids.end();
  if (eos || stop_id)
    finish_seq(s, "stop");
  else if ((q.max_tokens >= 0 && static_cast<int32_t>(s.output.size()) >= q.max_tokens) ||
           static_cast<int64_t>(s.tokens.size()) >= cfg.max_model_len)
    finish_seq(s, "length");
  return ok_status();
}

SamplingContext Engine::Impl::context_of(const Group& g, const Seq& s, int32_t index) {
  SamplingContext ctx;
  ctx.params = &g.req.sampling;
  ctx.request_id = static_cast<uint64_t>(index);
  ctx.step = s.output.size();
  ctx.prompt_tokens = g.req.prompt;
  ctx.output_tokens = s.output;
  return ctx;
}

void Engine::Impl::draw_step_on_device() {
  drawn.clear();
  if (!executor->samples_on_device()) return;
  // The draws sample_for() will make, with the same contexts: a group's first n from its row, or
  // each sequence's own (the summaries' decisions are taken there again, the same).
  std::vector<SamplingContext> contexts;
  std::vector<int32_t> rows, indexes;
  for (const Item& it : items) {
    const Group* g = it.group;
    if (g->done || !it.logits_last || g->req.max_tokens == 0) continue;
    const Seq& s = g->seqs[it.seq];
    const int32_t li = it.first_logit + (it.prompt_rows ? it.count - 1 : 0);
    for (int32_t j = g->forked ? s.index : 0; j < (g->forked ? s.index + 1 : g->req.n); ++j) {
      const SamplingContext ctx = context_of(*g, s, j);
      StatusOr<std::optional<SampleResult>> quick = sampler->sample_from_summary(ctx, summaries[static_cast<size_t>(li)]);
      if (!quick.ok() || quick->has_value()) continue;
      contexts.push_back(ctx);
      rows.push_back(li);
      indexes.push_back(j);
    }
  }
  if (contexts.empty()) return;
  StatusOr<std::vector<std::optional<SampleResult>>> r = draws_on_device(*executor, contexts, rows, summaries);
  if (!r.ok()) return;  // (a failed launch: those draws go to the host, whose row read reports it)
  for (size_t k = 0; k < contexts.size(); ++k)
    if ((*r)[k]) drawn.emplace(std::make_pair(rows[k], indexes[k]), *(*r)[k]);
}

Status Engine::Impl::sample_for(Group* g, size_t si, int32_t li) {
  const EngineRequest& q = g->req;
  auto draw = [&](const Seq& s, int32_t index) -> StatusOr<SampleResult> {
    const SamplingContext ctx = context_of(*g, s, index);
    const LogitsSummary& summary = summaries[static_cast<size_t>(li)];
    ASSIGN_OR_RETURN(std::optional<SampleResult> quick, sampler->sample_from_summary(ctx, summary));
    if (quick) return *quick;
    if (auto at = drawn.find({li, index}); at != drawn.end()) return at->second;  // the device's
    ASSIGN_OR_RETURN(const float* row, logits_row(li));
    return sampler->sample(ctx, std::span<const float>(row, static_cast<size_t>(cfg.vocab_size)), {},
                           &summaries[static_cast<size_t>(li)]);
  };
  if (!g->forked) {
    g->forked = true;
    if (q.max_tokens == 0) {  // prompt only (e.g. echo with prompt logprobs)
      finish_seq(g->seqs[si], "length");
      for (int32_t j = 1; j < q.n; ++j) {
        Seq c;
        c.index = j;
        c.finish_reason = "length";
        g->seqs.push_back(std::move(c));
      }
      return ok_status();
    }
    std::vector<SampleResult> first(static_cast<size_t>(q.n));
    for (int32_t j = 0; j < q.n; ++j) {
      ASSIGN_OR_RETURN(SampleResult r, draw(g->seqs[si], j));
      first[j] = r;
    }
    for (int32_t j = 1; j < q.n; ++j) {
      Seq c;
      c.index = j;
      c.id = next_seq_id++;
      c.tokens = g->seqs[si].tokens;
      c.num_computed = g->seqs[si].num_computed;
      RETURN_IF_ERROR(blocks->fork(g->seqs[si].id, c.id));
      c.in_cache = true;
      g->seqs.push_back(std::move(c));
    }
    for (int32_t j = 0; j < q.n; ++j)
      RETURN_IF_ERROR(add_token(g, j == 0 ? si : g->seqs.size() - q.n + j, first[j], li));
    return ok_status();
  }
  ASSIGN_OR_RETURN(SampleResult r, draw(g->seqs[si], g->seqs[si].index));
  return add_token(g, si, r, li);
}

void Engine::Impl::publish_stats() {
  EngineStats st;
  st.num_running = static_cast<int>(running.size());
  st.num_kv_blocks = blocks->num_blocks();
  st.num_used_blocks = blocks->num_used_blocks();
  st.num_cached_blocks = blocks->num_cached_free_blocks();
  st.num_preemptions = num_preemptions;
  st.num_steps = num_steps;
  std::lock_guard<std::mutex> lock(mu);
  st.num_waiting = static_cast<int>(waiting.size() + incoming.size());
  stats = st;
  // Metrics first: whoever wait_idle() wakes sees them up to date.
  if (metrics) {
    metrics->set_queue(st.num_running, st.num_waiting);
    metrics->set_kv_usage(st.num_kv_blocks ? static_cast<double>(st.num_used_blocks) / st.num_kv_blocks : 0.0);
  }
  active -= retired_unpublished;
  retired_unpublished = 0;
  idle_cv.notify_all();
}

}  // namespace llmrt
