#include "runtime/engine/cpu_executor.h"

#include <algorithm>
#include <thread>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "runtime/cpu/kernels.h"
#include "runtime/engine/batch_check.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/engine/profiler.h"

namespace llmrt {

struct CpuExecutor::ValueInfo {
  fb::RowKind rows = fb::RowKind::Unknown;
  fb::DType dtype = fb::DType::Unknown;
  int64_t width = 0;
  uint64_t offset_per_row = 0;
  bool in_arena = false;  // false for the token/position inputs and the logits output
  float* ptr = nullptr;
};

struct CpuExecutor::Step {
  fb::OpKind op = fb::OpKind::Unknown;
  std::string where;            // "step 12 (Linear 'layers.0.q_proj')" for errors
  std::vector<int> in, out;     // value ids
  const float* w = nullptr;     // main weight
  const float* bias = nullptr;  // optional second weight
  bool quantized = false;       // main weight is qw (cpu_row_groups), not w
  cpu::QuantMatrix qw;
  bool half = false;            // main weight is hw (dense f16 / bf16), not w
  cpu::HalfMatrix hw;
  int64_t k = 0, n = 0;         // linear/logits: in, out widths; norms: dim, group
  float eps = 0.0f, scale = 1.0f;
  int layer = 0, num_heads = 0, head_dim = 0, window = 0;
  bool interleaved = false;
  std::vector<float> inv_freq;
  std::vector<int64_t> sizes;
  std::vector<int32_t> perm;    // PermuteColumns
  uint64_t weight_bytes = 0;    // read whole per call (step_weight_bytes), for profiles
};

namespace {

constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 40;
constexpr uint64_t kMaxKvFloats = uint64_t{1} << 38;

const char* op_name(fb::OpKind op) {
  const char* name = fb::EnumNameOpKind(op);
  return name && *name ? name : "?";
}

std::string str(int64_t v) { return std::to_string(v); }

// Ids of a list, with trailing -1 entries dropped.
std::vector<int> trimmed(const flatbuffers::Vector<int32_t>* v) {
  std::vector<int> out;
  if (v) out.assign(v->begin(), v->end());
  while (!out.empty() && out.back() == -1) out.pop_back();
  return out;
}

}  // namespace

void CpuExecutor::FreeDeleter::operator()(void* p) const { std::free(p); }
void KvUnmapDeleter::operator()(float* p) const {
  if (p) munmap(p, bytes);
}

CpuExecutor::CpuExecutor() = default;
CpuExecutor::~CpuExecutor() = default;

int CpuExecutor::num_threads() const { return pool_->num_threads(); }

size_t CpuExecutor::workspace_bytes() const {
  const size_t quant = quant_scratch_ ? quant_scratch_->bytes() : 0;
  return arena_bytes_ + attn_scratch_.size() * sizeof(float) +
         seq_of_row_.size() * sizeof(int32_t) + quant;
}

const char* CpuExecutor::cpu_kernels() const {
  return cpu::contract_name(static_cast<cpu::CpuContract>(contract_));
}

StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Plan& plan,
                                                           const CpuExecutorOptions& options) {
  std::unique_ptr<CpuExecutor> ex(new CpuExecutor());
  Status st = ex->init(plan, options);
  if (!st.ok()) return st.with_context("CPU executor");
  return ex;
}

Status CpuExecutor::init(const Plan& plan, const CpuExecutorOptions& opt) {
  const fb::Plan& p = plan.fb();
  const fb::Program* prog = plan.program("forward");
  if (!prog) return not_found("plan has no 'forward' program");
  const fb::KvSpec* kv = p.kv();
  const fb::MemoryPlan* mem = p.memory();
  if (!kv) return invalid_argument("plan has no KV-cache spec");
  if (!mem) return invalid_argument("plan has no memory plan");

  // KV spec.
  if (kv->num_layers() <= 0 || kv->num_kv_heads() <= 0 || kv->head_dim() <= 0 ||
      kv->block_size() <= 0 || kv->num_layers() > 4096 || kv->num_kv_heads() > 4096 ||
      kv->head_dim() > 1024 || kv->block_size() > 65536)
    return invalid_argument("KV spec has bad sizes (layers " + str(kv->num_layers()) +
                            ", kv heads " + str(kv->num_kv_heads()) + ", head_dim " +
                            str(kv->head_dim()) + ", block_size " + str(kv->block_size()) + ")");
  if (kv_elem_bytes(kv->dtype()) == 0)
    return unimplemented(std::string("KV cache dtype ") + fb::EnumNameDType(kv->dtype()) +
                         " (the CPU backend supports F32, BF16, F16, F8E4M3 and I8)");
  kv_dtype_ = kv->dtype();
  kv_elem_bytes_ = kv_elem_bytes(kv_dtype_);
  if (kv->layout() && kv->layout()->size() != 0 && kv->layout()->str() != "block_head_slot_dim")
    return unimplemented("KV cache layout '" + kv->layout()->str() + "'");
  num_layers_ = kv->num_layers();
  num_kv_heads_ = kv->num_kv_heads();
  head_dim_ = kv->head_dim();
  block_size_ = kv->block_size();

  // Caps.
  if (mem->max_tokens_per_step() <= 0 || mem->max_seqs_per_step() <= 0)
    return invalid_argument("memory plan has no max_tokens_per_step / max_seqs_per_step");
  if (opt.threads < 0 || opt.threads > 1024)
    return invalid_argument("threads must be in [0, 1024], got " + str(opt.threads));
  if (opt.max_tokens_per_step < 0 || opt.max_tokens_per_step > mem->max_tokens_per_step())
    return invalid_argument("max_tokens_per_step " + str(opt.max_tokens_per_step) +
                            " exceeds the plan's cap of " + str(mem->max_tokens_per_step()));
  if (opt.max_seqs_per_step < 0 || opt.max_seqs_per_step > mem->max_seqs_per_step())
    return invalid_argument("max_seqs_per_step " + str(opt.max_seqs_per_step) +
                            " exceeds the plan's cap of " + str(mem->max_seqs_per_step()));
  max_tokens_ = opt.max_tokens_per_step ? opt.max_tokens_per_step : mem->max_tokens_per_step();
  max_seqs_ = opt.max_seqs_per_step ? opt.max_seqs_per_step : mem->max_seqs_per_step();
  max_model_len_ = mem->max_model_len();
  if (max_model_len_ <= 0 && p.model()) max_model_len_ = p.model()->max_position_embeddings();
  if (max_model_len_ <= 0) return invalid_argument("plan has no max_model_len");
  // 16M tokens is far beyond any released model; larger values are corruption, and would size
  // the per-thread attention scratch past what any machine has.
  if (max_model_len_ > (1 << 24))
    return invalid_argument("plan max_model_len " + str(max_model_len_) + " is out of range (max 16777216)");
  if (opt.num_kv_blocks < 0) return invalid_argument("num_kv_blocks must be >= 0");
  num_kv_blocks_ = opt.num_kv_blocks
                       ? opt.num_kv_blocks
                       : (max_model_len_ + block_size_ - 1) / block_size_;

  // Values.
  const int num_values = prog->values() ? static_cast<int>(prog->values()->size()) : 0;
  values_.resize(num_values);
  const uint64_t row_bytes = mem->arena_bytes_per_token();
  for (int i = 0; i < num_values; ++i) {
    const fb::Value* v = prog->values()->Get(i);
    if (static_cast<int>(v->id()) != i)
      return invalid_argument("value " + str(i) + " has id " + str(v->id()) + " (must be dense)");
    ValueInfo& info = values_[i];
    info.rows = v->rows();
    info.dtype = v->dtype();
    info.width = v->width();
    info.offset_per_row = v->offset_per_row();
    if (info.width <= 0 || info.width > (int64_t{1} << 32))
      return invalid_argument("value " + str(i) + " has bad width " + str(info.width));
    if (info.rows != fb::RowKind::Tokens && info.rows != fb::RowKind::LogitRows)
      return invalid_argument("value " + str(i) + " has no row kind");
  }
  token_input_ = prog->token_input();
  position_input_ = prog->position_input();
  output_ = prog->output();
  auto valid_id = [&](int id) { return id >= 0 && id < num_values; };
  if (!valid_id(token_input_) || !valid_id(position_input_) || !valid_id(output_) ||
      token_input_ == position_input_ || output_ == token_input_ || output_ == position_input_)
    return invalid_argument("program inputs/output are not distinct valid value ids");
  for (int id : {token_input_, position_input_}) {
    const ValueInfo& v = values_[id];
    if (v.dtype != fb::DType::I32 || v.width != 1 || v.rows != fb::RowKind::Tokens)
      return invalid_argument("program input value " + str(id) + " must be I32 [T, 1]");
  }
  if (values_[output_].rows != fb::RowKind::LogitRows || values_[output_].dtype != fb::DType::F32)
    return invalid_argument("program output value " + str(output_) + " must be F32 [L, vocab]");
  for (int i = 0; i < num_values; ++i) {
    ValueInfo& v = values_[i];
    if (i == token_input_ || i == position_input_ || i == output_) continue;
    if (v.dtype != fb::DType::F32)
      return unimplemented("value " + str(i) + " has dtype " + fb::EnumNameDType(v.dtype) +
                           " (CPU activations are F32)");
    const uint64_t bytes = static_cast<uint64_t>(v.width) * sizeof(float);
    if (v.offset_per_row > row_bytes || bytes > row_bytes - v.offset_per_row)
      return invalid_argument("value " + str(i) + " (offset " + str(v.offset_per_row) +
                              ", width " + str(v.width) + ") lies outside the arena of " +
                              str(row_bytes) + " bytes per token");
    v.in_arena = true;
  }

  // Numerical contract of quantized kernels: the option, else the plan's.
  {
    std::string c = opt.cpu_kernels;
    if (c.empty() && p.cpu_kernels()) c = p.cpu_kernels()->str();
    if (c.empty()) c = "reference";
    StatusOr<cpu::CpuContract> contract = cpu::parse_contract(c);
    if (!contract.ok()) return contract.status();
    contract_ = static_cast<uint8_t>(*contract);
  }

  // Steps.
  const int num_steps = prog->steps() ? static_cast<int>(prog->steps()->size()) : 0;
  if (num_steps == 0) return invalid_argument("forward program has no steps");
  steps_.resize(num_steps);
  for (int i = 0; i < num_steps; ++i) {
    RETURN_IF_ERROR(decode_step(plan, *prog->steps()->Get(i), i, &steps_[i]));
    steps_[i].weight_bytes = step_weight_bytes(plan.fb(), *prog->steps()->Get(i));
  }
  RETURN_IF_ERROR(check_memory_plan());
  if (embedding_rows_ <= 0) return invalid_argument("forward program has no Embedding step");

  // Allocation.
  if (row_bytes == 0 || row_bytes > kMaxArenaBytes / static_cast<uint64_t>(max_tokens_))
    return invalid_argument("memory plan: arena of " + str(row_bytes) + " bytes per token x " +
                            str(max_tokens_) + " tokens is empty or too large");
  arena_bytes_ = static_cast<size_t>((row_bytes * max_tokens_ + 63) / 64 * 64);
  if (opt.max_memory_bytes) {
    // Everything create() allocates, checked before allocating any of it.
    const uint64_t threads = opt.threads > 0 ? static_cast<uint64_t>(opt.threads)
                                             : std::max(1u, std::thread::hardware_concurrency());
    const long double need =
        static_cast<long double>(arena_bytes_) +
        static_cast<long double>(kv_bytes_per_token(plan.fb())) * block_size_ * num_kv_blocks_ +
        static_cast<long double>(threads) * max_model_len_ * 4;
    if (need > static_cast<long double>(opt.max_memory_bytes))
      return resource_exhausted("the plan needs " + str(static_cast<int64_t>(std::min<long double>(need, 9e18))) +
                                " bytes of workspace and KV cache, more than the limit of " +
                                str(static_cast<int64_t>(opt.max_memory_bytes)) + " bytes");
  }
  int64_t quant_k_max = 0;
  for (const Step& st : steps_)
    if (st.quantized || st.half) quant_k_max = std::max(quant_k_max, st.k);
  if (quant_k_max > 0) {
    quant_scratch_ = std::make_unique<cpu::QuantScratch>();
    const int threads = opt.threads > 0 ? opt.threads
                                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    quant_scratch_->ensure(max_tokens_, quant_k_max, threads);
  }
  arena_.reset(static_cast<float*>(std::aligned_alloc(64, arena_bytes_)));
  if (!arena_) return resource_exhausted("cannot allocate an arena of " + str(arena_bytes_) + " bytes");
  std::memset(arena_.get(), 0, arena_bytes_);
  for (ValueInfo& v : values_)
    if (v.in_arena)
      v.ptr = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(arena_.get()) +
                                       v.offset_per_row * static_cast<uint64_t>(max_tokens_));
  const uint64_t per_block = static_cast<uint64_t>(num_kv_heads_) * block_size_ * head_dim_;
  const uint64_t kv_floats = per_block * num_kv_blocks_ * 2 * num_layers_;
  if (kv_floats / num_layers_ / 2 / per_block != static_cast<uint64_t>(num_kv_blocks_) ||
      kv_floats > kMaxKvFloats)
    return resource_exhausted("KV cache of " + str(num_kv_blocks_) + " blocks is too large");
  // One layer: f32 (bf16, f16, fp8) K then V; int8 K codes, V codes, then K and V scales (one f32 per
  // head row).
  const uint64_t rows = per_block / head_dim_ * num_kv_blocks_;
  kv_layer_bytes_ = kv_i8() ? ((2 * rows * head_dim_ + 63) / 64 * 64 + 2 * rows * sizeof(float) + 63) / 64 * 64
                            : (2 * rows * head_dim_ * kv_elem_bytes_ + 63) / 64 * 64;
  const uint64_t kv_bytes = kv_layer_bytes_ * num_layers_;
  // Anonymous pages read as zero and are committed on first write, so a large pool costs
  // resident memory only as sequences fill it.
  void* kv_map = mmap(nullptr, kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (kv_map == MAP_FAILED) return resource_exhausted("cannot map a KV cache of " + str(kv_bytes) + " bytes");
  kv_cache_.reset(static_cast<float*>(kv_map));
  kv_cache_.get_deleter().bytes = kv_bytes;
  kv_bytes_ = kv_bytes;
  ThreadPool::Options po;
  po.threads = opt.threads;
  po.pin = opt.pin_threads;
  pool_ = std::make_unique<ThreadPool>(po);
  attn_scratch_.assign(static_cast<size_t>(pool_->num_threads()) * attn_stride(), 0.0f);
  seq_of_row_.assign(max_tokens_, -1);
  return ok_status();
}

Status CpuExecutor::decode_step(const Plan& plan, const fb::Step& s, int index, Step* st) {
  st->op = s.op();
  st->where = "step " + str(index) + " (" + op_name(s.op()) +
              (s.name() ? " '" + s.name()->str() + "'" : std::string()) + ")";
  const std::string& where = st->where;
  st->in = trimmed(s.inputs());
  st->out = trimmed(s.outputs());
  const std::vector<int> weights = trimmed(s.weights());
  const int num_values = static_cast<int>(values_.size());
  for (int id : st->in)
    if (id < 0 || id >= num_values) return invalid_argument(where + ": bad input value id " + str(id));
  for (int id : st->out)
    if (id < 0 || id >= num_values || id == token_input_ || id == position_input_)
      return invalid_argument(where + ": bad output value id " + str(id));

  auto arity = [&](size_t ins, size_t outs) -> Status {
    if (st->in.size() != ins || st->out.size() != outs)
      return invalid_argument(where + ": expected " + str(ins) + " inputs and " + str(outs) +
                              " outputs, got " + str(st->in.size()) + " and " +
                              str(st->out.size()));
    return ok_status();
  };
  auto width = [&](int id) { return values_[id].width; };
  auto is_act = [&](int id) {  // an F32 [T, w] activation
    return id != token_input_ && id != position_input_ && id != output_ &&
           values_[id].rows == fb::RowKind::Tokens;
  };
  auto require_acts = [&](std::initializer_list<int> ids) -> Status {
    for (int id : ids)
      if (!is_act(id))
        return invalid_argument(where + ": value " + str(id) + " must be an F32 [T, width] activation");
    return ok_status();
  };
  auto same_width = [&](int a, int b) -> Status {
    if (width(a) != width(b))
      return invalid_argument(where + ": widths differ (value " + str(a) + ": " + str(width(a)) +
                              ", value " + str(b) + ": " + str(width(b)) + ")");
    return ok_status();
  };
  // Weight `i` of the step, F32 with the given shape (-1 = any).
  auto weight = [&](size_t i, std::initializer_list<int64_t> shape, const float** out,
                    bool optional = false) -> Status {
    *out = nullptr;
    if (i >= weights.size() || weights[i] == -1) {
      if (optional) return ok_status();
      return invalid_argument(where + ": missing weight " + str(i));
    }
    const int ti = weights[i];
    const auto* tensors = plan.fb().tensors();
    if (!tensors || ti < 0 || ti >= static_cast<int>(tensors->size()))
      return invalid_argument(where + ": weight index " + str(ti) + " out of range");
    const fb::Tensor* t = tensors->Get(ti);
    const std::string tname = t->name() ? t->name()->str() : "?";
    if (t->dtype() != fb::DType::F32)
      return unimplemented(where + ": weight '" + tname + "' has dtype " +
                           fb::EnumNameDType(t->dtype()) + " (the CPU backend reads F32)");
    if (t->quant() && t->quant()->size() != 0)
      return unimplemented(where + ": weight '" + tname + "' is quantized (" + t->quant()->str() + ")");
    std::vector<int64_t> want(shape);
    const auto* dims = t->shape();
    bool ok = dims && dims->size() == want.size();
    uint64_t numel = 1;
    for (size_t d = 0; ok && d < want.size(); ++d) {
      const int64_t got = dims->Get(static_cast<flatbuffers::uoffset_t>(d));
      if (got <= 0 || (want[d] >= 0 && got != want[d])) ok = false;
      else numel *= static_cast<uint64_t>(got);
    }
    if (!ok) {
      auto fmt = [](auto begin, auto end) {
        std::string r = "[";
        for (auto it = begin; it != end; ++it) {
          if (it != begin) r.push_back(',');
          r.append(*it < 0 ? std::string("?") : str(*it));
        }
        r.push_back(']');
        return r;
      };
      const std::string got = dims ? fmt(dims->begin(), dims->end()) : std::string("[]");
      return invalid_argument(where + ": weight '" + tname + "' has shape " + got +
                              ", expected " + fmt(want.begin(), want.end()));
    }
    if (t->size() != numel * sizeof(float))
      return invalid_argument(where + ": weight '" + tname + "' size does not match its shape");
    *out = reinterpret_cast<const float*>(plan.tensor_data(ti));
    if (!*out) return invalid_argument(where + ": weight '" + tname + "' has no data");
    return ok_status();
  };
  // Weight 0 of a Linear/Logits/Embedding step: F32 [n, k] (n = -1: any) or quantized
  // (a quant_format.h format in the cpu_row_groups or cpu_interleaved8 layout).
  auto matrix = [&](int64_t n, int64_t k) -> Status {
    if (weights.empty() || weights[0] == -1) return invalid_argument(where + ": missing weight 0");
    const auto* tensors = plan.fb().tensors();
    const int ti = weights[0];
    if (!tensors || ti < 0 || ti >= static_cast<int>(tensors->size()))
      return invalid_argument(where + ": weight index " + str(ti) + " out of range");
    const fb::Tensor* t = tensors->Get(ti);
    const std::string tname = t->name() ? t->name()->str() : "?";
    const bool quantized = t->quant() && t->quant()->size() != 0;
    // A [rows, k] matrix stored as `what` (rows = n unless n < 0).
    const auto* dims = t->shape();
    auto check_dims = [&](const char* what) -> Status {
      if (!dims || dims->size() != 2 || dims->Get(0) <= 0 || (n >= 0 && dims->Get(0) != n) ||
          dims->Get(1) != k)
        return invalid_argument(where + ": " + what + "weight '" + tname + "' does not have shape [" +
                                (n >= 0 ? str(n) : std::string("?")) + "," + str(k) + "]");
      return ok_status();
    };
    if (!quantized && (t->dtype() == fb::DType::F16 || t->dtype() == fb::DType::BF16)) {
      RETURN_IF_ERROR(check_dims(""));
      if (t->size() != static_cast<uint64_t>(dims->Get(0)) * static_cast<uint64_t>(k) * 2)
        return invalid_argument(where + ": weight '" + tname + "' size does not match its shape");
      st->hw.data = reinterpret_cast<const uint16_t*>(plan.tensor_data(ti));
      if (!st->hw.data) return invalid_argument(where + ": weight '" + tname + "' has no data");
      st->hw.bf16 = t->dtype() == fb::DType::BF16;
      st->hw.n = dims->Get(0);
      st->hw.k = k;
      st->half = true;
      return ok_status();
    }
    if (!quantized) return weight(0, {n, k}, &st->w);
    StatusOr<quant::Format> f = quant::parse_format(t->quant()->str());
    if (!f.ok()) return f.status().with_context(where + ": weight '" + tname + "'");
    if (t->dtype() != (f->bits == 8 ? fb::DType::I8 : f->bits == 5 ? fb::DType::I5 : fb::DType::I4))
      return invalid_argument(where + ": weight '" + tname + "' has dtype " +
                              fb::EnumNameDType(t->dtype()) + " but format " + t->quant()->str());
    StatusOr<quant::Layout> layout = quant::parse_layout(t->layout() ? t->layout()->str() : std::string());
    if (!layout.ok()) return unimplemented(where + ": weight '" + tname + "': " + std::string(layout.status().message()));
    RETURN_IF_ERROR(check_dims("quantized "));
    StatusOr<int64_t> rb = quant::row_bytes(*f, k);
    if (!rb.ok()) return rb.status().with_context(where + ": weight '" + tname + "'");
    const int64_t rows = dims->Get(0);
    if (rows > (int64_t{1} << 40) / *rb)
      return invalid_argument(where + ": quantized weight '" + tname + "' is too large");
    const uint64_t need = *quant::tensor_bytes(*f, *layout, rows, k);
    if (t->size() != need)
      return invalid_argument(where + ": quantized weight '" + tname + "' has " + str(t->size()) +
                              " bytes, its shape, format and layout need " + str(need));
    st->qw.data = plan.tensor_data(ti);
    if (!st->qw.data) return invalid_argument(where + ": weight '" + tname + "' has no data");
    st->qw.format = *f;
    st->qw.n = rows;
    st->qw.k = k;
    st->qw.row_bytes = *rb;
    st->qw.layout = *layout;
    st->quantized = true;
    return ok_status();
  };
  auto int_param = [&](const char* key, int64_t* v, bool required = true,
                       int64_t dflt = 0) -> Status {
    const fb::Param* p = find_param(s, key);
    if (!p) {
      if (required) return invalid_argument(where + ": missing param '" + key + "'");
      *v = dflt;
      return ok_status();
    }
    // Integer params are sizes, counts and positions: bounding them keeps every product of two
    // of them inside int64 (a corrupted plan must give an error, never overflow).
    if (p->i() < -(int64_t{1} << 31) || p->i() > (int64_t{1} << 31))
      return invalid_argument(where + ": param '" + key + "' = " + str(p->i()) + " is out of range");
    *v = p->i();
    return ok_status();
  };
  auto float_param = [&](const char* key, double* v, bool required = true,
                         double dflt = 0) -> Status {
    const fb::Param* p = find_param(s, key);
    if (!p) {
      if (required) return invalid_argument(where + ": missing param '" + key + "'");
      *v = dflt;
      return ok_status();
    }
    *v = p->f();
    if (!std::isfinite(*v)) return invalid_argument(where + ": param '" + key + "' is not finite");
    return ok_status();
  };
  auto string_param = [&](const char* key, std::string* v, const char* dflt) {
    const fb::Param* p = find_param(s, key);
    *v = p && p->s() ? p->s()->str() : dflt;
  };
  auto eps_param = [&]() -> Status {
    double eps = 0;
    RETURN_IF_ERROR(float_param("eps", &eps));
    if (!(eps > 0.0) || eps > 1.0) return invalid_argument(where + ": eps must be in (0, 1]");
    st->eps = static_cast<float>(eps);
    return ok_status();
  };
  // Cache ops: layer and head geometry against the KV spec, plus the optional layout params.
  auto cache_params = [&](bool attention) -> Status {
    int64_t layer = 0, kvh = 0, hd = 0;
    RETURN_IF_ERROR(int_param("layer", &layer));
    RETURN_IF_ERROR(int_param("num_kv_heads", &kvh));
    RETURN_IF_ERROR(int_param("head_dim", &hd));
    if (layer < 0 || layer >= num_layers_)
      return invalid_argument(where + ": layer " + str(layer) + " outside the KV cache's " +
                              str(num_layers_) + " layers");
    if (kvh != num_kv_heads_ || hd != head_dim_)
      return invalid_argument(where + ": num_kv_heads/head_dim " + str(kvh) + "/" + str(hd) +
                              " differ from the KV spec's " + str(num_kv_heads_) + "/" +
                              str(head_dim_));
    int64_t bs = 0;
    RETURN_IF_ERROR(int_param("block_size", &bs, false, block_size_));
    if (bs != block_size_)
      return invalid_argument(where + ": block_size " + str(bs) + " differs from the KV spec's " +
                              str(block_size_));
    std::string layout;
    string_param("layout", &layout, "block_head_slot_dim");
    if (layout != "block_head_slot_dim") return unimplemented(where + ": KV layout '" + layout + "'");
    std::string kv_dtype;
    string_param("kv_dtype", &kv_dtype, "f32");
    const KvCacheType* step_type = kv_cache_type(kv_dtype);
    if (!step_type) return unimplemented(where + ": kv_dtype '" + kv_dtype + "'");
    if (step_type->dtype != kv_dtype_)
      return invalid_argument(where + ": kv_dtype '" + kv_dtype + "' differs from the KV spec's " +
                              fb::EnumNameDType(kv_dtype_));
    st->layer = static_cast<int>(layer);
    st->head_dim = static_cast<int>(hd);
    return ok_status();
  };

  // Rope and RopeKvStore: inputs [x, positions], one output; num_heads, head_dim and the inverse
  // frequencies.
  auto rope_params = [&]() -> Status {
    RETURN_IF_ERROR(arity(2, 1));
    if (st->in[1] != position_input_)
      return invalid_argument(where + ": the second input must be the program's position input");
    RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
    int64_t heads = 0, hd = 0;
    RETURN_IF_ERROR(int_param("num_heads", &heads));
    RETURN_IF_ERROR(int_param("head_dim", &hd));
    if (heads <= 0 || hd <= 0 || heads > INT32_MAX || hd > cpu::kMaxRopeHeadDim)
      return invalid_argument(where + ": num_heads " + str(heads) + " / head_dim " + str(hd) + " out of range");
    cpu::RopeConfig rc;
    rc.head_dim = static_cast<int>(hd);
    RETURN_IF_ERROR(float_param("theta", &rc.theta));
    std::string style, type;
    string_param("style", &style, "neox");
    if (style != "neox" && style != "interleaved")
      return unimplemented(where + ": rope style '" + style + "' (expected neox or interleaved)");
    rc.interleaved = style == "interleaved";
    string_param("rope_type", &type, "default");
    auto parsed = cpu::parse_rope_type(type);
    if (!parsed.ok()) return parsed.status().with_context(where);
    rc.type = *parsed;
    if (rc.type != cpu::RopeConfig::Type::kDefault) RETURN_IF_ERROR(float_param("factor", &rc.factor));
    if (rc.type == cpu::RopeConfig::Type::kLlama3) {
      RETURN_IF_ERROR(float_param("low_freq_factor", &rc.low_freq_factor));
      RETURN_IF_ERROR(float_param("high_freq_factor", &rc.high_freq_factor));
      RETURN_IF_ERROR(int_param("original_max_position", &rc.original_max_position));
    }
    auto inv = cpu::rope_inv_freq(rc);
    if (!inv.ok()) return inv.status().with_context(where);
    st->inv_freq = std::move(inv).value();
    st->num_heads = static_cast<int>(heads);
    st->head_dim = static_cast<int>(hd);
    st->interleaved = rc.interleaved;
    return ok_status();
  };

  switch (s.op()) {
    case fb::OpKind::Embedding: {
      RETURN_IF_ERROR(arity(1, 1));
      if (st->in[0] != token_input_)
        return invalid_argument(where + ": the input must be the program's token input");
      RETURN_IF_ERROR(require_acts({st->out[0]}));
      RETURN_IF_ERROR(matrix(-1, width(st->out[0])));
      const fb::Tensor* t = plan.fb().tensors()->Get(weights[0]);
      const int64_t rows = t->shape()->Get(0);
      if (rows > INT32_MAX) return invalid_argument(where + ": embedding table too large");
      embedding_rows_ = embedding_rows_ ? std::min<int>(embedding_rows_, rows) : static_cast<int>(rows);
      st->n = width(st->out[0]);
      st->k = st->n;  // sizes the quantized kernels' scratch when the table is quantized
      return ok_status();
    }
    case fb::OpKind::RmsNorm: {
      RETURN_IF_ERROR(arity(1, 1));
      RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
      RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
      RETURN_IF_ERROR(weight(0, {-1}, &st->w));
      st->k = width(st->in[0]);
      st->n = plan.fb().tensors()->Get(weights[0])->shape()->Get(0);
      if (st->k % st->n != 0)
        return invalid_argument(where + ": width " + str(st->k) + " is not a multiple of the norm group " + str(st->n));
      return eps_param();
    }
    case fb::OpKind::AddRmsNorm: {
      RETURN_IF_ERROR(arity(2, 2));
      RETURN_IF_ERROR(require_acts({st->in[0], st->in[1], st->out[0], st->out[1]}));
      for (int id : {st->in[1], st->out[0], st->out[1]}) RETURN_IF_ERROR(same_width(st->in[0], id));
      st->k = width(st->in[0]);
      RETURN_IF_ERROR(weight(0, {st->k}, &st->w));
      return eps_param();
    }
    case fb::OpKind::Add: {
      RETURN_IF_ERROR(arity(2, 1));
      RETURN_IF_ERROR(require_acts({st->in[0], st->in[1], st->out[0]}));
      RETURN_IF_ERROR(same_width(st->in[0], st->in[1]));
      RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
      st->k = width(st->in[0]);
      return ok_status();
    }
    case fb::OpKind::Linear: {
      RETURN_IF_ERROR(arity(1, 1));
      RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
      st->k = width(st->in[0]);
      st->n = width(st->out[0]);
      RETURN_IF_ERROR(matrix(st->n, st->k));
      return weight(1, {st->n}, &st->bias, /*optional=*/true);
    }
    case fb::OpKind::PermuteColumns: {
      RETURN_IF_ERROR(arity(1, 1));
      RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
      RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
      st->k = width(st->in[0]);
      const fb::Param* perm = find_param(s, "perm");
      if (!perm || !perm->ints() || static_cast<int64_t>(perm->ints()->size()) != st->k)
        return invalid_argument(where + ": param 'perm' must list one input column per output column (" +
                                str(st->k) + ")");
      std::vector<bool> seen(static_cast<size_t>(st->k), false);
      st->perm.resize(static_cast<size_t>(st->k));
      for (int64_t j = 0; j < st->k; ++j) {
        const int64_t p = perm->ints()->Get(static_cast<flatbuffers::uoffset_t>(j));
        if (p < 0 || p >= st->k || seen[static_cast<size_t>(p)])
          return invalid_argument(where + ": param 'perm' is not a permutation of 0.." + str(st->k - 1) +
                                  " (entry " + str(j) + " = " + str(p) + ")");
        seen[static_cast<size_t>(p)] = true;
        st->perm[static_cast<size_t>(j)] = static_cast<int32_t>(p);
      }
      return ok_status();
    }
    case fb::OpKind::Split: {
      if (st->in.size() != 1 || st->out.empty())
        return invalid_argument(where + ": expected 1 input and at least 1 output");
      RETURN_IF_ERROR(require_acts({st->in[0]}));
      const fb::Param* sizes = find_param(s, "sizes");
      if (!sizes || !sizes->ints() || sizes->ints()->size() != st->out.size())
        return invalid_argument(where + ": param 'sizes' must list one size per output");
      int64_t total = 0;
      for (size_t i = 0; i < st->out.size(); ++i) {
        RETURN_IF_ERROR(require_acts({st->out[i]}));
        const int64_t sz = sizes->ints()->Get(static_cast<flatbuffers::uoffset_t>(i));
        if (sz != width(st->out[i]))
          return invalid_argument(where + ": size " + str(sz) + " differs from output width " +
                                  str(width(st->out[i])));
        st->sizes.push_back(sz);
        total += sz;
      }
      if (total != width(st->in[0]))
        return invalid_argument(where + ": sizes sum to " + str(total) + ", input width is " +
                                str(width(st->in[0])));
      st->k = total;
      return ok_status();
    }
    case fb::OpKind::Rope: {
      RETURN_IF_ERROR(rope_params());
      RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
      if (int64_t{st->num_heads} * st->head_dim != width(st->in[0]))
        return invalid_argument(where + ": num_heads x head_dim = " + str(st->num_heads) + " x " +
                                str(st->head_dim) + " does not match width " + str(width(st->in[0])));
      return ok_status();
    }
    case fb::OpKind::RopeKvStore: {
      RETURN_IF_ERROR(rope_params());
      RETURN_IF_ERROR(cache_params(false));
      if (st->head_dim != head_dim_)
        return invalid_argument(where + ": the rotation's head_dim differs from the KV spec's");
      if (st->num_heads % num_kv_heads_ != 0)
        return invalid_argument(where + ": num_heads " + str(st->num_heads) + " is not a multiple of num_kv_heads " +
                                str(num_kv_heads_));
      const int64_t q_width = int64_t{st->num_heads} * head_dim_;
      if (width(st->out[0]) != q_width || width(st->in[0]) != q_width + 2 * int64_t{num_kv_heads_} * head_dim_)
        return invalid_argument(where + ": qkv/q widths " + str(width(st->in[0])) + "/" + str(width(st->out[0])) +
                                " are not (num_heads + 2 x num_kv_heads) x head_dim / num_heads x head_dim");
      return ok_status();
    }
    case fb::OpKind::KvStore: {
      if (st->in.size() != 2 || !st->out.empty())
        return invalid_argument(where + ": expected inputs [k, v] and no value outputs");
      RETURN_IF_ERROR(require_acts({st->in[0], st->in[1]}));
      RETURN_IF_ERROR(cache_params(false));
      for (int id : st->in)
        if (width(id) != static_cast<int64_t>(num_kv_heads_) * head_dim_)
          return invalid_argument(where + ": k/v width " + str(width(id)) + " is not kv_heads x head_dim = " +
                                  str(int64_t{num_kv_heads_} * head_dim_));
      return ok_status();
    }
    case fb::OpKind::PagedAttention: {
      RETURN_IF_ERROR(arity(1, 1));
      RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
      RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
      RETURN_IF_ERROR(cache_params(true));
      int64_t heads = 0, window = 0;
      RETURN_IF_ERROR(int_param("num_heads", &heads));
      RETURN_IF_ERROR(int_param("sliding_window", &window, false, 0));
      if (heads <= 0 || heads % num_kv_heads_ != 0)
        return invalid_argument(where + ": num_heads " + str(heads) + " is not a multiple of num_kv_heads " +
                                str(num_kv_heads_));
      if (heads * head_dim_ != width(st->in[0]))
        return invalid_argument(where + ": num_heads x head_dim does not match width " + str(width(st->in[0])));
      if (window < 0 || window > INT32_MAX) return invalid_argument(where + ": bad sliding_window");
      double scale = 0;
      RETURN_IF_ERROR(float_param("scale", &scale, false, 1.0 / std::sqrt(static_cast<double>(head_dim_))));
      if (!(scale > 0.0)) return invalid_argument(where + ": scale must be positive");
      st->num_heads = static_cast<int>(heads);
      st->window = static_cast<int>(window);
      st->scale = static_cast<float>(scale);
      return ok_status();
    }
    case fb::OpKind::SiluMul: {
      if (st->out.size() != 1 || st->in.empty() || st->in.size() > 2)
        return invalid_argument(where + ": expected inputs [gate, up] or [gate_up] and 1 output");
      RETURN_IF_ERROR(require_acts({st->in[0], st->out[0]}));
      st->n = width(st->out[0]);
      if (st->in.size() == 2) {
        RETURN_IF_ERROR(require_acts({st->in[1]}));
        RETURN_IF_ERROR(same_width(st->in[0], st->out[0]));
        RETURN_IF_ERROR(same_width(st->in[1], st->out[0]));
      } else if (width(st->in[0]) != 2 * st->n) {
        return invalid_argument(where + ": fused gate_up width " + str(width(st->in[0])) +
                                " is not twice the output width " + str(st->n));
      }
      return ok_status();
    }
    case fb::OpKind::Logits: {
      RETURN_IF_ERROR(arity(1, 1));
      RETURN_IF_ERROR(require_acts({st->in[0]}));
      if (st->out[0] != output_)
        return invalid_argument(where + ": the output must be the program's output value");
      st->k = width(st->in[0]);
      st->n = width(st->out[0]);
      RETURN_IF_ERROR(matrix(st->n, st->k));
      if (st->n > INT32_MAX) return invalid_argument(where + ": vocabulary too large");
      vocab_size_ = static_cast<int>(st->n);
      return ok_status();
    }
    default:
      return unimplemented(where + ": op kind " + str(static_cast<int>(s.op())) +
                           " is not supported by the CPU backend");
  }
}

// Dataflow and memory-plan checks over the decoded steps: every value is written once before it
// is read, and no write clobbers a value that is still to be read (only the exact in-place
// aliasing that elementwise kernels support is allowed).
Status CpuExecutor::check_memory_plan() {
  const int nv = static_cast<int>(values_.size());
  std::vector<int> def(nv, -1), last_use(nv, -1);
  def[token_input_] = def[position_input_] = -2;  // defined before step 0
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    const Step& st = steps_[i];
    for (int id : st.in) {
      if (def[id] == -1)
        return invalid_argument(st.where + ": reads value " + str(id) + " before it is written");
      last_use[id] = i;
    }
    for (int id : st.out) {
      if (def[id] != -1) return invalid_argument(st.where + ": value " + str(id) + " is written twice");
      def[id] = i;
    }
  }
  if (def[output_] < 0) return invalid_argument("no step writes the program output");
  auto overlap = [&](int a, int b) {
    const ValueInfo& x = values_[a];
    const ValueInfo& y = values_[b];
    if (!x.in_arena || !y.in_arena) return false;
    const uint64_t xe = x.offset_per_row + x.width * sizeof(float);
    const uint64_t ye = y.offset_per_row + y.width * sizeof(float);
    return x.offset_per_row < ye && y.offset_per_row < xe;
  };
  auto exact = [&](int a, int b) {
    return values_[a].offset_per_row == values_[b].offset_per_row && values_[a].width == values_[b].width;
  };
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    const Step& st = steps_[i];
    const bool elementwise = st.op == fb::OpKind::Add || st.op == fb::OpKind::RmsNorm ||
                             st.op == fb::OpKind::AddRmsNorm || st.op == fb::OpKind::Rope ||
                             (st.op == fb::OpKind::SiluMul && st.in.size() == 2);
    for (size_t a = 0; a < st.out.size(); ++a) {
      const int o = st.out[a];
      for (size_t b = a + 1; b < st.out.size(); ++b)
        if (overlap(o, st.out[b]))
          return invalid_argument(st.where + ": outputs " + str(o) + " and " + str(st.out[b]) + " overlap in the arena");
      for (int v = 0; v < nv; ++v) {
        if (v == o || def[v] == -1 || def[v] >= i || last_use[v] < i || !overlap(o, v)) continue;
        const bool is_input = std::find(st.in.begin(), st.in.end(), v) != st.in.end();
        if (last_use[v] == i && is_input && elementwise && exact(o, v)) continue;
        return invalid_argument(st.where + ": output value " + str(o) +
                                " overwrites value " + str(v) + " which is read later (memory plan)");
      }
    }
  }
  return ok_status();
}

float* CpuExecutor::value_ptr(int id, float* logits) const {
  return id == output_ ? logits : values_[id].ptr;
}

Status CpuExecutor::validate_batch(const BatchInput& b, const float* logits) {
  return check_batch(b, logits, {max_tokens_, max_seqs_, max_model_len_, block_size_, num_kv_blocks_, embedding_rows_},
                     seq_of_row_.data());
}

void CpuExecutor::set_profiler(Profiler* profiler) {
  profiler_ = profiler;
  if (!profiler) return;
  std::vector<Profiler::StepInfo> info(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    std::string detail;  // tells the kernels of one op kind apart (q/k/v vs o_proj, ...)
    switch (st.op) {
      case fb::OpKind::Linear:
      case fb::OpKind::Logits:
        detail = str(st.k) + "->" + str(st.n) + (st.bias ? " +bias" : "") +
                 (st.quantized ? " " + quant::format_name(st.qw.format)
                  : st.half   ? std::string(st.hw.bf16 ? " bf16" : " f16")
                              : std::string());
        break;
      case fb::OpKind::Split:
        detail = str(st.k) + "->";
        for (size_t j = 0; j < st.sizes.size(); ++j) {
          if (j) detail += '+';
          detail += str(st.sizes[j]);
        }
        break;
      case fb::OpKind::SiluMul:
        detail = st.in.size() == 1 ? "fused gate_up " + str(st.n) : str(st.n);
        break;
      case fb::OpKind::RmsNorm:
        detail = str(st.k) + (st.n != st.k ? " in groups of " + str(st.n) : "");
        break;
      case fb::OpKind::AddRmsNorm:
      case fb::OpKind::Add:
      case fb::OpKind::PermuteColumns:
        detail = str(st.k);
        break;
      default:
        break;
    }
    info[i] = {op_name(st.op), st.where, std::move(detail), st.weight_bytes};
  }
  profiler->set_program(std::move(info));
}

Status CpuExecutor::forward(const BatchInput& b, float* logits) {
  Profiler* const prof = profiler_;
  const int64_t forward_begin = prof ? prof->begin_forward() : 0;
  RETURN_IF_ERROR(validate_batch(b, logits));
  ThreadPool& pool = *pool_;
  const int64_t T = static_cast<int64_t>(b.tokens.size());
  const int64_t L = static_cast<int64_t>(b.logits_indices.size());
  const uint64_t layer_floats =
      uint64_t{static_cast<uint64_t>(num_kv_blocks_)} * num_kv_heads_ * block_size_ * head_dim_;
  auto kv_layer = [&](int layer) {
    cpu::KvLayer kv;
    uint8_t* base = reinterpret_cast<uint8_t*>(kv_cache_.get()) + kv_layer_bytes_ * layer;
    if (kv_i8()) {
      const uint64_t codes = layer_floats;  // one byte per element
      kv.k8 = reinterpret_cast<int8_t*>(base);
      kv.v8 = kv.k8 + codes;
      kv.ks = reinterpret_cast<float*>(base + (2 * codes + 63) / 64 * 64);
      kv.vs = kv.ks + codes / head_dim_;
    } else if (kv_elem_bytes_ == 2) {
      kv.k16 = reinterpret_cast<uint16_t*>(base);
      kv.v16 = kv.k16 + layer_floats;
      kv.bf16 = kv_dtype_ == fb::DType::BF16;
    } else if (kv_elem_bytes_ == 1) {  // fp8
      kv.kf8 = base;
      kv.vf8 = kv.kf8 + layer_floats;
    } else {
      kv.k = reinterpret_cast<float*>(base);
      kv.v = kv.k + layer_floats;
    }
    kv.num_blocks = num_kv_blocks_;
    kv.num_kv_heads = num_kv_heads_;
    kv.block_size = block_size_;
    kv.head_dim = head_dim_;
    return kv;
  };
  auto P = [&](int id) { return value_ptr(id, logits); };
  for (const Step& st : steps_) {
    const int64_t step_begin = prof ? Profiler::now_ns() : 0;
    switch (st.op) {
      case fb::OpKind::Embedding:
        if (st.quantized)
          cpu::embedding_q(b.tokens.data(), T, st.qw, P(st.out[0]), *quant_scratch_, pool);
        else if (st.half)
          cpu::embedding_h(b.tokens.data(), T, st.hw, P(st.out[0]), pool);
        else
          cpu::embedding(b.tokens.data(), T, st.w, st.n, P(st.out[0]), pool);
        break;
      case fb::OpKind::RmsNorm:
        cpu::rms_norm(P(st.in[0]), T, st.k, st.w, st.n, st.eps, P(st.out[0]), pool);
        break;
      case fb::OpKind::AddRmsNorm:
        cpu::add_rms_norm(P(st.in[0]), P(st.in[1]), T, st.k, st.w, st.eps, P(st.out[0]),
                          P(st.out[1]), pool);
        break;
      case fb::OpKind::Add:
        cpu::add(P(st.in[0]), P(st.in[1]), T, st.k, P(st.out[0]), pool);
        break;
      case fb::OpKind::Linear:
        if (st.quantized)
          cpu::linear_q(P(st.in[0]), nullptr, T, st.qw, st.bias, P(st.out[0]),
                        static_cast<cpu::CpuContract>(contract_), *quant_scratch_, pool);
        else if (st.half)
          cpu::linear_h(P(st.in[0]), nullptr, T, st.hw, st.bias, P(st.out[0]), *quant_scratch_, pool);
        else
          cpu::linear(P(st.in[0]), nullptr, T, st.k, st.w, st.n, st.bias, P(st.out[0]), pool);
        break;
      case fb::OpKind::PermuteColumns:
        cpu::permute_columns(P(st.in[0]), T, st.k, st.perm.data(), P(st.out[0]), pool);
        break;
      case fb::OpKind::Split: {
        float* outs[64];
        std::vector<float*> many;
        float** o = outs;
        if (st.out.size() > 64) {
          many.resize(st.out.size());
          o = many.data();
        }
        for (size_t i = 0; i < st.out.size(); ++i) o[i] = P(st.out[i]);
        cpu::split(P(st.in[0]), T, st.k, st.sizes, o, pool);
        break;
      }
      case fb::OpKind::Rope:
        cpu::rope(P(st.in[0]), T, st.num_heads, st.head_dim, b.positions.data(),
                  st.inv_freq.data(), st.interleaved, P(st.out[0]), pool);
        break;
      case fb::OpKind::KvStore:
        cpu::kv_store(P(st.in[0]), P(st.in[1]), T, b.kv_slots.data(), kv_layer(st.layer), pool);
        break;
      case fb::OpKind::RopeKvStore:
        cpu::rope_kv_store(P(st.in[0]), T, st.num_heads, b.positions.data(), st.inv_freq.data(), st.interleaved,
                           b.kv_slots.data(), kv_layer(st.layer), P(st.out[0]), pool);
        break;
      case fb::OpKind::PagedAttention: {
        cpu::AttentionBatch ab;
        ab.positions = b.positions.data();
        ab.seq_of_row = seq_of_row_.data();
        ab.block_tables = b.block_tables.data();
        ab.max_blocks_per_seq = b.max_blocks_per_seq;
        cpu::paged_attention(P(st.in[0]), T, ab, kv_layer(st.layer), st.num_heads, st.scale,
                             st.window, P(st.out[0]), attn_scratch_.data(), attn_stride(), pool);
        break;
      }
      case fb::OpKind::SiluMul:
        if (st.in.size() == 2)
          cpu::silu_mul(P(st.in[0]), st.n, P(st.in[1]), st.n, T, st.n, P(st.out[0]), pool);
        else
          cpu::silu_mul(P(st.in[0]), 2 * st.n, P(st.in[0]) + st.n, 2 * st.n, T, st.n,
                        P(st.out[0]), pool);
        break;
      case fb::OpKind::Logits:
        if (L > 0 && st.quantized)
          cpu::linear_q(P(st.in[0]), b.logits_indices.data(), L, st.qw, nullptr, logits,
                        static_cast<cpu::CpuContract>(contract_), *quant_scratch_, pool);
        else if (L > 0 && st.half)
          cpu::linear_h(P(st.in[0]), b.logits_indices.data(), L, st.hw, nullptr, logits, *quant_scratch_, pool);
        else if (L > 0)
          cpu::logits(P(st.in[0]), st.k, b.logits_indices.data(), L, st.w, st.n, logits, pool);
        break;
      default:
        return internal_error(st.where + ": undecoded op");
    }
    if (prof)
      prof->record_step(static_cast<int>(&st - steps_.data()), static_cast<int32_t>(T), step_begin,
                        Profiler::now_ns());
  }
  if (prof)
    prof->end_forward(static_cast<int32_t>(T), static_cast<int32_t>(b.context_lens.size()),
                      forward_begin, Profiler::now_ns());
  return ok_status();
}

Status CpuExecutor::copy_kv_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_kv_blocks_ || dst < 0 || dst >= num_kv_blocks_)
    return invalid_argument("copy_kv_block: block " + str(src < 0 || src >= num_kv_blocks_ ? src : dst) +
                            " outside the " + str(num_kv_blocks_) + " KV blocks");
  if (src == dst) return ok_status();
  const size_t rows = static_cast<size_t>(num_kv_heads_) * block_size_;  // head rows per block
  const size_t elems = rows * head_dim_;
  const size_t layer_elems = elems * num_kv_blocks_;
  for (int l = 0; l < num_layers_; ++l) {
    uint8_t* base = reinterpret_cast<uint8_t*>(kv_cache_.get()) + kv_layer_bytes_ * l;
    if (kv_i8()) {
      float* scales = reinterpret_cast<float*>(base + (2 * layer_elems + 63) / 64 * 64);
      for (int kv = 0; kv < 2; ++kv) {
        uint8_t* codes = base + layer_elems * kv;
        std::memcpy(codes + elems * dst, codes + elems * src, elems);
        float* s = scales + rows * num_kv_blocks_ * kv;
        std::memcpy(s + rows * dst, s + rows * src, rows * sizeof(float));
      }
      continue;
    }
    const size_t eb = kv_elem_bytes_;  // f32, bf16, f16, fp8
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* half = base + layer_elems * eb * kv;
      std::memcpy(half + elems * eb * dst, half + elems * eb * src, elems * eb);
    }
  }
  return ok_status();
}

int64_t CpuExecutor::attn_stride() const {
  // Units of 12 rows up to spans of 8192 (384 KiB a thread); longer spans take fewer rows a unit
  // (paged_attention fits them to the scratch), down to one row of the longest.
  const int64_t rows = cpu::kAttentionUnitRows, longest = max_model_len_;
  return std::max(longest, std::min(rows * (longest + rows), rows * (8192 + rows)));
}

}  // namespace llmrt
