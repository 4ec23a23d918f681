#include "runtime/plan/plan_inspect.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

namespace llmrt {
namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::string human(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace

uint64_t kv_elem_bytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32: return 4;
    case fb::DType::BF16:
    case fb::DType::F16: return 2;
    case fb::DType::I8:
    case fb::DType::F8E4M3: return 1;
    default: return 0;
  }
}

const KvCacheType* kv_cache_type(std::string_view name) {
  static constexpr KvCacheType kTypes[] = {{"f32", fb::DType::F32, "kv_f32"},
                                           {"bf16", fb::DType::BF16, "kv_bf16"},
                                           {"f16", fb::DType::F16, "kv_f16"},
                                           {"fp8", fb::DType::F8E4M3, "kv_fp8_e4m3"},
                                           {"int8", fb::DType::I8, "kv_i8"}};
  for (const KvCacheType& t : kTypes)
    if (name == t.name || name == fb::EnumNameDType(t.dtype)) return &t;
  return nullptr;
}

uint64_t kv_bytes_per_token(const fb::Plan& plan) {
  const fb::KvSpec* kv = plan.kv();
  if (!kv) return 0;
  // int8: one byte per element plus one f32 scale per head row.
  const uint64_t row = kv->head_dim() * kv_elem_bytes(kv->dtype()) + (kv->dtype() == fb::DType::I8 ? 4ull : 0ull);
  return 2ull * kv->num_layers() * kv->num_kv_heads() * row;
}

uint64_t workspace_bytes(const fb::Plan& plan, int64_t tokens, int threads) {
  const fb::MemoryPlan* m = plan.memory();
  if (!m) return 0;
  return m->arena_bytes_per_token() * tokens + m->workspace_bytes_fixed() +
         m->workspace_bytes_per_seq() * m->max_seqs_per_step() +
         m->workspace_bytes_per_thread_per_ctx() * static_cast<uint64_t>(threads) * m->max_model_len();
}

MemoryFit fit_memory(const Plan& plan, uint64_t budget, int threads) {
  MemoryFit f;
  f.budget = budget;
  f.weights = plan.weights_size();
  const fb::MemoryPlan* m = plan.fb().memory();
  f.workspace = workspace_bytes(plan.fb(), m ? m->max_tokens_per_step() : 0, threads);
  uint64_t used = f.weights + f.workspace;
  f.kv_budget = budget > used ? budget - used : 0;
  const fb::KvSpec* kv = plan.fb().kv();
  uint64_t per_block = kv ? kv_bytes_per_token(plan.fb()) * kv->block_size() : 0;
  f.kv_blocks = per_block ? static_cast<int64_t>(f.kv_budget / per_block) : 0;
  f.tokens_in_cache = kv ? f.kv_blocks * kv->block_size() : 0;
  return f;
}

int64_t max_sequences(const fb::Plan& plan, const MemoryFit& fit, int64_t context) {
  const fb::KvSpec* kv = plan.kv();
  if (!kv || kv->block_size() <= 0 || context <= 0) return 0;
  int64_t blocks_per_seq = (context + kv->block_size() - 1) / kv->block_size();
  return fit.kv_blocks / blocks_per_seq;
}

std::optional<uint64_t> parse_bytes(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (!(v >= 0) || std::isinf(v)) return std::nullopt;
  std::string unit = text.substr(pos);
  static const std::map<std::string, double> units = {
      {"", 1},          {"B", 1},          {"KB", 1e3},      {"MB", 1e6},
      {"GB", 1e9},      {"TB", 1e12},      {"KiB", 1024.0},  {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"K", 1024.0}, {"M", 1048576.0},
      {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  double bytes = v * it->second;
  if (bytes > 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::string inspect_plan(const Plan& plan, bool as_json, std::optional<uint64_t> memory) {
  const fb::Plan& p = plan.fb();
  nlohmann::ordered_json j;
  j["schema"] = std::to_string(p.schema_major()) + "." + std::to_string(p.schema_minor());
  j["cpu_kernel_abi"] = p.cpu_kernel_abi();
  std::vector<std::string> feats;
  if (p.required_features())
    for (auto* f : *p.required_features()) feats.push_back(f->str());
  j["required_features"] = feats;
  if (const fb::CompileInfo* c = p.compile()) {
    std::vector<std::string> opts, passes, targets;
    if (c->options()) for (auto* s : *c->options()) opts.push_back(s->str());
    if (c->passes()) for (auto* s : *c->passes()) passes.push_back(s->str());
    if (c->targets()) for (auto* s : *c->targets()) targets.push_back(s->str());
    j["compiler"] = {{"version", str(c->compiler_version())}, {"command_line", opts},
                     {"passes", passes}, {"targets", targets}};
  }
  if (const fb::ModelInfo* m = p.model()) {
    nlohmann::ordered_json mj = {
        {"name", str(m->name())}, {"architecture", str(m->architecture())},
        {"source", str(m->source())}, {"hidden_size", m->hidden_size()},
        {"num_layers", m->num_layers()}, {"num_heads", m->num_heads()},
        {"num_kv_heads", m->num_kv_heads()}, {"head_dim", m->head_dim()},
        {"intermediate_size", m->intermediate_size()}, {"vocab_size", m->vocab_size()},
        {"max_position_embeddings", m->max_position_embeddings()},
        {"rms_norm_eps", m->rms_norm_eps()}, {"tie_word_embeddings", m->tie_word_embeddings()},
        {"sliding_window", m->sliding_window()}};
    if (const fb::RopeInfo* r = m->rope())
      mj["rope"] = {{"theta", r->theta()}, {"type", str(r->type())}, {"factor", r->factor()}};
    j["model"] = mj;
  }
  uint64_t total = 0;
  std::map<std::string, uint64_t> by_dtype;
  size_t count = p.tensors() ? p.tensors()->size() : 0;
  if (p.tensors())
    for (auto* t : *p.tensors()) {
      // Quantized tensors by format (int4-g32-f16-min ...), the rest by dtype.
      by_dtype[t->quant() && t->quant()->size() ? t->quant()->str()
                                                : std::string(fb::EnumNameDType(t->dtype()))] += t->size();
      total += t->size();
    }
  j["tensors"] = {{"count", count}, {"bytes", total}, {"bytes_by_dtype", by_dtype}};
  if (p.synthetic_weights()) j["synthetic_weights"] = {{"seed", p.synthetic_seed()}};
  j["cpu_kernels"] = p.cpu_kernels() && p.cpu_kernels()->size() ? p.cpu_kernels()->str() : "reference";
  std::map<std::string, int> images_per_target, max_registers, spilling;
  size_t kernels = p.kernels() ? p.kernels()->size() : 0;
  if (p.kernels())
    for (auto* k : *p.kernels())
      if (k->images())
        for (auto* im : *k->images()) {
          const std::string t = str(im->target());
          images_per_target[t]++;
          max_registers[t] = std::max(max_registers[t], im->registers());
          if (im->spill_bytes() > 0) spilling[t]++;
        }
  j["kernels"] = {{"count", kernels}, {"images_per_target", images_per_target},
                  {"max_registers_per_target", max_registers}, {"images_spilling_per_target", spilling},
                  {"cuda_min_driver_version", p.cuda_min_driver_version()}};
  if (const fb::Program* prog = plan.program("forward")) {
    std::map<std::string, int> ops;
    size_t with_kernel = 0, with_batched = 0, with_library = 0, with_dequant = 0, with_q8 = 0,
           with_q8_out = 0, with_rope = 0, with_silu = 0, with_norm = 0;
    for (auto* st : *prog->steps()) {
      ops[fb::EnumNameOpKind(st->op())]++;
      with_kernel += st->kernel() >= 0;
      with_batched += st->batched_kernel() >= 0;
      with_library += st->gemm_library() != fb::GemmLibrary::None;
      with_dequant += st->library_weight_kernel() >= 0;
      with_q8 += st->input_quant_kernel() >= 0;
      with_q8_out += st->quantized_output();
      with_rope += st->rope_kernel() >= 0;
      with_silu += st->silu_kernel() >= 0;
      with_norm += st->norm_kernel() >= 0;
    }
    j["program"] = {{"name", "forward"}, {"steps", prog->steps()->size()},
                    {"steps_with_gpu_kernel", with_kernel},
                    {"steps_with_tensor_core_kernel", with_batched},
                    {"steps_with_gemm_library", with_library},
                    {"steps_with_dequantized_library_weight", with_dequant},
                    {"steps_with_int8_activation_gemv", with_q8},
                    {"steps_writing_int8_activations", with_q8_out},
                    {"steps_with_rope_kernel", with_rope},
                    {"steps_with_silu_kernel", with_silu},
                    {"steps_with_norm_kernel", with_norm},
                    {"logits_summary_on_gpu", prog->logits_summary_kernel() >= 0},
                    {"sampling_on_gpu", prog->sampling_kernel() >= 0}, {"ops", ops}};
  }
  if (const fb::KvSpec* kv = p.kv())
    j["kv_cache"] = {{"num_layers", kv->num_layers()}, {"num_kv_heads", kv->num_kv_heads()},
                     {"head_dim", kv->head_dim()}, {"block_size", kv->block_size()},
                     {"dtype", fb::EnumNameDType(kv->dtype())}, {"layout", str(kv->layout())},
                     {"bytes_per_token", kv_bytes_per_token(p)}};
  if (const fb::MemoryPlan* m = p.memory())
    j["memory_plan"] = {{"arena_bytes_per_token", m->arena_bytes_per_token()},
                        {"max_tokens_per_step", m->max_tokens_per_step()},
                        {"max_seqs_per_step", m->max_seqs_per_step()},
                        {"max_model_len", m->max_model_len()}};
  if (p.tokenizer())
    j["tokenizer"] = {{"model", str(p.tokenizer()->model())}, {"pre", str(p.tokenizer()->pre())},
                      {"vocab", p.tokenizer()->tokens() ? p.tokenizer()->tokens()->size() : 0},
                      {"has_chat_template", p.tokenizer()->chat_template() &&
                                                p.tokenizer()->chat_template()->size() > 0}};
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  if (memory) {
    MemoryFit fit = fit_memory(plan, *memory, threads);
    nlohmann::ordered_json seqs;
    int64_t max_len = p.memory() ? p.memory()->max_model_len() : 0;
    for (int64_t ctx : {int64_t{512}, int64_t{2048}, int64_t{4096}, max_len})
      seqs[ctx == max_len ? "max(" + std::to_string(max_len) + ")" : std::to_string(ctx)] =
          max_sequences(p, fit, ctx);
    j["memory_fit"] = {{"budget", fit.budget}, {"weights", fit.weights},
                       {"workspace", fit.workspace}, {"workspace_threads", threads},
                       {"kv_budget", fit.kv_budget}, {"kv_blocks", fit.kv_blocks},
                       {"kv_tokens", fit.tokens_in_cache}, {"max_sequences_at_context", seqs}};
  }
  if (as_json) return j.dump(2) + "\n";

  std::string out;
  char buf[512];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
  };
  if (j.contains("model")) {
    auto& m = j["model"];
    line("model        %s (%s, from %s)\n", m["name"].get<std::string>().c_str(),
         m["architecture"].get<std::string>().c_str(), m["source"].get<std::string>().c_str());
    line("             hidden %lld, layers %lld, heads %lld/%lld kv, head_dim %lld, vocab %lld, context %lld\n",
         (long long)m["hidden_size"], (long long)m["num_layers"], (long long)m["num_heads"],
         (long long)m["num_kv_heads"], (long long)m["head_dim"], (long long)m["vocab_size"],
         (long long)m["max_position_embeddings"]);
  }
  line("schema       %s, cpu kernel abi %u\n", j["schema"].get<std::string>().c_str(), p.cpu_kernel_abi());
  if (j.contains("compiler")) {
    std::string cmd, passes;
    for (auto& s : j["compiler"]["command_line"]) cmd += (cmd.empty() ? "" : " ") + s.get<std::string>();
    for (auto& s : j["compiler"]["passes"]) passes += (passes.empty() ? "" : ", ") + s.get<std::string>();
    line("compiler     %s\n", j["compiler"]["version"].get<std::string>().c_str());
    out += "options      " + cmd + "\n";
    out += "passes       " + passes + "\n";
  }
  line("tensors      %zu, %s\n", count, human(total).c_str());
  for (auto& [dt, b] : by_dtype) line("             %-5s %s\n", dt.c_str(), human(b).c_str());
  if (j.contains("synthetic_weights"))
    line("             synthetic: generated at load from seed %llu (outputs are meaningless)\n",
         static_cast<unsigned long long>(j["synthetic_weights"]["seed"].get<uint64_t>()));
  line("cpu kernels  %s (numerical contract of quantized weights)\n",
       j["cpu_kernels"].get<std::string>().c_str());
  if (j.contains("program")) {
    std::string ops;
    for (auto& [k, n] : j["program"]["ops"].items()) ops += (ops.empty() ? "" : ", ") + k + " " + std::to_string(n.get<int>());
    line("program      forward: %zu steps (%s)\n", j["program"]["steps"].get<size_t>(), ops.c_str());
  }
  line("kernels      %zu\n", kernels);
  for (auto& [t, n] : images_per_target) line("             %-8s %d images\n", t.c_str(), n);
  if (p.cuda_min_driver_version() > 0)
    line("             need a CUDA driver for CUDA %d.%d or newer (llmrt devices checks this machine)\n",
         p.cuda_min_driver_version() / 1000, p.cuda_min_driver_version() % 1000 / 10);
  if (const fb::KvSpec* kv = p.kv())
    line("kv cache     %d layers x %d kv heads x %d head_dim, block %d, %s, %s per token\n",
         kv->num_layers(), kv->num_kv_heads(), kv->head_dim(), kv->block_size(),
         fb::EnumNameDType(kv->dtype()), human(kv_bytes_per_token(p)).c_str());
  if (const fb::MemoryPlan* m = p.memory())
    line("memory plan  arena %s per token; caps: %d tokens/step, %d seqs/step, context %d\n",
         human(m->arena_bytes_per_token()).c_str(), m->max_tokens_per_step(), m->max_seqs_per_step(),
         m->max_model_len());
  if (memory) {
    auto& f = j["memory_fit"];
    line("memory fit   budget %s = weights %s + workspace %s (%d threads) + KV %s\n",
         human(*memory).c_str(), human(f["weights"]).c_str(), human(f["workspace"]).c_str(), threads,
         human(f["kv_budget"]).c_str());
    line("             %lld KV blocks (%lld tokens)\n", (long long)f["kv_blocks"], (long long)f["kv_tokens"]);
    for (auto& [ctx, n] : f["max_sequences_at_context"].items())
      line("             context %-10s max %lld concurrent sequences\n", ctx.c_str(), (long long)n);
  }
  return out;
}

}  // namespace llmrt
