#include "runtime/serve/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>

namespace llmrt {

namespace pm = prometheus;

struct Metrics::Impl {
  std::string model;
  pm::Registry registry;
  pm::Histogram* ttft = nullptr;
  pm::Histogram* itl = nullptr;
  pm::Histogram* tpot = nullptr;
  pm::Histogram* e2e = nullptr;
  pm::Histogram* prompt_len = nullptr;
  pm::Histogram* gen_len = nullptr;
  pm::Gauge* running = nullptr;
  pm::Gauge* waiting = nullptr;
  pm::Gauge* kv_usage = nullptr;
  pm::Gauge* kv_blocks = nullptr;
  pm::Counter* prefix_queries = nullptr;
  pm::Counter* prefix_hits = nullptr;
  pm::Counter* preemptions = nullptr;
  pm::Counter* prompt_tokens = nullptr;
  pm::Counter* generation_tokens = nullptr;
  pm::Family<pm::Counter>* success = nullptr;
  std::mutex success_mu;
  std::map<std::string, pm::Counter*> success_by_reason;

  pm::Labels labels() const { return {{"model_name", model}}; }
  pm::Histogram* histogram(const std::string& name, const std::string& help,
                           const pm::Histogram::BucketBoundaries& buckets) {
    return &pm::BuildHistogram().Name(name).Help(help).Register(registry).Add(labels(), buckets);
  }
  pm::Counter* counter(const std::string& name, const std::string& help) {
    return &pm::BuildCounter().Name(name).Help(help).Register(registry).Add(labels());
  }
  pm::Gauge* gauge(const std::string& name, const std::string& help) {
    return &pm::BuildGauge().Name(name).Help(help).Register(registry).Add(labels());
  }
};

Metrics::Metrics(std::string model_name) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = std::move(model_name);
  // Bucket bounds as vLLM's (vllm/engine/metrics.py), so histograms line up.
  const pm::Histogram::BucketBoundaries latency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                   0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  const pm::Histogram::BucketBoundaries per_token = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                     0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                     7.5,  10.0,  20.0, 40.0,  80.0};
  const pm::Histogram::BucketBoundaries request = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                                   5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  const pm::Histogram::BucketBoundaries tokens = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000,
                                                  5000, 10000, 20000, 50000, 100000};
  m.ttft = m.histogram("llmrt:time_to_first_token_seconds", "Time to first token in seconds.", latency);
  m.itl = m.histogram("llmrt:inter_token_latency_seconds", "Time between consecutive output tokens in seconds.",
                      per_token);
  m.tpot = m.histogram("llmrt:request_time_per_output_token_seconds",
                       "Per request: (end-to-end - time to first token) / (output tokens - 1), in seconds.",
                       per_token);
  m.e2e = m.histogram("llmrt:e2e_request_latency_seconds", "End-to-end request latency in seconds.", request);
  m.prompt_len = m.histogram("llmrt:request_prompt_tokens", "Prompt tokens per finished request.", tokens);
  m.gen_len = m.histogram("llmrt:request_generation_tokens", "Generated tokens per finished request.", tokens);
  m.running = m.gauge("llmrt:num_requests_running", "Requests holding KV blocks (prefill or decode).");
  m.waiting = m.gauge("llmrt:num_requests_waiting", "Requests waiting to be scheduled (new or preempted).");
  m.kv_usage = m.gauge("llmrt:kv_cache_usage_perc",
                       "Fraction of KV blocks referenced by requests (1 = full); cached free blocks do not count.");
  m.kv_blocks = m.gauge("llmrt:num_kv_blocks", "KV cache blocks in the pool.");
  m.prefix_queries = m.counter("llmrt:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  m.prefix_hits = m.counter("llmrt:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  m.preemptions = m.counter("llmrt:num_preemptions_total", "Requests preempted (to be recomputed) for lack of KV blocks.");
  m.prompt_tokens = m.counter("llmrt:prompt_tokens_total", "Prompt tokens processed (computed or cached).");
  m.generation_tokens = m.counter("llmrt:generation_tokens_total", "Tokens generated.");
  m.success = &pm::BuildCounter()
                   .Name("llmrt:request_success_total")
                   .Help("Finished requests by finish reason.")
                   .Register(m.registry);
  for (const char* reason : {"stop", "length", "abort"}) {
    pm::Labels l = m.labels();
    l["finished_reason"] = reason;
    m.success_by_reason[reason] = &m.success->Add(l);
  }
}

Metrics::~Metrics() = default;

void Metrics::first_token(double s) { impl_->ttft->Observe(s); }
void Metrics::inter_token(double s) { impl_->itl->Observe(s); }

void Metrics::request_finished(const std::string& reason, double e2e, double tpot, int prompt_tokens,
                               int generation_tokens, bool has_tpot) {
  Impl& m = *impl_;
  m.e2e->Observe(e2e);
  if (has_tpot) m.tpot->Observe(tpot);
  m.prompt_len->Observe(prompt_tokens);
  m.gen_len->Observe(generation_tokens);
  pm::Counter* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(m.success_mu);
    auto it = m.success_by_reason.find(reason);
    if (it == m.success_by_reason.end()) {
      pm::Labels l = m.labels();
      l["finished_reason"] = reason;
      it = m.success_by_reason.emplace(reason, &m.success->Add(l)).first;
    }
    c = it->second;
  }
  c->Increment();
}

void Metrics::prompt_tokens(int n) { impl_->prompt_tokens->Increment(n); }
void Metrics::generation_tokens(int n) { impl_->generation_tokens->Increment(n); }
void Metrics::prefix_cache(int queried, int hits) {
  impl_->prefix_queries->Increment(queried);
  impl_->prefix_hits->Increment(hits);
}
void Metrics::preempted() { impl_->preemptions->Increment(); }
void Metrics::set_queue(int running, int waiting) {
  impl_->running->Set(running);
  impl_->waiting->Set(waiting);
}
void Metrics::set_kv_usage(double fraction) { impl_->kv_usage->Set(fraction); }
void Metrics::set_num_kv_blocks(int num_kv_blocks) { impl_->kv_blocks->Set(num_kv_blocks); }

std::string Metrics::serialize() const {
  return pm::TextSerializer().Serialize(impl_->registry.Collect());
}

}  // namespace llmrt
