#include "runtime/cuda/launch_plan.h"

#include <algorithm>
#include <cstdio>

#include "runtime/plan/plan_inspect.h"
#include "runtime/sampler/logits_summary.h"

namespace llmrt::cuda {

uint64_t kernel_workspace_bytes(const fb::Plan& plan) {
  uint64_t most = 0;
  if (plan.kernels())
    for (const fb::Kernel* k : *plan.kernels()) most = std::max<uint64_t>(most, k->workspace_bytes());
  return most;
}

namespace {

// A positive decimal below 2^31 at the front of `s`; advances it.
bool take_number(std::string_view* s, int64_t* out) {
  size_t n = 0;
  int64_t v = 0;
  while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9' && n < 10) v = v * 10 + ((*s)[n++] - '0');
  if (n == 0 || v <= 0 || v >= (int64_t{1} << 31) || (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9'))
    return false;
  s->remove_prefix(n);
  *out = v;
  return true;
}

}  // namespace

StatusOr<GridRule> parse_grid_rule(std::string_view rule) {
  auto bad = [&] {
    return invalid_argument("kernel grid rule '" + std::string(rule) +
                            "' is not rows, rows*<k> or rows/<c>*<k>, optionally followed by ' + seqs*<s>' "
                            "and then ' x<m> when rows<=<r>' (k, c, s, m, r positive integers)");
  };
  std::string_view s = rule;
  if (s.substr(0, 4) != "rows") return bad();
  s.remove_prefix(4);
  GridRule r;
  if (!s.empty() && s[0] == '/') {
    s.remove_prefix(1);
    if (!take_number(&s, &r.per) || s.empty() || s[0] != '*') return bad();
  }
  if (!s.empty() && s[0] == '*') {
    s.remove_prefix(1);
    if (!take_number(&s, &r.times)) return bad();
  }
  if (s.substr(0, 8) == " + seqs*") {
    s.remove_prefix(8);
    if (!take_number(&s, &r.seq_times)) return bad();
  }
  if (!s.empty()) {  // " x<m> when rows<=<r>"
    if (s.substr(0, 2) != " x") return bad();
    s.remove_prefix(2);
    if (!take_number(&s, &r.small_times) || s.substr(0, 12) != " when rows<=") return bad();
    s.remove_prefix(12);
    if (!take_number(&s, &r.small_rows) || !s.empty()) return bad();
  }
  return r;
}

int64_t grid_size(const GridRule& rule, int64_t T, int64_t max_grid, int64_t S) {
  if (T <= 0) return 0;
  const int64_t chunks = (T + rule.per - 1) / rule.per;
  const int64_t times = rule.times * (T <= rule.small_rows ? rule.small_times : 1);  // both < 2^31
  // chunks * times (and S * seq_times) could overflow only past any real cap: compare by division.
  if (chunks > max_grid / times) return std::max<int64_t>(1, max_grid);
  int64_t grid = chunks * times;
  if (rule.seq_times > 0 && S > 0) {
    if (S > (max_grid - grid) / rule.seq_times) return std::max<int64_t>(1, max_grid);
    grid += S * rule.seq_times;
  }
  return std::max<int64_t>(1, std::min(grid, max_grid));
}

std::vector<int> graph_batch_sizes(int max_seqs) {
  std::vector<int> sizes;
  for (int s : {1, 2, 4})
    if (s <= max_seqs) sizes.push_back(s);
  for (int s = 8; s <= max_seqs; s += 8) sizes.push_back(s);
  if (max_seqs > 0 && (sizes.empty() || sizes.back() != max_seqs)) sizes.push_back(max_seqs);
  return sizes;
}

int graph_bucket(const std::vector<int>& sizes, int n) {
  auto it = std::lower_bound(sizes.begin(), sizes.end(), n);
  return it == sizes.end() ? -1 : *it;
}

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  else if (bytes >= (uint64_t(1) << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / 1024.0);
  return buf;
}

namespace {
// 0.9, not std::to_string's 0.900000.
std::string utilization_text(double u) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", u);
  return buf;
}
const fb::Program* forward_program(const fb::Plan& plan) {
  if (plan.programs())
    for (const fb::Program* p : *plan.programs())
      if (p->name() && p->name()->string_view() == "forward") return p;
  return nullptr;
}
}  // namespace

uint64_t gemm_library_bytes(const fb::Plan& plan, int max_tokens, uint64_t library_workspace) {
  const fb::Program* prog = forward_program(plan);
  if (!prog || !prog->steps()) return 0;
  bool any = false;
  uint64_t widest = 0;  // the widest input converted to bf16
  for (const fb::Step* st : *prog->steps()) {
    if (st->gemm_library() == fb::GemmLibrary::None) continue;
    any = true;
    if (st->library_input_kernel() < 0 || !st->inputs() || st->inputs()->size() == 0) continue;
    const int in = st->inputs()->Get(0);
    if (in >= 0 && prog->values() && in < static_cast<int>(prog->values()->size()))
      widest = std::max<uint64_t>(widest, static_cast<uint64_t>(prog->values()->Get(in)->width()));
  }
  if (!any) return 0;
  const uint64_t copy = (widest * static_cast<uint64_t>(max_tokens) * 2 + 255) / 256 * 256;  // bf16
  return library_workspace + copy + gemm_library_weight_bytes(plan);
}

uint64_t gemm_library_weight_bytes(const fb::Plan& plan) {
  const fb::Program* prog = forward_program(plan);
  if (!prog || !prog->steps() || !plan.tensors()) return 0;
  uint64_t largest = 0;
  for (const fb::Step* st : *prog->steps()) {
    if (st->gemm_library() == fb::GemmLibrary::None || st->library_weight_kernel() < 0 || !st->weights() ||
        st->weights()->size() == 0)
      continue;
    const int w = st->weights()->Get(0);
    if (w < 0 || w >= static_cast<int>(plan.tensors()->size())) continue;
    const fb::Tensor* t = plan.tensors()->Get(static_cast<flatbuffers::uoffset_t>(w));
    if (!t->shape() || t->shape()->size() != 2 || t->shape()->Get(0) <= 0 || t->shape()->Get(1) <= 0) continue;
    largest = std::max<uint64_t>(largest, static_cast<uint64_t>(t->shape()->Get(0)) *
                                              static_cast<uint64_t>(t->shape()->Get(1)) * 2);
  }
  return (largest + 255) / 256 * 256;
}

uint64_t quant_input_bytes(const fb::Plan& plan, int max_tokens) {
  const fb::Program* prog = forward_program(plan);
  if (!prog || !prog->steps() || !prog->values()) return 0;
  uint64_t row = 0;
  bool silu = false;
  for (const fb::Step* st : *prog->steps()) {
    silu |= st->silu_kernel() >= 0;
    // A GEMV's int8 input, written by its quantize_q8 kernel or by the step producing it.
    const flatbuffers::Vector<int32_t>* v = st->quantized_output() ? st->outputs() : st->inputs();
    if ((st->input_quant_kernel() < 0 && !st->quantized_output()) || !v || v->size() == 0) continue;
    const int id = v->Get(0);
    if (id < 0 || id >= static_cast<int>(prog->values()->size())) continue;  // (the plan reader refuses it)
    const uint64_t k = static_cast<uint64_t>(prog->values()->Get(static_cast<flatbuffers::uoffset_t>(id))->width());
    row = std::max<uint64_t>(row, q8_row_bytes(k));
  }
  // A silu kernel (Step.silu_kernel) writes the silu_mul's int8 rows after those of its own
  // input, which it reads meanwhile: room for both.
  silu = silu && row > 0;
  if (silu) row *= 2;
  return (row * static_cast<uint64_t>(max_tokens) + 255) / 256 * 256 + (silu ? 256 : 0);
}

StatusOr<DeviceMemoryPlan> plan_device_memory(const fb::Plan& plan, const DeviceInfo& device,
                                              double utilization, int max_tokens, int max_seqs,
                                              uint64_t library) {
  if (!(utilization > 0.0 && utilization <= 1.0))
    return invalid_argument("--memory-utilization must be in (0, 1], got " + utilization_text(utilization));
  const fb::MemoryPlan* mem = plan.memory();
  const fb::KvSpec* kv = plan.kv();
  if (!mem || !kv) return invalid_argument("plan has no memory plan or KV spec");
  if (max_tokens <= 0 || max_seqs <= 0 || max_tokens > mem->max_tokens_per_step() ||
      max_seqs > mem->max_seqs_per_step())
    return invalid_argument("step capacity " + std::to_string(max_tokens) + " tokens / " +
                            std::to_string(max_seqs) + " sequences outside the plan's caps (" +
                            std::to_string(mem->max_tokens_per_step()) + " / " +
                            std::to_string(mem->max_seqs_per_step()) + ")");
  if (kv->block_size() <= 0 || kv->num_layers() <= 0 || kv->num_kv_heads() <= 0 || kv->head_dim() <= 0)
    return invalid_argument("plan's KV spec has a non-positive size");
  DeviceMemoryPlan m;
  m.budget = static_cast<uint64_t>(utilization * static_cast<double>(device.total_memory));
  if (plan.tensors())
    for (const fb::Tensor* t : *plan.tensors()) m.weights += t->size();
  const uint64_t T = static_cast<uint64_t>(max_tokens), S = static_cast<uint64_t>(max_seqs);
  m.activations = mem->arena_bytes_per_token() * T + mem->workspace_bytes_per_seq() * S +
                  mem->workspace_bytes_fixed() + kernel_workspace_bytes(plan) + quant_input_bytes(plan, max_tokens);
  const uint64_t vocab = plan.model() ? static_cast<uint64_t>(plan.model()->vocab_size()) : 0;
  const uint64_t max_len = static_cast<uint64_t>(mem->max_model_len());
  const uint64_t blocks_per_seq = (max_len + kv->block_size() - 1) / kv->block_size();
  // tokens, positions (i32), kv slots (i64), query_start, context lens, block tables, logit rows
  // (i32), the logits (f32, one row per token at most) and their summaries.
  m.batch = T * (4 + 4 + 8 + 4) + (S + 1) * 4 + S * 4 + S * blocks_per_seq * 4 + T * vocab * 4 +
            T * sizeof(LogitsSummary);
  // Every layer's K and V of block_size tokens (plan_inspect.h: int8 codes with one f32 scale
  // per head row, else head_dim elements of the cache's type).
  m.kv_block_bytes = kv_bytes_per_token(plan) * kv->block_size();
  m.library = library;
  const uint64_t fixed = m.weights + m.activations + m.batch + m.library;
  const uint64_t need_kv = blocks_per_seq * m.kv_block_bytes;
  if (fixed + need_kv > m.budget)
    return resource_exhausted(
        "the plan does not fit " + device.name + " at --memory-utilization " + utilization_text(utilization) +
        ": budget " + format_bytes(m.budget) + " of " + format_bytes(device.total_memory) + "; weights " +
        format_bytes(m.weights) + ", activations " + format_bytes(m.activations) + " (" + std::to_string(max_tokens) +
        " tokens per step), batch buffers and logits " + format_bytes(m.batch) +
        (m.library ? ", GEMM library " + format_bytes(m.library) : std::string()) + ", KV cache for one sequence of " +
        std::to_string(max_len) + " tokens " + format_bytes(need_kv));
  m.kv_blocks = static_cast<int64_t>((m.budget - fixed) / m.kv_block_bytes);
  m.kv = static_cast<uint64_t>(m.kv_blocks) * m.kv_block_bytes;
  return m;
}

}  // namespace llmrt::cuda
