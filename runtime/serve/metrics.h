// Serving metrics in the Prometheus text format (prometheus-cpp core), one series per vLLM
// metric with the same meaning, named llmrt:* with vLLM's suffix (vllm:time_to_first_token_seconds
// → llmrt:time_to_first_token_seconds, ...), so vLLM dashboards carry over by renaming the prefix.
// Thread-safe (prometheus-cpp metrics are atomic).
#pragma once

#include <memory>
#include <string>

namespace prometheus {
class Registry;
class Histogram;
class Counter;
class Gauge;
}  // namespace prometheus

namespace llmrt {

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  ~Metrics();

  // Engine hooks.
  void first_token(double ttft_seconds);
  void inter_token(double seconds);                       // one per token after the first
  void request_finished(const std::string& finish_reason, // "stop" | "length" | "abort" | "error"
                        double e2e_seconds, double tpot_seconds, int prompt_tokens,
                        int generation_tokens, bool has_tpot);
  void prompt_tokens(int n);                              // prompt tokens computed or cached
  void generation_tokens(int n);
  void prefix_cache(int queried_tokens, int hit_tokens);
  void preempted();
  void set_queue(int running, int waiting);
  void set_kv_usage(double fraction);                     // referenced blocks / all blocks
  void set_num_kv_blocks(int num_kv_blocks);

  /// The /metrics body (text exposition format 0.0.4).
  std::string serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrt
