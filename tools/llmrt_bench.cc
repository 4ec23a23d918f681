// `llmrt bench PLAN`: offline speed of the CPU executor, in the manner of llama-bench.
//   ppN      prompt processing: one sequence of N prompt tokens, prefilled in chunks of the step
//            budget, then one token sampled; tokens/s = N / time.
//   tgN      token generation at batch 1: a one-token prompt, then N decode steps (N forward
//            passes of one row); tokens/s = N / time.
//   tgN-bB   batched decode: B sequences decoding together (N forward passes of B rows);
//            tokens/s = B * N / time (aggregate).
//   with --depth D (tgN@dD, tgN-bB@dD): the decode tests start from prompts of D tokens (the
//            context long decode runs at, as llama-bench's -d); only decoding is timed: from the
//            moment every sequence has its first token to the last, tokens/s = B * (N - 1) / time.
// Prompts are random token ids from a fixed seed (no tokenizer needed); sampling is greedy (or
// --temperature / --top-p / --top-k / --min-p, seeded by --seed: what a decode step's draws cost
// where the logits summary cannot decide them) with end-of-sequence ignored. Each test has one
// untimed warm-up run (same shape, decode capped at 16 tokens), then R timed repetitions of Generator::generate() (forward passes + sampling); figures
// are mean ± sample standard deviation. Peak RSS is the process's (getrusage ru_maxrss).
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_features.h"
#include "runtime/engine/make_executor.h"
#include "runtime/engine/profiler.h"
#include "runtime/generate/generator.h"
#include "runtime/plan/plan_file.h"
#include "tools/llmrt_commands.h"

namespace llmrt_tools {
namespace {

using llmrt::Status;
using llmrt::StatusOr;

// Numbers are taken as text and checked in run_bench(), so a bad value is a clean
// "llmrt: error: --pp: ..." (exit 1) like every other input error.
struct BenchFlags {
  std::string plan;
  std::string threads = "0";
  std::string repetitions = "3";
  std::string pp = "512";
  std::string tg = "128";
  std::string batch = "8,32";
  bool json = false;
  std::string json_out;
  std::string baseline;
  bool profile = false;
  std::string trace;
  std::string seed = "1234";
  std::string depth = "0";
  std::string temperature = "0", top_p = "1", top_k = "0", min_p = "0";
  std::string cpu_kernels;  // "" = the plan's
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
  std::string isa;          // "" = the best this CPU has
  bool pin_threads = false;
};

// The parsed numbers.
struct BenchConfig {
  int threads = 0, repetitions = 3, tg = 128, depth = 0;
  std::vector<int> pps;  // prompt lengths of the pp tests (llama-bench's -p 512,2048)
  std::vector<int> batches;
  uint64_t seed = 1234;
  llmrt::SamplingParams sampling;  // temperature 0: greedy
};

struct TestSpec {
  std::string name;  // "pp512", "tg128", "tg128-b8"
  std::string kind;  // "pp" | "tg" | "batch"
  int tokens = 0;    // prompt tokens (pp) or generated tokens per sequence (tg, batch)
  int batch = 1;
  int depth = 0;     // tg, batch: prompt tokens before decoding (0: a one-token prompt)
};

struct TestResult {
  TestSpec spec;
  std::vector<double> tokens_per_s, seconds;
  double mean = 0, stddev = 0;
  std::optional<double> change_pct;
};


StatusOr<int64_t> parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  char* stop = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &stop, 10);
  if (text.empty() || *stop != '\0' || errno != 0 || v < lo || v > hi)
    return llmrt::invalid_argument(flag + ": '" + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "]");
  return static_cast<int64_t>(v);
}

// A comma-separated list of positive integers ("8,32"); "", "0" and "none" are the empty list.
StatusOr<std::vector<int>> parse_list(const std::string& flag, const std::string& text, const char* example) {
  std::vector<int> out;
  if (text.empty() || text == "0" || text == "none") return out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find(',', i);
    std::string item = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    char* stop = nullptr;
    errno = 0;
    long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno != 0 || v < 1 || v > 1 << 20)
      return llmrt::invalid_argument(flag + ": '" + item + "' is not a positive integer (e.g. " + flag + " " + example + ")");
    out.push_back(static_cast<int>(v));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return out;
}

// Figures of a previous `llmrt bench --json` run: tokens/s per test name, and peak RSS.
struct Baseline {
  std::vector<std::pair<std::string, double>> tests;
  std::optional<double> peak_rss;
  std::optional<double> find(const std::string& name) const {
    for (const auto& [n, v] : tests)
      if (n == name) return v;
    return std::nullopt;
  }
};

StatusOr<Baseline> load_baseline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return llmrt::not_found("--baseline: cannot open '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return llmrt::invalid_argument("--baseline: '" + path + "' is not valid JSON");
  if (!j.is_object() || !j.contains("tests") || !j["tests"].is_array())
    return llmrt::invalid_argument("--baseline: '" + path +
                                   "' is not an `llmrt bench --json` result (no \"tests\" array)");
  Baseline b;
  for (const auto& t : j["tests"]) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("tokens_per_s") ||
        !t["tokens_per_s"].is_number())
      return llmrt::invalid_argument("--baseline: '" + path +
                                     "': every test needs a \"name\" string and a \"tokens_per_s\" number");
    b.tests.emplace_back(t["name"].get<std::string>(), t["tokens_per_s"].get<double>());
  }
  if (j.contains("peak_rss_bytes") && j["peak_rss_bytes"].is_number())
    b.peak_rss = j["peak_rss_bytes"].get<double>();
  return b;
}

std::optional<double> change(double now, std::optional<double> before) {
  if (!before || !(*before > 0)) return std::nullopt;
  return (now - *before) / *before * 100.0;
}

std::string pct(std::optional<double> v) {
  if (!v) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", *v);
  return buf;
}

uint64_t peak_rss_bytes() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux: KiB
}

class Bench {
 public:
  explicit Bench(const BenchConfig& c) : c_(c), rng_(c.seed) {}

  // Requests of one test; decode length capped at `max_decode` (warm-up).
  std::vector<llmrt::GenerationRequest> requests(const TestSpec& t, int vocab, int max_decode = 1 << 30) {
    std::uniform_int_distribution<int32_t> id(0, vocab - 1);
    std::vector<llmrt::GenerationRequest> reqs(t.batch);
    for (auto& r : reqs) {
      r.prompt.resize(t.kind == "pp" ? t.tokens : std::max(1, t.depth));
      for (int32_t& tok : r.prompt) tok = id(rng_);
      r.max_tokens = t.kind == "pp" ? 1 : std::min(t.tokens, max_decode);
      r.ignore_eos = true;
      r.sampling = c_.sampling;
    }
    return reqs;
  }

  StatusOr<TestResult> run_test(llmrt::Generator& gen, const TestSpec& t, llmrt::Profiler* profiler) {
    TestResult res;
    res.spec = t;
    const int vocab = gen.vocab_size();
    gen.executor().set_profiler(nullptr);
    auto warm = gen.generate(requests(t, vocab, 16));
    if (!warm.ok()) return warm.status().with_context(t.name + " warm-up");
    if (profiler) {
      gen.executor().set_profiler(profiler);  // resets the table; the trace keeps earlier tests
      profiler->set_phase(t.name);
    }
    for (int r = 0; r < c_.repetitions; ++r) {
      auto reqs = requests(t, vocab);
      // At a depth, the clock starts when every sequence has its first token (prefill done).
      std::vector<char> started(reqs.size(), 0);
      size_t num_started = 0;
      auto t0 = std::chrono::steady_clock::now();
      auto on_token = [&](size_t seq, int32_t) {
        if (t.depth == 0 || started[seq]) return;
        started[seq] = 1;
        if (++num_started == started.size()) t0 = std::chrono::steady_clock::now();
      };
      auto out = gen.generate(reqs, on_token);
      const auto t1 = std::chrono::steady_clock::now();
      if (!out.ok()) return out.status().with_context(t.name);
      int64_t produced = 0;
      for (const auto& o : *out) produced += static_cast<int64_t>(o.tokens.size());
      const int64_t expected = t.kind == "pp" ? t.batch : int64_t{t.tokens} * t.batch;
      if (produced != expected)
        return llmrt::internal_error(t.name + ": generated " + std::to_string(produced) + " tokens, expected " +
                                     std::to_string(expected));
      const double s = std::chrono::duration<double>(t1 - t0).count();
      const double tokens = double(t.depth > 0 ? t.tokens - 1 : t.tokens) * t.batch;
      res.seconds.push_back(s);
      res.tokens_per_s.push_back(s > 0 ? tokens / s : 0.0);
    }
    gen.executor().set_profiler(nullptr);
    double sum = 0;
    for (double v : res.tokens_per_s) sum += v;
    res.mean = sum / res.tokens_per_s.size();
    double sq = 0;
    for (double v : res.tokens_per_s) sq += (v - res.mean) * (v - res.mean);
    res.stddev = res.tokens_per_s.size() > 1 ? std::sqrt(sq / (res.tokens_per_s.size() - 1)) : 0.0;
    return res;
  }

 private:
  const BenchConfig& c_;
  std::mt19937_64 rng_;
};

// "greedy", or the sampling settings that differ from the defaults.
std::string sampling_name(const llmrt::SamplingParams& p) {
  if (p.temperature == 0.0f) return "greedy";
  char buf[160];
  std::snprintf(buf, sizeof buf, "temperature %g", p.temperature);
  std::string s = buf;
  if (p.top_p < 1.0f) std::snprintf(buf, sizeof buf, ", top_p %g", p.top_p), s += buf;
  if (p.top_k > 0) s += ", top_k " + std::to_string(p.top_k);
  if (p.min_p > 0.0f) std::snprintf(buf, sizeof buf, ", min_p %g", p.min_p), s += buf;
  return s;
}

StatusOr<float> parse_float(const std::string& flag, const std::string& text) {
  char* stop = nullptr;
  errno = 0;
  const float v = std::strtof(text.c_str(), &stop);
  if (text.empty() || *stop != '\0' || errno != 0)
    return llmrt::invalid_argument(flag + ": '" + text + "' is not a number");
  return v;
}

StatusOr<BenchConfig> parse_flags(const BenchFlags& f) {
  BenchConfig c;
  ASSIGN_OR_RETURN(c.sampling.temperature, parse_float("--temperature", f.temperature));
  ASSIGN_OR_RETURN(c.sampling.top_p, parse_float("--top-p", f.top_p));
  ASSIGN_OR_RETURN(c.sampling.min_p, parse_float("--min-p", f.min_p));
  ASSIGN_OR_RETURN(int64_t top_k, parse_int("--top-k", f.top_k, 0, INT32_MAX));
  c.sampling.top_k = static_cast<int32_t>(top_k);
  ASSIGN_OR_RETURN(int64_t threads, parse_int("--threads", f.threads, 0, 1024));
  ASSIGN_OR_RETURN(int64_t reps, parse_int("--repetitions", f.repetitions, 1, 1000));
  ASSIGN_OR_RETURN(int64_t tg, parse_int("--tg", f.tg, 0, 1 << 24));
  ASSIGN_OR_RETURN(int64_t seed, parse_int("--seed", f.seed, 0, INT64_MAX));
  ASSIGN_OR_RETURN(int64_t depth, parse_int("--depth", f.depth, 0, 1 << 24));
  c.depth = static_cast<int>(depth);
  ASSIGN_OR_RETURN(c.batches, parse_list("--batch", f.batch, "8,32"));
  ASSIGN_OR_RETURN(c.pps, parse_list("--pp", f.pp, "512,2048"));
  c.threads = static_cast<int>(threads);
  c.repetitions = static_cast<int>(reps);
  c.tg = static_cast<int>(tg);
  c.seed = static_cast<uint64_t>(seed);
  c.sampling.seed = c.seed;
  if (Status st = llmrt::validate_sampling_params(c.sampling, INT32_MAX); !st.ok()) return st;
  if (c.pps.empty() && c.tg == 0) return llmrt::invalid_argument("nothing to measure: --pp and --tg are both 0");
  if (c.depth > 0 && c.tg > 0 && c.tg < 2)
    return llmrt::invalid_argument("--depth times decoding after the first token: --tg must be at least 2");
  return c;
}

int run_bench(const BenchFlags& f) {
  auto config_or = parse_flags(f);
  if (!config_or.ok()) return fail(config_or.status());
  const BenchConfig& c = *config_or;
  std::optional<Baseline> baseline;
  if (!f.baseline.empty()) {
    auto b = load_baseline(f.baseline);
    if (!b.ok()) return fail(b.status());
    baseline = std::move(b.value());
  }

  auto plan_or = llmrt::Plan::open(f.plan);
  if (!plan_or.ok()) return fail(plan_or.status());
  const llmrt::Plan& plan = **plan_or;
  const llmrt::fb::MemoryPlan* mp = plan.fb().memory();
  const llmrt::fb::KvSpec* kv = plan.fb().kv();
  if (!mp || !kv || kv->block_size() <= 0 || mp->max_tokens_per_step() <= 0 || mp->max_seqs_per_step() <= 0)
    return fail(llmrt::invalid_argument("plan has no memory plan or KV spec"));
  int max_len = mp->max_model_len();
  if (max_len <= 0 && plan.fb().model()) max_len = plan.fb().model()->max_position_embeddings();
  // Steps of at most 512 tokens, as `llmrt run` uses (longer prompts are chunked).
  const int budget = std::min(mp->max_tokens_per_step(), 512);

  std::vector<TestSpec> tests;
  for (int pp : c.pps) tests.push_back({"pp" + std::to_string(pp), "pp", pp, 1});
  if (c.tg > 0) {
    const std::string at = c.depth > 0 ? "@d" + std::to_string(c.depth) : "";
    tests.push_back({"tg" + std::to_string(c.tg) + at, "tg", c.tg, 1, c.depth});
    for (int b : c.batches)
      tests.push_back({"tg" + std::to_string(c.tg) + "-b" + std::to_string(b) + at, "batch", c.tg, b, c.depth});
  }
  for (int pp : c.pps)
    if (pp >= max_len)
      return fail(llmrt::out_of_range("--pp " + std::to_string(pp) + ": the plan's context is " +
                                      std::to_string(max_len) + " tokens (the prompt must leave room for one more)"));
  if (c.tg > 0 && std::max(1, c.depth) + c.tg > max_len)
    return fail(llmrt::out_of_range("--tg " + std::to_string(c.tg) + " after a prompt of " +
                                    std::to_string(std::max(1, c.depth)) + ": the plan's context is " +
                                    std::to_string(max_len) + " tokens"));
  for (int b : c.batches)
    if (b > mp->max_seqs_per_step() || b > budget)
      return fail(llmrt::out_of_range("--batch " + std::to_string(b) + ": a step holds at most " +
                                      std::to_string(std::min(mp->max_seqs_per_step(), budget)) +
                                      " sequences with this plan"));

  // One KV cache large enough for the largest test.
  Bench bench(c);
  int64_t blocks = 0;
  for (const TestSpec& t : tests) {
    std::vector<llmrt::GenerationRequest> reqs(t.batch);
    for (auto& r : reqs) {
      r.prompt.assign(t.kind == "pp" ? t.tokens : std::max(1, t.depth), 0);
      r.max_tokens = t.kind == "pp" ? 1 : t.tokens;
    }
    blocks = std::max(blocks, llmrt::Generator::blocks_needed(reqs, kv->block_size(), max_len));
  }
  llmrt::GeneratorOptions gopts;
  if (!f.isa.empty()) {
    llmrt::CpuIsa want;
    if (!llmrt::parse_isa(f.isa.c_str(), &want))
      return fail(llmrt::invalid_argument("--isa '" + f.isa + "': expected scalar, avx2, avx2-vnni or avx512-vnni"));
    if (want > llmrt::detected_isa())
      return fail(llmrt::invalid_argument(std::string("--isa ") + f.isa + ": this CPU only has " +
                                          llmrt::isa_name(llmrt::detected_isa())));
    llmrt::set_active_isa(want);
  }
  if (auto s = llmrt::check_device_name(f.device); !s.ok()) return fail(s);
  gopts.device = f.device;
  gopts.cuda_graphs = !f.no_cuda_graphs;
  gopts.tiled_attention = !f.no_tiled_attention;
  gopts.gemm_library = !f.no_gemm_library;
  gopts.programmatic_launch = !f.no_programmatic_launch;
  gopts.tensor_core_linear = !f.no_tensor_core_linear;
  gopts.fused_quantize = !f.no_fused_quantize;
  gopts.rope_in_attention = !f.no_rope_in_attention;
  gopts.silu_in_gemv = !f.no_silu_in_gemv;
  gopts.norm_in_gemv = !f.no_norm_in_gemv;
  gopts.device_sampling = !f.no_device_sampling;
  gopts.executor.threads = c.threads;
  gopts.executor.pin_threads = f.pin_threads;
  gopts.executor.cpu_kernels = f.cpu_kernels;
  gopts.executor.max_tokens_per_step = budget;
  gopts.executor.num_kv_blocks = static_cast<int>(blocks + 1);
  auto gen_or = llmrt::Generator::create(plan, gopts);
  if (!gen_or.ok()) return fail(gen_or.status());
  llmrt::Generator& gen = *gen_or.value();
  if (!gen.device_note().empty()) std::fprintf(stderr, "llmrt bench: %s\n", gen.device_note().c_str());
  if ((f.profile || !f.trace.empty()) && gen.executor().device_name() != "cpu")
    std::fprintf(stderr, "llmrt bench: profiling %s: device time per kernel (CUDA events), launched one by one "
                 "(no CUDA graphs while profiling, so decode figures are slower than without --profile)\n",
                 gen.executor().device_name().c_str());

  std::unique_ptr<llmrt::Profiler> profiler;
  if (f.profile || !f.trace.empty())
    profiler = std::make_unique<llmrt::Profiler>(llmrt::ProfilerOptions{.keep_events = !f.trace.empty()});

  const std::string plan_name = std::filesystem::path(f.plan).filename().string();
  const std::string model = plan.fb().model() && plan.fb().model()->name() ? plan.fb().model()->name()->str() : "";
  const char* isa = llmrt::isa_name(llmrt::active_isa());
  const int threads = gen.executor().num_threads();
  const bool text = !f.json;
  const bool with_base = baseline.has_value();
  if (text) {
    std::printf("llmrt bench: %s%s, device %s, threads %d, ISA %s, kernels %s, %d repetition%s, steps of up to %d "
                "tokens, sampling %s\n",
                plan_name.c_str(), model.empty() ? "" : (" (" + model + ")").c_str(),
                gen.executor().device_name().c_str(), threads, isa,
                gen.executor().cpu_kernels(), c.repetitions, c.repetitions == 1 ? "" : "s", budget,
                sampling_name(c.sampling).c_str());
    std::printf("| %-14s | %7s | %5s | %20s |%s\n", "test", "tokens", "batch", "t/s",
                with_base ? " vs baseline |" : "");
    std::printf("|%s|%s|%s|%s|%s\n", std::string(16, '-').c_str(), std::string(9, '-').c_str(),
                std::string(7, '-').c_str(), std::string(22, '-').c_str(), with_base ? "-------------|" : "");
    std::fflush(stdout);
  }

  std::vector<TestResult> results;
  for (const TestSpec& t : tests) {
    auto res = bench.run_test(gen, t, profiler.get());
    if (!res.ok()) return fail(res.status());
    TestResult& r = results.emplace_back(std::move(res.value()));
    if (baseline) r.change_pct = change(r.mean, baseline->find(t.name));
    if (text) {
      char figure[64];
      std::snprintf(figure, sizeof figure, "%.2f ± %.2f", r.mean, r.stddev);
      const int tokens = t.kind == "pp" ? t.tokens : t.tokens * t.batch;
      // "±" is two bytes in UTF-8: widen the field by one so the columns line up.
      std::printf("| %-14s | %7d | %5d | %21s |%s\n", t.name.c_str(), tokens, t.batch, figure,
                  with_base ? (" " + std::string(11 - std::min<size_t>(11, pct(r.change_pct).size()), ' ') +
                               pct(r.change_pct) + " |").c_str()
                            : "");
      std::fflush(stdout);
    }
    if (f.profile) {
      std::fprintf(stderr, "%s (%d timed runs):\n%s", t.name.c_str(), c.repetitions,
                   profiler->format_table(25).c_str());
      std::fflush(stderr);
    }
  }

  const uint64_t rss = peak_rss_bytes();
  const std::optional<double> rss_change = baseline ? change(double(rss), baseline->peak_rss) : std::nullopt;
  if (text) {
    std::printf("peak RSS: %.1f MiB%s\n", rss / (1024.0 * 1024.0),
                with_base ? (" (" + pct(rss_change) + ")").c_str() : "");
    std::fflush(stdout);
  }

  nlohmann::ordered_json j;
  j["plan"] = f.plan;
  j["model"] = model;
  j["threads"] = threads;
  j["isa"] = isa;
  j["cpu_kernels"] = gen.executor().cpu_kernels();
  j["device"] = gen.executor().device_name();
  j["repetitions"] = c.repetitions;
  j["seed"] = c.seed;
  j["step_tokens"] = budget;
  j["sampling"] = {{"temperature", c.sampling.temperature}, {"top_p", c.sampling.top_p},
                   {"top_k", c.sampling.top_k}, {"min_p", c.sampling.min_p}};
  j["tests"] = nlohmann::ordered_json::array();
  for (const TestResult& r : results) {
    nlohmann::ordered_json e;
    e["name"] = r.spec.name;
    e["kind"] = r.spec.kind;
    e["depth"] = r.spec.depth;
    e["tokens"] = r.spec.tokens;
    e["batch"] = r.spec.batch;
    e["tokens_per_s"] = r.mean;
    e["stddev"] = r.stddev;
    e["samples"] = r.tokens_per_s;
    e["seconds"] = r.seconds;
    if (baseline) e["change_pct"] = r.change_pct ? nlohmann::ordered_json(*r.change_pct) : nullptr;
    j["tests"].push_back(std::move(e));
  }
  j["peak_rss_bytes"] = rss;
  if (baseline) {
    j["baseline"] = f.baseline;
    j["peak_rss_change_pct"] = rss_change ? nlohmann::ordered_json(*rss_change) : nullptr;
  }
  const std::string dumped = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (f.json) std::fputs(dumped.c_str(), stdout);
  if (!f.json_out.empty()) {
    std::ofstream out(f.json_out, std::ios::binary);
    if (!(out << dumped) || !out.flush())
      return fail(llmrt::invalid_argument("--json-out: cannot write '" + f.json_out + "'"));
  }
  if (profiler && !f.trace.empty()) {
    if (Status s = profiler->write_trace(f.trace); !s.ok()) return fail(s);
    if (profiler->dropped_forwards() > 0)
      std::fprintf(stderr, "llmrt: warning: the trace holds the first %zu events; %lld forward() calls were left out\n",
                   profiler->num_events(), static_cast<long long>(profiler->dropped_forwards()));
  }
  return 0;
}

}  // namespace

Subcommand add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  BenchFlags& f = *flags;
  Subcommand s;
  CLI::App* cmd = app.add_subcommand("bench", "offline speed: prompt processing, token generation, batched decode");
  s.app = cmd;
  cmd->add_option("plan", f.plan, "plan file from llmc compile")->required();
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd->add_flag("--pin-threads", f.pin_threads, "pin each CPU thread to one core");
  cmd->add_option("-r,--repetitions", f.repetitions, "timed runs per test")->capture_default_str();
  cmd->add_option("--pp", f.pp, "prompt tokens of the prompt-processing tests, comma separated (0: none)")->capture_default_str();
  cmd->add_option("--tg", f.tg, "tokens generated per sequence in the decode tests (0: skip)")->capture_default_str();
  cmd->add_option("--batch", f.batch, "batch sizes of the batched decode tests, comma separated (0: none)")->capture_default_str();
  cmd->add_option("--isa", f.isa, "SIMD level of the CPU kernels (scalar, avx2, avx2-vnni, avx512-vnni; default: the best this CPU has)");
  cmd->add_option("--device", f.device, "cpu (default), cuda[:N] or auto (cuda when it can run the plan)");
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
  cmd->add_flag("--json", f.json, "print the results as JSON instead of a table");
  cmd->add_option("--json-out", f.json_out, "also write the JSON results to FILE");
  cmd->add_option("--baseline", f.baseline, "a previous --json result: print each figure's change in %");
  cmd->add_flag("--profile", f.profile, "print a per-op and per-kernel time table per test to stderr");
  cmd->add_option("--trace", f.trace, "write a Chrome trace event file of the timed runs (Perfetto)");
  cmd->add_option("--seed", f.seed, "seed of the random prompt token ids")->capture_default_str();
  cmd->add_option("--temperature", f.temperature, "sample every token at this temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-p", f.top_p, "with --temperature: nucleus sampling (1: off)")->capture_default_str();
  cmd->add_option("--top-k", f.top_k, "with --temperature: keep the k most probable tokens (0: off)")->capture_default_str();
  cmd->add_option("--min-p", f.min_p, "with --temperature: drop tokens below min_p x the largest probability (0: off)")->capture_default_str();
  cmd->add_option("--depth", f.depth,
                  "decode tests start from prompts of this many tokens; only decoding is timed (0: one-token prompts)")
      ->capture_default_str();
  // A repeated option takes its last value (scripts append overrides), as in `llmrt serve`.
  for (CLI::Option* o : cmd->get_options())
    if (o->get_name() != "--help" && o->get_name() != "plan") o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  s.run = [flags] { return run_bench(*flags); };
  return s;
}

}  // namespace llmrt_tools
