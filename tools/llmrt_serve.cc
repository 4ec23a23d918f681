// `llmrt serve PLAN|MODEL`: the OpenAI-compatible server (runtime/serve/openai_server.h) over the
// serving engine. SIGTERM / SIGINT drain: new requests get 503, running ones finish (up to
// --shutdown-timeout seconds), then the process exits 0; a second SIGINT stops waiting.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <pthread.h>
#include <string>
#include <thread>

#include "runtime/plan/plan_file.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/engine/make_executor.h"
#include "runtime/serve/engine.h"
#include "runtime/serve/metrics.h"
#include "runtime/serve/openai_server.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/llmrt_commands.h"

#if __has_include("runtime/serve/model_cache.h")
#include "runtime/serve/model_cache.h"
#define LLMRT_HAS_MODEL_CACHE 1
#endif

namespace llmrt_tools {
namespace {

struct ServeFlags {
  std::string path;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  int threads = 0;
  bool pin_threads = false;
  std::string cpu_kernels;
  std::string device = "cpu";
  bool no_cuda_graphs = false;
  bool no_tiled_attention = false;
  bool no_gemm_library = false;
  bool no_programmatic_launch = false;
  bool no_tensor_core_linear = false;
  bool no_fused_quantize = false;
  bool no_rope_in_attention = false;
  bool no_silu_in_gemv = false;
  bool no_norm_in_gemv = false;
  bool no_device_sampling = false;
  int max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int max_model_len = 0;
  std::string kv_cache_memory;
  double memory_utilization = 0;
  int max_queue = 0;
  bool no_prefix_caching = false;
  std::string max_body_bytes = "16MiB";
  double shutdown_timeout = 30;
  int max_connections = 256;
  bool verify_weights = false;
};


std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// The name clients send as "model": the file or folder name given, without its extension (as
// vLLM uses the path it was given); the plan's model name is free text with spaces.
std::string default_model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "model/" → "model"
  std::string name = p.filename().string();
  for (const char* suffix : {".plan.fb", ".fb", ".gguf"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      name.resize(name.size() - s.size());
      break;
    }
  }
  return name.empty() ? "model" : name;
}

int run_serve(const ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) return fail(llmrt::invalid_argument("--port must be in 0..65535"));
  if (f.memory_utilization < 0 || f.memory_utilization > 1)
    return fail(llmrt::invalid_argument("--memory-utilization must be in (0, 1]"));
  if (f.shutdown_timeout < 0) return fail(llmrt::invalid_argument("--shutdown-timeout must be >= 0"));
  std::optional<uint64_t> body_limit = llmrt::parse_bytes(f.max_body_bytes);
  if (!body_limit || *body_limit == 0)
    return fail(llmrt::invalid_argument("--max-body-bytes: cannot parse '" + f.max_body_bytes + "'"));
  uint64_t kv_bytes = 0;
  if (!f.kv_cache_memory.empty()) {
    auto b = llmrt::parse_bytes(f.kv_cache_memory);
    if (!b || *b == 0) return fail(llmrt::invalid_argument("--kv-cache-memory: cannot parse '" + f.kv_cache_memory + "'"));
    kv_bytes = *b;
  }

  std::string plan_path = f.path;
#ifdef LLMRT_HAS_MODEL_CACHE
  auto resolved = llmrt::resolve_plan_path(f.path, llmrt::ModelCacheOptions{});
  if (!resolved.ok()) return fail(resolved.status());
  plan_path = *resolved;
#endif
  auto plan_or = llmrt::Plan::open(plan_path);
  if (!plan_or.ok()) return fail(plan_or.status());
  const llmrt::Plan& plan = **plan_or;
  if (f.verify_weights)
    if (auto s = plan.verify_weights_hash(); !s.ok()) return fail(s);
  if (!plan.fb().tokenizer())
    return fail(llmrt::failed_precondition("the plan has no tokenizer; the server needs one (compile the model with its tokenizer)"));
  auto tok = llmrt::Tokenizer::from_plan(*plan.fb().tokenizer());
  if (!tok.ok()) return fail(tok.status());
  const std::string model_name = f.served_model_name.empty() ? default_model_name(f.path) : f.served_model_name;

  // Signals are taken by a dedicated thread (sigwait): block them before any thread starts so
  // every thread (engine, HTTP workers) inherits the mask. A write to a closed socket must fail
  // with EPIPE, not kill the process.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  llmrt::Metrics metrics(model_name);
  llmrt::OpenAIServerOptions so;
  so.host = f.host;
  so.port = f.port;
  so.api_key = f.api_key;
  if (so.api_key.empty())
    if (const char* env = std::getenv("LLMRT_API_KEY")) so.api_key = env;
  so.model_name = model_name;
  so.max_body_bytes = static_cast<size_t>(*body_limit);
  so.max_connections = f.max_connections;
  const llmrt::fb::MemoryPlan* mp = plan.fb().memory();
  so.max_model_len = f.max_model_len > 0 ? f.max_model_len : (mp ? mp->max_model_len() : 0);
  // The server listens first and answers 503 ("starting") until the engine is attached.
  auto server_or = llmrt::OpenAIServer::create(plan, **tok, nullptr, &metrics, so);
  if (!server_or.ok()) return fail(server_or.status());
  std::unique_ptr<llmrt::OpenAIServer> server = std::move(server_or.value());
  if (auto s = server->bind(); !s.ok()) return fail(s);

  std::atomic<bool> done{false};
  std::thread shutdown_thread;
  std::thread signal_thread([&] {
    int received = 0;
    while (!done) {
      timespec wait{0, 200 * 1000 * 1000};
      int sig = sigtimedwait(&sigs, nullptr, &wait);
      if (sig < 0) continue;
      if (++received == 1) {
        std::fprintf(stderr, "llmrt: %s: draining (up to %.0f s for running requests)\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT", f.shutdown_timeout);
        shutdown_thread = std::thread([&] {
          server->shutdown(std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000)));
        });
      } else {
        std::fprintf(stderr, "llmrt: second signal: stopping now\n");
        server->hurry();
      }
    }
  });

  std::fprintf(stderr, "llmrt: listening on http://%s:%d\n", server->host().c_str(), server->port());
  std::fflush(stderr);
  llmrt::Status served = llmrt::ok_status();
  std::thread serve_thread([&] { served = server->serve(); });
  auto finish = [&] {
    serve_thread.join();
    done = true;
    signal_thread.join();
    if (shutdown_thread.joinable()) shutdown_thread.join();
    server.reset();
  };

  llmrt::EngineOptions eo;
  eo.threads = f.threads;
  eo.pin_threads = f.pin_threads;
  eo.cpu_kernels = f.cpu_kernels;
  eo.device = f.device;
  eo.cuda_graphs = !f.no_cuda_graphs;
  eo.tiled_attention = !f.no_tiled_attention;
  eo.gemm_library = !f.no_gemm_library;
  eo.programmatic_launch = !f.no_programmatic_launch;
  eo.tensor_core_linear = !f.no_tensor_core_linear;
  eo.fused_quantize = !f.no_fused_quantize;
  eo.rope_in_attention = !f.no_rope_in_attention;
  eo.silu_in_gemv = !f.no_silu_in_gemv;
  eo.norm_in_gemv = !f.no_norm_in_gemv;
  eo.device_sampling = !f.no_device_sampling;
  eo.max_num_batched_tokens = f.max_num_batched_tokens;
  eo.max_num_seqs = f.max_num_seqs;
  eo.max_model_len = f.max_model_len;
  eo.kv_cache_bytes = kv_bytes;
  eo.memory_utilization = f.memory_utilization;
  eo.enable_prefix_caching = !f.no_prefix_caching;
  eo.max_queue = f.max_queue;
  auto engine_or = llmrt::Engine::create(plan, eo, &metrics);
  if (!engine_or.ok()) {
    server->stop();
    finish();
    return fail(engine_or.status());
  }
  std::unique_ptr<llmrt::Engine> engine = std::move(engine_or.value());
  const llmrt::EngineConfig& c = engine->config();
  std::fprintf(stderr,
               "llmrt: model %s on %s: weights %s, workspace %s, KV cache %s %s (%d blocks of %d tokens)\n"
               "llmrt: max_model_len %d, max concurrency at max_model_len %lld, "
               "%d threads, %d tokens and %d sequences per step, prefix caching %s\n",
               model_name.c_str(), c.device.c_str(), mib(c.weight_bytes).c_str(), mib(c.workspace_bytes).c_str(),
               mib(c.kv_cache_bytes).c_str(), llmrt::fb::EnumNameDType(plan.fb().kv()->dtype()), c.num_kv_blocks,
               c.block_size, c.max_model_len,
               static_cast<long long>(c.max_concurrency_at_max_len), c.threads, c.max_num_batched_tokens,
               c.max_num_seqs, f.no_prefix_caching ? "off" : "on");
  server->attach_engine(*engine);
  std::fprintf(stderr, "llmrt: ready\n");
  std::fflush(stderr);
  finish();
  engine->shutdown();
  if (!served.ok()) return fail(served);
  std::fprintf(stderr, "llmrt: stopped\n");
  return 0;
}

}  // namespace

Subcommand add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  Subcommand s;
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, ...)");
  s.app = cmd;
  ServeFlags& f = *flags;
  cmd->add_option("path", f.path, "plan file, Hugging Face model folder or .gguf (compiled once into the cache)")->required();
  cmd->add_option("--host", f.host, "address to bind")->capture_default_str();
  cmd->add_option("--port", f.port, "port (0: a free one)")->capture_default_str();
  cmd->add_option("--api-key", f.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: $LLMRT_API_KEY)");
  cmd->add_option("--served-model-name", f.served_model_name, "model id clients send (default: the file or folder name without extension)");
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--pin-threads", f.pin_threads, "pin each CPU thread to one core");
  cmd->add_option("--device", f.device, "cpu (default), cuda[:N] or auto (cuda when it can run the plan)")
      ->check([](const std::string& d) {
        auto s = llmrt::check_device_name(d);
        return s.ok() ? std::string() : std::string(s.message());
      });
  cmd->add_flag("--no-cuda-graphs", f.no_cuda_graphs, "on cuda: launch decode steps kernel by kernel (no graph replay)");
  cmd->add_flag("--no-fused-quantize", f.no_fused_quantize, "on cuda: an int8-activation GEMV quantizes its input in its own quantize_q8 kernel even where the step before it can write those rows (plan Step.quantized_output), to compare");
  cmd->add_flag("--no-rope-in-attention", f.no_rope_in_attention, "on cuda: decode steps launch each layer's rope_kv_store kernel and then its attention kernel, where the plan has the attention kernel doing both (plan Step.rope_kernel), to compare");
  cmd->add_flag("--no-silu-in-gemv", f.no_silu_in_gemv, "on cuda: decode steps launch the gate|up GEMV and then the silu_mul kernel, where the plan has the GEMV doing both (plan Step.silu_kernel), to compare");
  cmd->add_flag("--no-device-sampling", f.no_device_sampling, "on cuda: draws at a temperature copy their logits row back and sample on the host, where the plan has a sampling kernel (plan Program.sampling_kernel), to compare");
  cmd->add_flag("--no-norm-in-gemv", f.no_norm_in_gemv, "on cuda: batch-1 decode steps launch a GEMV and then the add_rms_norm kernel, where the plan has the GEMV's last block doing the add_rms_norm (plan Step.norm_kernel), to compare");
  cmd->add_flag("--no-tensor-core-linear", f.no_tensor_core_linear, "on cuda: linear and logits steps run their CUDA-core GEMV at every row count (no tensor-core kernel or GEMM library)");
  cmd->add_flag("--no-programmatic-launch", f.no_programmatic_launch, "on cuda (compute capability 9.0+): launch each kernel after the previous one ends, not overlapped with it (programmatic dependent launch), to compare");
  cmd->add_flag("--no-gemm-library", f.no_gemm_library, "on cuda: linear steps the plan gives to cuBLASLt (dense, or quantized and dequantized to bf16) run its generated kernels instead");
  cmd->add_flag("--no-tiled-attention", f.no_tiled_attention, "on cuda: paged attention on the per-row kernel in every step (not the plan's tiled prefill kernel)");
  cmd->add_option("--cpu-kernels", f.cpu_kernels,
                  "contract of quantized kernels: reference | fast (default: the plan's)")
      ->check(CLI::IsMember({"reference", "fast"}));
  cmd->add_option("--max-num-batched-tokens", f.max_num_batched_tokens, "token budget per step")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "sequences per step")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-model-len", f.max_model_len, "context length cap (tokens)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-memory", f.kv_cache_memory, "KV cache size, e.g. 2GiB");
  cmd->add_option("--memory-utilization", f.memory_utilization, "fraction of memory for weights + workspace + KV");
  cmd->add_option("--max-queue", f.max_queue, "waiting requests allowed before 429 (0: no limit)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-enable-prefix-caching", f.no_prefix_caching, "disable automatic prefix caching");
  cmd->add_option("--max-body-bytes", f.max_body_bytes, "largest request body (larger: 413)")->capture_default_str();
  cmd->add_option("--shutdown-timeout", f.shutdown_timeout, "seconds running requests may take to finish on SIGTERM")->capture_default_str();
  cmd->add_option("--max-connections", f.max_connections, "HTTP worker threads (concurrent requests)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_flag("--verify-weights", f.verify_weights, "check the weight section's hash before serving");
  // As with vLLM's argparse flags, a repeated option takes its last value (scripts append overrides).
  for (CLI::Option* o : cmd->get_options())
    if (o->get_name() != "--help" && o->get_name() != "path") o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  s.run = [flags] { return run_serve(*flags); };
  return s;
}

}  // namespace llmrt_tools
