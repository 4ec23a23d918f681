// `llmrt eval PLAN`: quality of a plan on a text, measured like llama.cpp's llama-perplexity
// (chunking, scored positions and error estimates in runtime/eval/perplexity.h).
//
//   llmrt eval PLAN --perplexity FILE [--ctx 512] [--chunks N] [--batch-chunks B] [--threads N]
//       perplexity of PLAN on the text: running PPL per chunk "[1]12.3456,[2]...", then
//       "Final estimate: PPL = x +/- err".
//   llmrt eval PLAN --kl-divergence OTHER.fb --file FILE
//       runs both plans on the same chunks: mean KL(P_other || P_plan) per scored position, its
//       stddev and uncertainty, the share of positions whose top token agrees ("same top p"),
//       and both perplexities. OTHER is the reference (llama.cpp's --kl-divergence-base).
//   llmrt eval PLAN --kl-base BASE.npy --file FILE
//       the same against saved log-probabilities instead of a second plan.
//   --token-ids IDS.npy    int32 1-D token ids instead of tokenizing a text (e.g. llama.cpp's).
//   --save-logprobs OUT.npy  float16 [positions, vocab] log-softmax of PLAN at the scored
//                            positions, written chunk by chunk (size: chunks x (ctx-1-ctx/2) x vocab
//                            x 2 bytes, bounded with --chunks).
//   --bos auto|none|ID     BOS that replaces each chunk's first token (auto: the tokenizer's BOS
//                          when it adds one, as llama.cpp does; none without a tokenizer).
//   --json                 print the figures as JSON (the running PPL goes to stderr).
// Memory: the logits of one group of --batch-chunks chunks at a time (and of OTHER's, in KL mode).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/engine/cpu_executor.h"
#include "runtime/eval/chunk_runner.h"
#include "runtime/eval/npy_stream.h"
#include "runtime/eval/perplexity.h"
#include "runtime/plan/plan_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/llmrt_commands.h"

namespace llmrt_tools {
namespace {

using llmrt::Status;
using llmrt::StatusOr;

// Numbers are taken as text and checked in run_eval(), so a bad value is a clean
// "llmrt: error: --ctx: ..." (exit 1) like every other input error.
struct EvalFlags {
  std::string plan;
  std::string perplexity_file, text_file, token_ids;
  std::string kl_other, kl_base, save_logprobs;
  std::string ctx = "512", chunks = "0", threads = "0", batch_chunks = "1", bos = "auto";
  std::string cpu_kernels, kl_cpu_kernels;  // "" = the plan's
  bool json = false;
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

StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return llmrt::not_found("cannot open text file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A plan opened for evaluation, with its executor.
struct Model {
  std::unique_ptr<llmrt::Plan> plan;
  std::unique_ptr<llmrt::CpuExecutor> executor;
};

StatusOr<std::unique_ptr<llmrt::Plan>> open_plan(const std::string& path, const char* what) {
  auto plan = llmrt::Plan::open(path);
  if (!plan.ok()) return plan.status().with_context(what);
  return std::move(plan.value());
}

Status check_ctx(const llmrt::Plan& plan, int ctx, const std::string& path) {
  const llmrt::fb::MemoryPlan* mp = plan.fb().memory();
  const llmrt::fb::KvSpec* kv = plan.fb().kv();
  if (!mp || !kv || kv->block_size() <= 0) return llmrt::invalid_argument(path + ": plan has no memory plan or KV spec");
  if (ctx > mp->max_model_len())
    return llmrt::out_of_range("--ctx " + std::to_string(ctx) + " is longer than the max_model_len " +
                               std::to_string(mp->max_model_len()) + " of " + path);
  return llmrt::ok_status();
}

StatusOr<std::unique_ptr<llmrt::CpuExecutor>> make_executor(const llmrt::Plan& plan, int ctx, int batch_chunks,
                                                            int threads, const std::string& cpu_kernels) {
  llmrt::CpuExecutorOptions o;
  o.threads = threads;
  o.cpu_kernels = cpu_kernels;
  // One step holds at most 512 tokens (a chunk spans several steps when longer): keeps the arena small.
  o.max_tokens_per_step = std::min(plan.fb().memory()->max_tokens_per_step(), 512);
  o.num_kv_blocks = llmrt::ChunkRunner::blocks_needed(ctx, batch_chunks, plan.fb().kv()->block_size());
  return llmrt::CpuExecutor::create(plan, o);
}

std::string fmt(const char* f, double a, double b) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

int run_eval(const EvalFlags& f) {
  auto ctx_or = parse_int("--ctx", f.ctx, INT32_MIN, INT32_MAX);
  if (!ctx_or.ok()) return fail(ctx_or.status());
  const int ctx = static_cast<int>(*ctx_or);
  if (ctx < 3)
    return fail(llmrt::invalid_argument("--ctx " + f.ctx +
                                        ": a chunk needs at least 3 tokens (positions ctx/2 .. ctx-2 are scored)"));
  auto chunks_or = parse_int("--chunks", f.chunks, 0, INT32_MAX);
  if (!chunks_or.ok()) return fail(chunks_or.status());
  auto threads_or = parse_int("--threads", f.threads, 0, 1024);
  if (!threads_or.ok()) return fail(threads_or.status());
  auto batch_or = parse_int("--batch-chunks", f.batch_chunks, 1, 1 << 16);
  if (!batch_or.ok()) return fail(batch_or.status());
  const int batch_chunks = static_cast<int>(*batch_or);

  const int sources = !f.perplexity_file.empty() + !f.text_file.empty() + !f.token_ids.empty();
  if (sources != 1)
    return fail(llmrt::invalid_argument("give exactly one of --perplexity FILE, --file FILE or --token-ids IDS.npy"));
  if (!f.kl_other.empty() && !f.kl_base.empty())
    return fail(llmrt::invalid_argument("give at most one of --kl-divergence OTHER and --kl-base BASE.npy"));
  const bool kl_mode = !f.kl_other.empty() || !f.kl_base.empty();
  for (const auto& [flag, value] : {std::pair{"--cpu-kernels", &f.cpu_kernels}, {"--kl-cpu-kernels", &f.kl_cpu_kernels}})
    if (!value->empty() && *value != "reference" && *value != "fast")
      return fail(llmrt::invalid_argument(std::string(flag) + ": '" + *value + "' is not reference or fast"));

  // The input first, so a missing file is reported before any plan work.
  std::vector<int32_t> tokens;
  std::string source, text;
  if (!f.token_ids.empty()) {
    auto ids = llmrt::read_npy_int_vector(f.token_ids);
    if (!ids.ok()) return fail(ids.status().with_context("--token-ids"));
    tokens = std::move(ids.value());
    source = f.token_ids;
    if (tokens.empty()) return fail(llmrt::invalid_argument("--token-ids: " + source + " holds no token ids"));
  } else {
    source = f.perplexity_file.empty() ? f.text_file : f.perplexity_file;
    auto t = read_text(source);
    if (!t.ok()) return fail(t.status());
    text = std::move(t.value());
  }

  auto plan_or = open_plan(f.plan, "plan");
  if (!plan_or.ok()) return fail(plan_or.status());
  std::unique_ptr<llmrt::Plan> plan = std::move(plan_or.value());
  if (auto s = check_ctx(*plan, ctx, f.plan); !s.ok()) return fail(s);
  std::unique_ptr<llmrt::Plan> other;
  if (!f.kl_other.empty()) {
    auto o = open_plan(f.kl_other, "--kl-divergence");
    if (!o.ok()) return fail(o.status());
    other = std::move(o.value());
    if (auto s = check_ctx(*other, ctx, f.kl_other); !s.ok()) return fail(s);
  }

  // The tokenizer: the plan's, else the reference plan's.
  std::unique_ptr<llmrt::Tokenizer> tokenizer;
  for (const llmrt::Plan* p : {plan.get(), other.get()}) {
    if (tokenizer || !p || !p->fb().tokenizer()) continue;
    auto t = llmrt::Tokenizer::from_plan(*p->fb().tokenizer());
    if (!t.ok()) return fail(t.status().with_context("tokenizer"));
    tokenizer = std::move(t.value());
  }

  // Tokens: the whole text at once, BOS first when the tokenizer adds it (llama.cpp tokenizes
  // with add_special = true), or the given ids.
  if (f.token_ids.empty()) {
    if (!tokenizer)
      return fail(llmrt::failed_precondition("the plan has no tokenizer: give --token-ids IDS.npy instead of a text"));
    auto ids = tokenizer->encode(text, /*add_special=*/true);
    if (!ids.ok()) return fail(ids.status().with_context("tokenizing " + source));
    tokens = std::move(ids.value());
  }

  int32_t bos = -1;
  if (f.bos == "auto") {
    if (tokenizer && tokenizer->add_bos()) bos = tokenizer->bos_id();
  } else if (f.bos != "none") {
    auto b = parse_int("--bos", f.bos, 0, INT32_MAX);
    if (!b.ok()) return fail(llmrt::invalid_argument("--bos: '" + f.bos + "' is not auto, none or a token id"));
    bos = static_cast<int32_t>(*b);
  }

  auto chunk_plan_or = llmrt::plan_chunks(static_cast<int64_t>(tokens.size()), ctx, static_cast<int>(*chunks_or));
  if (!chunk_plan_or.ok()) return fail(chunk_plan_or.status().with_context(source));
  llmrt::ChunkPlan cp = *chunk_plan_or;
  const int scored = cp.scored_per_chunk();

  auto ex_or = make_executor(*plan, ctx, batch_chunks, static_cast<int>(*threads_or), f.cpu_kernels);
  if (!ex_or.ok()) return fail(ex_or.status().with_context(f.plan));
  std::unique_ptr<llmrt::CpuExecutor> ex = std::move(ex_or.value());
  const int vocab = ex->vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return fail(llmrt::invalid_argument(source + ": token id " + std::to_string(tokens[i]) + " at index " +
                                          std::to_string(i) + " is outside the vocabulary (" + std::to_string(vocab) +
                                          ")"));
  if (bos >= vocab)
    return fail(llmrt::invalid_argument("--bos " + std::to_string(bos) + " is outside the vocabulary (" +
                                        std::to_string(vocab) + ")"));
  auto runner_or = llmrt::ChunkRunner::create(ex.get(), ctx, batch_chunks);
  if (!runner_or.ok()) return fail(runner_or.status());
  llmrt::ChunkRunner runner = std::move(runner_or.value());

  std::unique_ptr<llmrt::CpuExecutor> other_ex;
  std::unique_ptr<llmrt::ChunkRunner> other_runner;
  if (other) {
    auto o = make_executor(*other, ctx, batch_chunks, static_cast<int>(*threads_or), f.kl_cpu_kernels);
    if (!o.ok()) return fail(o.status().with_context(f.kl_other));
    other_ex = std::move(o.value());
    if (other_ex->vocab_size() != vocab)
      return fail(llmrt::invalid_argument("--kl-divergence: " + f.kl_other + " has a vocabulary of " +
                                          std::to_string(other_ex->vocab_size()) + ", " + f.plan + " of " +
                                          std::to_string(vocab)));
    auto r = llmrt::ChunkRunner::create(other_ex.get(), ctx, batch_chunks);
    if (!r.ok()) return fail(r.status().with_context(f.kl_other));
    other_runner = std::make_unique<llmrt::ChunkRunner>(std::move(r.value()));
  }
  std::unique_ptr<llmrt::NpyRowReader> base;
  if (!f.kl_base.empty()) {
    auto b = llmrt::NpyRowReader::open(f.kl_base);
    if (!b.ok()) return fail(b.status().with_context("--kl-base"));
    base = std::move(b.value());
    if (base->cols() != vocab)
      return fail(llmrt::invalid_argument("--kl-base: " + f.kl_base + " has rows of " + std::to_string(base->cols()) +
                                          " log-probabilities, the plan's vocabulary is " + std::to_string(vocab)));
    if (base->rows() % scored != 0 || base->rows() == 0)
      return fail(llmrt::invalid_argument("--kl-base: " + f.kl_base + " has " + std::to_string(base->rows()) +
                                          " rows, not a whole number of chunks of " + std::to_string(scored) +
                                          " scored positions (--ctx " + std::to_string(ctx) + ")"));
    cp.num_chunks = static_cast<int>(std::min<int64_t>(cp.num_chunks, base->rows() / scored));
  }
  std::unique_ptr<llmrt::NpyF16Writer> saver;
  if (!f.save_logprobs.empty()) {
    auto w = llmrt::NpyF16Writer::create(f.save_logprobs, cp.scored_total(), vocab);
    if (!w.ok()) return fail(w.status().with_context("--save-logprobs"));
    saver = std::move(w.value());
  }

  FILE* progress = f.json ? stderr : stdout;
  std::fprintf(stderr,
               "llmrt eval: %s: %zu tokens, %d chunks of %d (scoring positions %d..%d), %d per pass, BOS %s, "
               "%d threads, %s kernels\n",
               source.c_str(), tokens.size(), cp.num_chunks, ctx, cp.first_scored(), ctx - 2, batch_chunks,
               bos >= 0 ? std::to_string(bos).c_str() : "none", ex->num_threads(), ex->cpu_kernels());

  llmrt::PerplexityStats ppl;
  llmrt::KlStats kl;
  std::vector<double> chunk_ppl;
  std::vector<float> logits, other_logits, base_row(kl_mode && base ? vocab : 0);
  std::vector<double> logq(vocab), logp(kl_mode ? vocab : 0);
  std::vector<std::vector<int32_t>> group;
  const auto t0 = std::chrono::steady_clock::now();
  if (kl_mode)
    std::fprintf(progress, "chunk        PPL(Q)     PPL(base)      mean KLD   same top\n");
  for (int c0 = 0; c0 < cp.num_chunks; c0 += batch_chunks) {
    const int n = std::min(batch_chunks, cp.num_chunks - c0);
    group.clear();
    for (int k = 0; k < n; ++k) group.push_back(llmrt::chunk_tokens(tokens, cp, c0 + k, bos));
    if (auto s = runner.run(group, cp.first_scored(), &logits); !s.ok()) return fail(s.with_context(f.plan));
    if (other_runner)
      if (auto s = other_runner->run(group, cp.first_scored(), &other_logits); !s.ok())
        return fail(s.with_context(f.kl_other));
    for (int k = 0; k < n; ++k) {
      const size_t start = size_t(c0 + k) * size_t(ctx);
      for (int j = 0; j < scored; ++j) {
        const size_t row = size_t(k) * scored + j;
        const int32_t target = tokens[start + cp.first_scored() + j + 1];
        const int top = llmrt::log_softmax(std::span<const float>(logits.data() + row * vocab, vocab), logq);
        if (saver)
          if (auto s = saver->append_row(logq); !s.ok()) return fail(s);
        if (!kl_mode) {
          ppl.add(-logq[target]);
          continue;
        }
        int base_top;
        if (other_runner) {
          base_top = llmrt::log_softmax(std::span<const float>(other_logits.data() + row * vocab, vocab), logp);
        } else {
          if (auto s = base->read_row(base_row); !s.ok()) return fail(s.with_context("--kl-base"));
          // Saved log-probabilities are rounded (float16): renormalized here so P sums to 1.
          base_top = llmrt::log_softmax(base_row, logp);
        }
        kl.add(logp, logq, base_top, top, target);
      }
      if (!kl_mode) {
        chunk_ppl.push_back(ppl.ppl());
        std::fprintf(progress, "[%d]%.4lf,", c0 + k + 1, ppl.ppl());
      } else {
        chunk_ppl.push_back(kl.ppl().ppl());
        std::fprintf(progress, "%5d  %12.4f  %12.4f  %12.6f  %8.3f %%\n", c0 + k + 1, kl.ppl().ppl(),
                     kl.ppl_base().ppl(), kl.kl().mean(), 100.0 * kl.same_top_fraction());
      }
      std::fflush(progress);
    }
  }
  if (!kl_mode) std::fputc('\n', progress);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (saver)
    if (auto s = saver->finish(); !s.ok()) return fail(s);

  const llmrt::PerplexityStats& final_ppl = kl_mode ? kl.ppl() : ppl;
  std::fprintf(stderr, "llmrt eval: %lld positions scored in %.2f s (%.1f tokens/s evaluated)\n",
               static_cast<long long>(final_ppl.count()), seconds,
               double(cp.num_chunks) * ctx * (other_runner ? 2 : 1) / std::max(seconds, 1e-9));
  if (f.json) {
    nlohmann::json j = {{"plan", f.plan},
                        {"source", source},
                        {"tokens", tokens.size()},
                        {"ctx", ctx},
                        {"chunks", cp.num_chunks},
                        {"first_scored", cp.first_scored()},
                        {"scored_positions", final_ppl.count()},
                        {"bos", bos},
                        {"cpu_kernels", ex->cpu_kernels()},
                        {"ppl", final_ppl.ppl()},
                        {"ppl_error", final_ppl.ppl_error()},
                        {"mean_nll", final_ppl.mean_nll()},
                        {"chunk_ppl", chunk_ppl},
                        {"seconds", seconds}};
    if (kl_mode) {
      j["kl"] = {{"base", other ? f.kl_other : f.kl_base},
                 {"mean", kl.kl().mean()},
                 {"stddev", kl.kl().stddev()},
                 {"error", kl.kl().error()},
                 {"max", kl.max_kl()},
                 {"same_top_pct", 100.0 * kl.same_top_fraction()},
                 {"same_top_error_pct", 100.0 * kl.same_top_error()},
                 {"same_top", kl.same_top()},
                 {"ppl_base", kl.ppl_base().ppl()},
                 {"ppl_base_error", kl.ppl_base().ppl_error()}};
    }
    if (saver) j["saved_logprobs"] = f.save_logprobs;
    std::puts(j.dump(2).c_str());
    return 0;
  }
  std::printf("%s\n", fmt("Final estimate: PPL = %.4lf +/- %.5lf", final_ppl.ppl(), final_ppl.ppl_error()).c_str());
  if (kl_mode) {
    std::printf("\n====== Perplexity statistics ======\n");
    std::printf("%s\n", fmt("Mean PPL(Q)                   : %10.6lf ± %10.6lf", kl.ppl().ppl(), kl.ppl().ppl_error()).c_str());
    std::printf("%s\n", fmt("Mean PPL(base)                : %10.6lf ± %10.6lf", kl.ppl_base().ppl(),
                            kl.ppl_base().ppl_error()).c_str());
    std::printf("\n====== KL divergence statistics ======\n");
    std::printf("%s\n", fmt("Mean    KLD: %10.6lf ± %10.6lf", kl.kl().mean(), kl.kl().error()).c_str());
    std::printf("Stddev  KLD: %10.6lf\n", kl.kl().stddev());
    std::printf("Maximum KLD: %10.6lf\n", kl.max_kl());
    std::printf("\n====== Token probability statistics ======\n");
    std::printf("%s\n", fmt("Same top p: %6.3lf ± %5.3lf %%", 100.0 * kl.same_top_fraction(),
                            100.0 * kl.same_top_error()).c_str());
  }
  return 0;
}

}  // namespace

Subcommand add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  EvalFlags& f = *flags;
  Subcommand s;
  CLI::App* cmd = app.add_subcommand("eval", "quality: perplexity and KL divergence on a text (as llama-perplexity)");
  s.app = cmd;
  cmd->add_option("plan", f.plan, "plan file from llmc compile")->required();
  cmd->add_option("--perplexity", f.perplexity_file, "text file whose perplexity to measure");
  cmd->add_option("--file", f.text_file, "text file (same as --perplexity; reads better with --kl-divergence)");
  cmd->add_option("--token-ids", f.token_ids, "int32 1-D .npy of token ids to use instead of tokenizing a text");
  cmd->add_option("--ctx", f.ctx, "tokens per chunk")->capture_default_str();
  cmd->add_option("--chunks", f.chunks, "evaluate at most N chunks (0: all)")->capture_default_str();
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--batch-chunks", f.batch_chunks, "chunks evaluated together in each forward pass")
      ->capture_default_str();
  cmd->add_option("--bos", f.bos, "auto | none | ID: token that replaces each chunk's first token")
      ->capture_default_str();
  cmd->add_option("--kl-divergence", f.kl_other, "reference plan: KL(P_other || P_plan) and top-1 agreement");
  cmd->add_option("--kl-base", f.kl_base, "reference log-probabilities (.npy [positions, vocab], as --save-logprobs)");
  cmd->add_option("--save-logprobs", f.save_logprobs, "write PLAN's float16 log-softmax of the scored positions (.npy)");
  cmd->add_option("--cpu-kernels", f.cpu_kernels, "contract of PLAN's quantized kernels: reference | fast (default: the plan's)");
  cmd->add_option("--kl-cpu-kernels", f.kl_cpu_kernels, "the same for the --kl-divergence plan");
  cmd->add_flag("--json", f.json, "print the figures as JSON");
  for (CLI::Option* o : cmd->get_options())
    if (o->get_name() != "--help" && o->get_name() != "plan") o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  s.run = [flags] { return run_eval(*flags); };
  return s;
}

}  // namespace llmrt_tools
