// llmrt: executes plans. `llmrt run plan.fb --prompt TEXT` streams an answer.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/base/npy.h"
#include "runtime/chat/chat_template.h"
#include "runtime/engine/make_executor.h"
#include "runtime/engine/profiler.h"
#include "runtime/generate/generator.h"
#include "runtime/plan/plan_file.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/llmrt_commands.h"

int llmrt_tools::fail(const llmrt::Status& s) {
  std::fprintf(stderr, "llmrt: error: %s\n", llmrt::printable(s.to_string()).c_str());
  return 1;
}

namespace {

using llmrt_tools::fail;

llmrt::StatusOr<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(',', i);
    std::string item = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    char* stop = nullptr;
    errno = 0;
    long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
      return llmrt::invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  if (ids.empty()) return llmrt::invalid_argument("--prompt-ids: no ids given");
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llmrt: runs plans compiled by llmc"};
  app.require_subcommand(1);

  std::string plan_path, prompt, logits_out, all_logits_out;
  std::vector<std::string> prompt_ids;
  llmrt::SamplingParams sp;
  int max_tokens = 64, threads = 0;
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
  int step_tokens = 512;
  bool json = false, ignore_eos = false, no_bos = false, verify = false;
  auto* run = app.add_subcommand("run", "answer one prompt (or run several --prompt-ids as one batch)");
  run->add_option("plan", plan_path, "plan file from llmc compile")->required();
  run->add_option("--prompt", prompt, "prompt text");
  run->add_option("--prompt-ids", prompt_ids, "comma separated token ids; repeat for a batch");
  run->add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  run->add_option("--temperature", sp.temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  run->add_option("--top-k", sp.top_k)->check(CLI::NonNegativeNumber);
  run->add_option("--top-p", sp.top_p);
  run->add_option("--min-p", sp.min_p);
  run->add_option("--repetition-penalty", sp.repetition_penalty);
  run->add_option("--presence-penalty", sp.presence_penalty);
  run->add_option("--frequency-penalty", sp.frequency_penalty);
  run->add_option("--seed", sp.seed);
  run->add_option("--threads", threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  run->add_option("--device", device,
                  "cpu (default), cuda[:N] (the plan's GPU kernels; an error if they cannot run) or auto "
                  "(cuda when it can run the plan, else cpu)");
  run->add_flag("--pin-threads", pin_threads, "pin each CPU thread to one core");
  run->add_flag("--no-cuda-graphs", no_cuda_graphs, "on cuda: launch decode steps kernel by kernel (no graph replay)");
  run->add_flag("--no-fused-quantize", no_fused_quantize, "on cuda: an int8-activation GEMV quantizes its input in its own quantize_q8 kernel even where the step before it can write those rows (plan Step.quantized_output), to compare");
  run->add_flag("--no-rope-in-attention", no_rope_in_attention, "on cuda: decode steps launch each layer's rope_kv_store kernel and then its attention kernel, where the plan has the attention kernel doing both (plan Step.rope_kernel), to compare");
  run->add_flag("--no-silu-in-gemv", no_silu_in_gemv, "on cuda: decode steps launch the gate|up GEMV and then the silu_mul kernel, where the plan has the GEMV doing both (plan Step.silu_kernel), to compare");
  run->add_flag("--no-device-sampling", no_device_sampling, "on cuda: draws at a temperature copy their logits row back and sample on the host, where the plan has a sampling kernel (plan Program.sampling_kernel), to compare");
  run->add_flag("--no-norm-in-gemv", no_norm_in_gemv, "on cuda: batch-1 decode steps launch a GEMV and then the add_rms_norm kernel, where the plan has the GEMV's last block doing the add_rms_norm (plan Step.norm_kernel), to compare");
  run->add_flag("--no-tensor-core-linear", no_tensor_core_linear, "on cuda: linear and logits steps run their CUDA-core GEMV at every row count (no tensor-core kernel or GEMM library)");
  run->add_flag("--no-programmatic-launch", no_programmatic_launch, "on cuda (compute capability 9.0+): launch each kernel after the previous one ends, not overlapped with it (programmatic dependent launch), to compare");
  run->add_flag("--no-gemm-library", no_gemm_library, "on cuda: linear steps the plan gives to cuBLASLt (dense, or quantized and dequantized to bf16) run its generated kernels instead");
  run->add_flag("--no-tiled-attention", no_tiled_attention, "on cuda: paged attention on the per-row kernel in every step (not the plan's tiled prefill kernel)");
  run->add_option("--step-tokens", step_tokens, "tokens per forward step: prompts are prefilled in chunks of this many")
      ->capture_default_str();
  run->add_option("--cpu-kernels", cpu_kernels,
                  "contract of quantized kernels: reference | fast (default: the plan's)")
      ->check(CLI::IsMember({"reference", "fast"}));
  run->add_option("--logits-out", logits_out, "write last-prompt-position logits (.npy float32)");
  run->add_option("--all-logits-out", all_logits_out, "write logits of every prompt position (.npy, one prompt)");
  run->add_flag("--json", json, "print a JSON result instead of streaming text");
  run->add_flag("--ignore-eos", ignore_eos, "do not stop at end-of-sequence tokens");
  run->add_flag("--no-bos", no_bos, "do not add the BOS token to --prompt");
  run->add_flag("--verify-weights", verify, "check the weight section's hash before running");
  bool chat = false;
  std::string system_prompt;
  run->add_flag("--chat", chat, "wrap --prompt as a user message in the plan's chat template");
  run->add_option("--system", system_prompt, "system message for --chat");
  bool profile = false;
  std::string trace_path;
  run->add_flag("--profile", profile, "print a per-op and per-kernel time table to stderr at the end");
  run->add_option("--trace", trace_path, "write a Chrome trace event file (Perfetto, chrome://tracing)");

  std::string inspect_path, memory;
  bool inspect_json = false;
  auto* inspect = app.add_subcommand("inspect", "describe a plan (same as llmc inspect)");
  inspect->add_option("plan", inspect_path)->required();
  inspect->add_flag("--json", inspect_json);
  inspect->add_option("--memory", memory);

  llmrt_tools::Subcommand serve = llmrt_tools::add_serve_command(app);
  llmrt_tools::Subcommand bench_serve = llmrt_tools::add_bench_serve_command(app);
  llmrt_tools::Subcommand bench = llmrt_tools::add_bench_command(app);
  llmrt_tools::Subcommand eval = llmrt_tools::add_eval_command(app);
  llmrt_tools::Subcommand devices = llmrt_tools::add_devices_command(app);

  CLI11_PARSE(app, argc, argv);

  if (serve.app->parsed()) return serve.run();
  if (bench_serve.app->parsed()) return bench_serve.run();
  if (bench.app->parsed()) return bench.run();
  if (eval.app->parsed()) return eval.run();

  if (devices.app->parsed()) return devices.run();

  if (*inspect) {
    std::optional<uint64_t> budget;
    if (!memory.empty() && !(budget = llmrt::parse_bytes(memory)))
      return fail(llmrt::invalid_argument("--memory: cannot parse '" + memory + "'"));
    auto plan = llmrt::Plan::open(inspect_path, /*generate_synthetic=*/false);
    if (!plan.ok()) return fail(plan.status());
    std::fputs(llmrt::inspect_plan(**plan, inspect_json, budget).c_str(), stdout);
    return 0;
  }

  if (prompt.empty() == prompt_ids.empty())
    return fail(llmrt::invalid_argument("give exactly one of --prompt or --prompt-ids"));
  if (!all_logits_out.empty() && prompt_ids.size() > 1)
    return fail(llmrt::invalid_argument("--all-logits-out takes a single prompt"));
  auto plan_or = llmrt::Plan::open(plan_path);
  if (!plan_or.ok()) return fail(plan_or.status());
  const llmrt::Plan& plan = **plan_or;
  if (verify)
    if (auto s = plan.verify_weights_hash(); !s.ok()) return fail(s);
  if (plan.synthetic_weights())
    std::fprintf(stderr, "llmrt: note: the plan's weights are synthetic (seed %llu): outputs are meaningless\n",
                 static_cast<unsigned long long>(plan.fb().synthetic_seed()));

  std::unique_ptr<llmrt::Tokenizer> tokenizer;
  if (plan.fb().tokenizer()) {
    auto t = llmrt::Tokenizer::from_plan(*plan.fb().tokenizer());
    if (!t.ok()) return fail(t.status());
    tokenizer = std::move(t.value());
  }
  std::vector<llmrt::GenerationRequest> requests;
  if (!prompt.empty()) {
    if (!tokenizer) return fail(llmrt::failed_precondition("the plan has no tokenizer: use --prompt-ids"));
    std::string text = prompt;
    bool add_special = !no_bos;
    if (chat) {
      if (tokenizer->chat_template().empty())
        return fail(llmrt::failed_precondition("the plan has no chat template: drop --chat"));
      auto tmpl = llmrt::ChatTemplate::parse(tokenizer->chat_template());
      if (!tmpl.ok()) return fail(tmpl.status().with_context("chat template"));
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
      messages.push_back({{"role", "user"}, {"content", prompt}});
      nlohmann::ordered_json extra = {
          {"bos_token", std::string(tokenizer->token_text(tokenizer->bos_id()))},
          {"eos_token", std::string(tokenizer->token_text(tokenizer->eos_id()))}};
      auto rendered = (*tmpl)->render(messages, /*add_generation_prompt=*/true, extra);
      if (!rendered.ok()) return fail(rendered.status());
      text = *rendered;
      add_special = false;  // the template writes BOS itself, as apply_chat_template does
    }
    auto ids = tokenizer->encode(text, add_special);
    if (!ids.ok()) return fail(ids.status());
    requests.push_back({});
    requests.back().prompt = std::move(ids.value());
  }
  for (const std::string& text : prompt_ids) {
    auto ids = parse_ids(text);
    if (!ids.ok()) return fail(ids.status());
    requests.push_back({});
    requests.back().prompt = std::move(ids.value());
  }
  for (auto& r : requests) {
    r.max_tokens = max_tokens;
    r.ignore_eos = ignore_eos;
    r.want_last_logits = !logits_out.empty();
    r.want_prompt_logits = !all_logits_out.empty();
  }

  // Sampling flags the user did not give come from the plan's generation defaults
  // (generation_config.json), as transformers' generate() does.
  if (const llmrt::fb::GenerationDefaults* g = plan.fb().generation()) {
    if (!run->count("--temperature")) sp.temperature = g->temperature();
    if (!run->count("--top-p")) sp.top_p = g->top_p();
    if (!run->count("--top-k")) sp.top_k = g->top_k();
    if (!run->count("--min-p")) sp.min_p = g->min_p();
    if (!run->count("--repetition-penalty")) sp.repetition_penalty = g->repetition_penalty();
  }
  for (auto& r : requests) r.sampling = sp;

  llmrt::GeneratorOptions gopts;
  if (auto s = llmrt::check_device_name(device); !s.ok()) return fail(s);
  gopts.device = device;
  gopts.cuda_graphs = !no_cuda_graphs;
  gopts.tiled_attention = !no_tiled_attention;
  gopts.gemm_library = !no_gemm_library;
  gopts.programmatic_launch = !no_programmatic_launch;
  gopts.tensor_core_linear = !no_tensor_core_linear;
  gopts.fused_quantize = !no_fused_quantize;
  gopts.rope_in_attention = !no_rope_in_attention;
  gopts.silu_in_gemv = !no_silu_in_gemv;
  gopts.norm_in_gemv = !no_norm_in_gemv;
  gopts.device_sampling = !no_device_sampling;
  gopts.executor.threads = threads;
  gopts.executor.pin_threads = pin_threads;
  gopts.executor.cpu_kernels = cpu_kernels;
  const llmrt::fb::MemoryPlan* mp = plan.fb().memory();
  const llmrt::fb::KvSpec* kv = plan.fb().kv();
  if (!mp || !kv || kv->block_size() <= 0)
    return fail(llmrt::invalid_argument("plan has no memory plan or KV spec"));
  if (step_tokens < 1) return fail(llmrt::invalid_argument("--step-tokens must be at least 1"));
  // One step holds at most --step-tokens (512) tokens; longer prompts are chunked, and the arena
  // stays small.
  gopts.executor.max_tokens_per_step = std::min(mp->max_tokens_per_step(), step_tokens);
  gopts.executor.num_kv_blocks = static_cast<int>(
      llmrt::Generator::blocks_needed(requests, kv->block_size(), mp->max_model_len()) + 1);
  auto gen_or = llmrt::Generator::create(plan, gopts);
  if (!gen_or.ok()) return fail(gen_or.status());
  llmrt::Generator& gen = *gen_or.value();
  if (!gen.device_note().empty()) std::fprintf(stderr, "llmrt: %s\n", gen.device_note().c_str());
  if ((profile || !trace_path.empty()) && gen.executor().device_name() != "cpu")
    std::fprintf(stderr, "llmrt: profiling %s: device time per kernel (CUDA events), launched one by one "
                 "(no CUDA graphs while profiling)\n", gen.executor().device_name().c_str());
  std::unique_ptr<llmrt::Profiler> profiler;
  if (profile || !trace_path.empty()) {
    profiler = std::make_unique<llmrt::Profiler>(llmrt::ProfilerOptions{.keep_events = !trace_path.empty()});
    gen.executor().set_profiler(profiler.get());
  }

  const bool stream = !json && requests.size() == 1 && tokenizer;
  std::unique_ptr<llmrt::StreamingDecoder> decoder;
  if (stream) {
    decoder = std::make_unique<llmrt::StreamingDecoder>(*tokenizer, /*skip_special=*/true);
    if (!chat) {
      std::fputs(prompt.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  auto results = gen.generate(requests, [&](size_t, int32_t token) {
    if (!decoder) return;
    std::string text = decoder->push(token);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!results.ok()) return fail(results.status());
  if (decoder) {
    std::string rest = decoder->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
  }
  const int vocab = gen.vocab_size();
  if (!logits_out.empty()) {
    std::vector<float> all;
    for (auto& o : *results) all.insert(all.end(), o.last_logits.begin(), o.last_logits.end());
    std::vector<int64_t> shape = requests.size() == 1 ? std::vector<int64_t>{vocab}
                                                      : std::vector<int64_t>{int64_t(requests.size()), vocab};
    if (auto s = llmrt::write_npy_f32(logits_out, all.data(), shape); !s.ok()) return fail(s);
  }
  if (!all_logits_out.empty()) {
    const auto& o = results->front();
    if (auto s = llmrt::write_npy_f32(all_logits_out, o.prompt_logits.data(),
                                      {int64_t(requests[0].prompt.size()), vocab});
        !s.ok())
      return fail(s);
  }
  if (profiler) {
    if (profile) std::fputs(profiler->format_table().c_str(), stderr);
    if (!trace_path.empty()) {
      if (auto s = profiler->write_trace(trace_path); !s.ok()) return fail(s);
      if (profiler->dropped_forwards() > 0)
        std::fprintf(stderr, "llmrt: warning: the trace holds the first %zu events; %lld forward() calls were left out\n",
                     profiler->num_events(), static_cast<long long>(profiler->dropped_forwards()));
    }
  }
  if (json) {
    nlohmann::json j;
    j["outputs"] = nlohmann::json::array();
    for (size_t i = 0; i < results->size(); ++i) {
      const auto& o = (*results)[i];
      nlohmann::json e = {{"prompt_ids", requests[i].prompt}, {"output_ids", o.tokens},
                          {"logprobs", o.logprobs}, {"finish_reason", o.finish_reason}};
      if (tokenizer) e["text"] = tokenizer->decode(o.tokens, /*skip_special=*/true);
      j["outputs"].push_back(e);
    }
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}
