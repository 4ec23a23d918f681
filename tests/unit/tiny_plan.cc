#include "tests/unit/tiny_plan.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>

#include "flatbuffers/flatbuffers.h"
#include "runtime/cpu/kernels.h"

namespace llmrt::testing {
namespace {

class Builder {
 public:
  explicit Builder(const TinyPlanConfig& c) : c_(c), rng_(c.seed) {
    spec_.config = c;
    spec_.values.push_back({"tokens", fb::RowKind::Tokens, 1, fb::DType::I32, 0});
    spec_.values.push_back({"positions", fb::RowKind::Tokens, 1, fb::DType::I32, 0});
  }

  int tensor(const std::string& name, std::vector<int64_t> shape, float scale, float center = 0) {
    TinyTensor t;
    t.name = name;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::uniform_real_distribution<float> d(-scale, scale);
    t.data.resize(n);
    for (float& x : t.data) x = center + d(rng_);
    spec_.tensors.push_back(std::move(t));
    return static_cast<int>(spec_.tensors.size()) - 1;
  }
  int concat(const std::string& name, std::initializer_list<int> parts) {
    TinyTensor t;
    t.name = name;
    int64_t rows = 0;
    for (int p : parts) {
      const TinyTensor& src = spec_.tensors[p];
      rows += src.shape[0];
      t.data.insert(t.data.end(), src.data.begin(), src.data.end());
    }
    t.shape = {rows};
    if (spec_.tensors[*parts.begin()].shape.size() == 2)
      t.shape.push_back(spec_.tensors[*parts.begin()].shape[1]);
    spec_.tensors.push_back(std::move(t));
    return static_cast<int>(spec_.tensors.size()) - 1;
  }
  int value(const std::string& name, int64_t width, fb::RowKind rows = fb::RowKind::Tokens) {
    spec_.values.push_back({name, rows, width, fb::DType::F32, 0});
    return static_cast<int>(spec_.values.size()) - 1;
  }
  void step(fb::OpKind op, std::vector<int> in, std::vector<int> out, std::vector<int> w,
            std::vector<TinyParam> params, const std::string& name) {
    spec_.steps.push_back({op, std::move(in), std::move(out), std::move(w), std::move(params), name});
  }
  static TinyParam I(const std::string& k, int64_t v) { TinyParam p; p.key = k; p.i = v; return p; }
  static TinyParam F(const std::string& k, double v) { TinyParam p; p.key = k; p.f = v; return p; }
  static TinyParam S(const std::string& k, const std::string& v) { TinyParam p; p.key = k; p.s = v; return p; }

  int linear(int x, int w, int bias, const std::string& name) {
    const int y = value(name, spec_.tensors[w].shape[0]);
    step(fb::OpKind::Linear, {x}, {y}, {w, bias}, {}, name);
    return y;
  }
  int rms_norm(int x, int w, const std::string& name) {
    const int y = value(name, spec_.values[x].width);
    step(fb::OpKind::RmsNorm, {x}, {y}, {w}, {F("eps", c_.eps)}, name);
    return y;
  }
  // Returns {normed, sum}.
  std::pair<int, int> add_norm(int x, int residual, int w, const std::string& name) {
    const int64_t width = spec_.values[x].width;
    if (c_.fused) {
      const int normed = value(name + ".normed", width), sum = value(name + ".sum", width);
      step(fb::OpKind::AddRmsNorm, {x, residual}, {normed, sum}, {w}, {F("eps", c_.eps)}, name);
      return {normed, sum};
    }
    const int sum = value(name + ".sum", width);
    step(fb::OpKind::Add, {x, residual}, {sum}, {}, {}, name + ".add");
    return {rms_norm(sum, w, name + ".normed"), sum};
  }
  std::vector<TinyParam> rope_params(int heads) {
    std::vector<TinyParam> p = {I("num_heads", heads), I("head_dim", c_.head_dim),
                                F("theta", c_.rope_theta), S("style", c_.rope_style),
                                S("rope_type", c_.rope_type)};
    if (c_.rope_type != "default") p.push_back(F("factor", c_.rope_factor));
    if (c_.rope_type == "llama3") {
      p.push_back(F("low_freq_factor", c_.rope_low_freq_factor));
      p.push_back(F("high_freq_factor", c_.rope_high_freq_factor));
      p.push_back(I("original_max_position", c_.rope_original_max_position));
    }
    return p;
  }
  int rope(int x, int heads, const std::string& name) {
    const int y = value(name, spec_.values[x].width);
    step(fb::OpKind::Rope, {x, 1}, {y}, {}, rope_params(heads), name);
    return y;
  }

  TinyPlanSpec build() {
    const int D = c_.hidden, H = c_.heads, Hkv = c_.kv_heads, hd = c_.head_dim;
    const int I_ = c_.intermediate, V = c_.vocab;
    const float sD = 1.0f / std::sqrt(float(D));
    const int embed = tensor("model.embed_tokens.weight", {V, D}, 1.0f);
    int x = value("embed", D);
    step(fb::OpKind::Embedding, {0}, {x}, {embed}, {}, "embed");
    int residual = x, h = -1, carry = -1;  // carry: output to add into the residual stream
    for (int l = 0; l < c_.layers; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      const int in_norm = tensor(pre + "input_layernorm.weight", {D}, 0.2f, 1.0f);
      const int wq = tensor(pre + "self_attn.q_proj.weight", {H * hd, D}, sD);
      const int wk = tensor(pre + "self_attn.k_proj.weight", {Hkv * hd, D}, sD);
      const int wv = tensor(pre + "self_attn.v_proj.weight", {Hkv * hd, D}, sD);
      int bq = -1, bk = -1, bv = -1, qn = -1, kn = -1;
      if (c_.qkv_bias) {
        bq = tensor(pre + "self_attn.q_proj.bias", {H * hd}, 0.3f);
        bk = tensor(pre + "self_attn.k_proj.bias", {Hkv * hd}, 0.3f);
        bv = tensor(pre + "self_attn.v_proj.bias", {Hkv * hd}, 0.3f);
      }
      if (c_.qk_norm) {
        qn = tensor(pre + "self_attn.q_norm.weight", {hd}, 0.2f, 1.0f);
        kn = tensor(pre + "self_attn.k_norm.weight", {hd}, 0.2f, 1.0f);
      }
      const int wo = tensor(pre + "self_attn.o_proj.weight", {D, H * hd}, 1.0f / std::sqrt(float(H * hd)));
      const int post_norm = tensor(pre + "post_attention_layernorm.weight", {D}, 0.2f, 1.0f);
      const int wg = tensor(pre + "mlp.gate_proj.weight", {I_, D}, sD);
      const int wu = tensor(pre + "mlp.up_proj.weight", {I_, D}, sD);
      const int wd = tensor(pre + "mlp.down_proj.weight", {D, I_}, 1.0f / std::sqrt(float(I_)));

      if (l == 0) {
        h = rms_norm(x, in_norm, pre + "input_layernorm");
      } else {
        auto [n, s] = add_norm(carry, residual, in_norm, pre + "input_layernorm");
        h = n;
        residual = s;
      }
      std::vector<TinyParam> cache = {I("layer", l), I("num_kv_heads", Hkv), I("head_dim", hd),
                                      I("block_size", c_.block_size), S("kv_dtype", c_.kv_dtype),
                                      S("layout", "block_head_slot_dim")};
      int q, k, v;
      if (c_.fused) {
        const int wqkv = concat(pre + "self_attn.qkv_proj.weight", {wq, wk, wv});
        const int bqkv = c_.qkv_bias ? concat(pre + "self_attn.qkv_proj.bias", {bq, bk, bv}) : -1;
        const int qkv = linear(h, wqkv, bqkv, pre + "qkv");
        if (c_.rope_kv_store && !c_.qk_norm) {
          q = value(pre + "q_rope", H * hd);
          std::vector<TinyParam> p = rope_params(H);
          for (const TinyParam& c : cache)
            if (c.key != "head_dim") p.push_back(c);  // already a rope param
          step(fb::OpKind::RopeKvStore, {qkv, 1}, {q}, {}, p, pre + "rope_kv_store");
          k = v = -1;
        } else {
          q = value(pre + "q", H * hd);
          k = value(pre + "k", Hkv * hd);
          v = value(pre + "v", Hkv * hd);
          TinyParam sizes;
          sizes.key = "sizes";
          sizes.ints = {H * hd, Hkv * hd, Hkv * hd};
          step(fb::OpKind::Split, {qkv}, {q, k, v}, {}, {sizes}, pre + "split");
        }
      } else {
        q = linear(h, wq, bq, pre + "q");
        k = linear(h, wk, bk, pre + "k");
        v = linear(h, wv, bv, pre + "v");
      }
      if (c_.qk_norm) {
        q = rms_norm(q, qn, pre + "q_norm");
        k = rms_norm(k, kn, pre + "k_norm");
      }
      if (k >= 0) {
        q = rope(q, H, pre + "q_rope");
        k = rope(k, Hkv, pre + "k_rope");
        step(fb::OpKind::KvStore, {k, v}, {}, {}, cache, pre + "kv_store");
      }
      const int o = value(pre + "attn", H * hd);
      auto attn_params = cache;
      attn_params.push_back(I("num_heads", H));
      attn_params.push_back(F("scale", 1.0 / std::sqrt(double(hd))));
      attn_params.push_back(I("sliding_window", c_.sliding_window));
      step(fb::OpKind::PagedAttention, {q}, {o}, {}, attn_params, pre + "attention");
      const int a = linear(o, wo, -1, pre + "o_proj");
      auto [h2, r2] = add_norm(a, residual, post_norm, pre + "post_attention_layernorm");
      residual = r2;
      const int m = value(pre + "mlp.act", I_);
      if (c_.fused) {
        const int wgu = concat(pre + "mlp.gate_up_proj.weight", {wg, wu});
        const int gu = linear(h2, wgu, -1, pre + "gate_up");
        step(fb::OpKind::SiluMul, {gu}, {m}, {}, {}, pre + "silu_mul");
      } else {
        const int g = linear(h2, wg, -1, pre + "gate");
        const int u = linear(h2, wu, -1, pre + "up");
        step(fb::OpKind::SiluMul, {g, u}, {m}, {}, {}, pre + "silu_mul");
      }
      carry = linear(m, wd, -1, pre + "down");
    }
    const int norm = tensor("model.norm.weight", {D}, 0.2f, 1.0f);
    auto [f, unused_sum] = add_norm(carry, residual, norm, "model.norm");
    (void)unused_sum;
    const int head = c_.tie_embeddings ? embed : tensor("lm_head.weight", {V, D}, sD);
    spec_.output = value("logits", V, fb::RowKind::LogitRows);
    step(fb::OpKind::Logits, {f}, {spec_.output}, {head}, {}, "logits");

    spec_.kv_layers = c_.layers;
    spec_.kv_heads = Hkv;
    spec_.kv_head_dim = hd;
    spec_.kv_block_size = c_.block_size;
    spec_.kv_dtype = c_.kv_dtype == "int8"   ? fb::DType::I8
                     : c_.kv_dtype == "bf16" ? fb::DType::BF16
                     : c_.kv_dtype == "f16"  ? fb::DType::F16
                     : c_.kv_dtype == "fp8"  ? fb::DType::F8E4M3
                                             : fb::DType::F32;
    spec_.max_tokens = c_.max_tokens;
    spec_.max_seqs = c_.max_seqs;
    spec_.max_model_len = c_.max_model_len;
    plan_tiny_memory(&spec_, c_.reuse_memory);
    return std::move(spec_);
  }

 private:
  const TinyPlanConfig& c_;
  std::mt19937 rng_;
  TinyPlanSpec spec_;
};

}  // namespace

int TinyPlanSpec::tensor_index(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

const std::vector<float>& TinyPlanSpec::weight(const std::string& name) const {
  const int i = tensor_index(name);
  if (i < 0) throw std::runtime_error("tiny plan has no tensor " + name);
  return tensors[i].data;
}

TinyPlanSpec make_tiny_plan(const TinyPlanConfig& config) { return Builder(config).build(); }

void plan_tiny_memory(TinyPlanSpec* spec, bool reuse) {
  const int nv = static_cast<int>(spec->values.size());
  std::vector<int> last_use(nv, -1);
  for (int i = 0; i < static_cast<int>(spec->steps.size()); ++i)
    for (int id : spec->steps[i].inputs)
      if (id >= 0) last_use[id] = i;
  struct Block { uint64_t off, size; int value; };
  std::vector<Block> live;
  uint64_t high = 0;
  auto bytes = [&](int id) { return (static_cast<uint64_t>(spec->values[id].width) * 4 + 63) / 64 * 64; };
  auto alloc = [&](int id) {
    const uint64_t size = bytes(id);
    std::sort(live.begin(), live.end(), [](const Block& a, const Block& b) { return a.off < b.off; });
    uint64_t off = 0;
    for (const Block& b : live) {
      if (b.off >= off + size) break;
      off = std::max(off, b.off + b.size);
    }
    spec->values[id].offset_per_row = off;
    live.push_back({off, size, id});
    high = std::max(high, off + size);
  };
  for (int i = 0; i < static_cast<int>(spec->steps.size()); ++i) {
    for (int id : spec->steps[i].outputs)
      if (id >= 0 && spec->values[id].dtype == fb::DType::F32) alloc(id);
    if (!reuse) continue;
    // Free values whose last read is this step (or that are never read), after the outputs
    // were placed so that no output aliases an input.
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Block& b) {
                                return last_use[b.value] <= i && b.value != spec->output;
                              }),
               live.end());
  }
  spec->arena_bytes_per_token = high;
}

std::vector<uint8_t> serialize_tiny_plan(const TinyPlanSpec& spec) {
  flatbuffers::FlatBufferBuilder b(1 << 16);
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  uint64_t offset = 0;
  for (const TinyTensor& t : spec.tensors) {
    const uint64_t size = t.data.size() * sizeof(float);
    tensors.push_back(fb::CreateTensorDirect(b, t.name.c_str(), t.dtype, &t.shape, offset, size,
                                             "", "row_major"));
    offset = (offset + size + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  }
  const uint64_t weights_size = offset;
  std::vector<flatbuffers::Offset<fb::Value>> values;
  for (size_t i = 0; i < spec.values.size(); ++i) {
    const TinyValue& v = spec.values[i];
    values.push_back(fb::CreateValueDirect(b, static_cast<uint32_t>(i), v.name.c_str(), v.rows,
                                           v.width, v.dtype, v.offset_per_row));
  }
  std::vector<flatbuffers::Offset<fb::Step>> steps;
  for (const TinyStep& s : spec.steps) {
    std::vector<TinyParam> sorted = s.params;
    std::sort(sorted.begin(), sorted.end(),
              [](const TinyParam& a, const TinyParam& c) { return a.key < c.key; });
    std::vector<flatbuffers::Offset<fb::Param>> params;
    for (const TinyParam& p : sorted)
      params.push_back(fb::CreateParamDirect(b, p.key.c_str(), p.i, p.f,
                                             p.s.empty() ? nullptr : p.s.c_str(),
                                             p.ints.empty() ? nullptr : &p.ints));
    std::vector<int32_t> in(s.inputs.begin(), s.inputs.end()), out(s.outputs.begin(), s.outputs.end()),
        w(s.weights.begin(), s.weights.end());
    steps.push_back(fb::CreateStepDirect(b, s.op, &in, &out, &w, &params, -1, s.name.c_str()));
  }
  auto program = fb::CreateProgramDirect(b, "forward", &values, &steps, spec.token_input,
                                         spec.position_input, spec.output);
  std::vector<flatbuffers::Offset<fb::Program>> programs = {program};
  auto kv = fb::CreateKvSpecDirect(b, spec.kv_layers, spec.kv_heads, spec.kv_head_dim,
                                   spec.kv_block_size, spec.kv_dtype, "block_head_slot_dim");
  auto mem = fb::CreateMemoryPlan(b, spec.arena_bytes_per_token, 0, 0, 0, spec.max_tokens,
                                  spec.max_seqs, spec.max_model_len);
  const TinyPlanConfig& c = spec.config;
  auto rope = fb::CreateRopeInfoDirect(b, c.rope_theta, c.rope_type.c_str(), c.rope_factor,
                                       c.rope_low_freq_factor, c.rope_high_freq_factor,
                                       c.rope_original_max_position);
  auto model = fb::CreateModelInfoDirect(b, "LlamaForCausalLM", "hf", "tiny", c.hidden, c.layers,
                                         c.heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab,
                                         c.max_model_len, c.eps, c.tie_embeddings,
                                         c.sliding_window, rope);
  auto root = fb::CreatePlanDirect(b, kSchemaMajor, kSchemaMinor, nullptr, kCpuKernelAbi, 0, model,
                                   0, 0, &tensors, kv, mem, &programs, nullptr, weights_size);
  fb::FinishPlanBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

Status write_tiny_plan(const TinyPlanSpec& spec, const std::string& path) {
  const std::vector<uint8_t> buf = serialize_tiny_plan(spec);
  uint64_t weights_size = 0;
  for (const TinyTensor& t : spec.tensors)
    weights_size = (weights_size + t.data.size() * sizeof(float) + kTensorAlignment - 1) /
                   kTensorAlignment * kTensorAlignment;
  ASSIGN_OR_RETURN(auto writer, PlanFileWriter::create(path, buf.data(), buf.size(), weights_size));
  uint64_t offset = 0;
  for (const TinyTensor& t : spec.tensors) {
    RETURN_IF_ERROR(writer->pad_to(offset));
    RETURN_IF_ERROR(writer->append(t.data.data(), t.data.size() * sizeof(float)));
    offset = (offset + t.data.size() * sizeof(float) + kTensorAlignment - 1) / kTensorAlignment *
             kTensorAlignment;
  }
  RETURN_IF_ERROR(writer->pad_to(offset));
  return writer->finish();
}

StatusOr<std::unique_ptr<Plan>> open_tiny_plan(const TinyPlanSpec& spec) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/llmrt_tiny_" +
                           std::to_string(getpid()) + "_" + std::to_string(counter++) + ".plan";
  Status st = write_tiny_plan(spec, path);
  if (!st.ok()) {
    std::remove(path.c_str());
    return st;
  }
  auto plan = Plan::open(path);
  std::remove(path.c_str());  // the mapping stays valid
  return plan;
}

// ---------------- naive reference ----------------
namespace {

using Mat = std::vector<double>;  // row-major [rows, cols]

Mat matmul_t(const Mat& x, int64_t rows, int64_t k, const std::vector<float>& w, int64_t n,
             const std::vector<float>* bias) {
  Mat y(rows * n);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? (*bias)[j] : 0.0;
      for (int64_t i = 0; i < k; ++i) s += x[t * k + i] * w[j * k + i];
      y[t * n + j] = s;
    }
  return y;
}

void rms_rows(Mat& x, int64_t rows, int64_t dim, int64_t group, const std::vector<float>& w, double eps) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t g = 0; g < dim; g += group) {
      double ss = 0;
      for (int64_t i = 0; i < group; ++i) ss += x[t * dim + g + i] * x[t * dim + g + i];
      const double inv = 1.0 / std::sqrt(ss / group + eps);
      for (int64_t i = 0; i < group; ++i) x[t * dim + g + i] = x[t * dim + g + i] * inv * w[i];
    }
}

}  // namespace

std::vector<float> reference_logits(const TinyPlanSpec& spec, std::span<const int32_t> tokens) {
  const TinyPlanConfig& c = spec.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t D = c.hidden, H = c.heads, Hkv = c.kv_heads, hd = c.head_dim, I = c.intermediate;
  const double eps = c.eps;
  // Inverse frequencies, computed independently of the kernel library in double.
  std::vector<double> inv(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(hd));
    if (c.rope_type == "linear") f /= c.rope_factor;
    if (c.rope_type == "llama3") {
      const double old_ctx = double(c.rope_original_max_position);
      const double wavelen = 2 * M_PI / f;
      const double lo_w = old_ctx / c.rope_low_freq_factor, hi_w = old_ctx / c.rope_high_freq_factor;
      if (wavelen > lo_w) {
        f /= c.rope_factor;
      } else if (wavelen >= hi_w) {
        const double sm = (old_ctx / wavelen - c.rope_low_freq_factor) /
                          (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = (1 - sm) * f / c.rope_factor + sm * f;
      }
    }
    inv[i] = f;
  }
  auto rope = [&](Mat& x, int64_t heads) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        double* v = &x[(t * heads + h) * hd];
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double a = double(t) * inv[i], cs = std::cos(a), sn = std::sin(a);
          const int64_t i0 = c.rope_style == "interleaved" ? 2 * i : i;
          const int64_t i1 = c.rope_style == "interleaved" ? 2 * i + 1 : i + hd / 2;
          const double x0 = v[i0], x1 = v[i1];
          v[i0] = x0 * cs - x1 * sn;
          v[i1] = x1 * cs + x0 * sn;
        }
      }
  };
  const auto& embed = spec.weight("model.embed_tokens.weight");
  Mat x(n * D);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < D; ++d) x[t * D + d] = embed[tokens[t] * D + d];
  for (int l = 0; l < c.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto w = [&](const std::string& s) -> const std::vector<float>& { return spec.weight(pre + s); };
    Mat h = x;
    rms_rows(h, n, D, D, w("input_layernorm.weight"), eps);
    Mat q = matmul_t(h, n, D, w("self_attn.q_proj.weight"), H * hd, c.qkv_bias ? &w("self_attn.q_proj.bias") : nullptr);
    Mat k = matmul_t(h, n, D, w("self_attn.k_proj.weight"), Hkv * hd, c.qkv_bias ? &w("self_attn.k_proj.bias") : nullptr);
    Mat v = matmul_t(h, n, D, w("self_attn.v_proj.weight"), Hkv * hd, c.qkv_bias ? &w("self_attn.v_proj.bias") : nullptr);
    if (c.qk_norm) {
      rms_rows(q, n, H * hd, hd, w("self_attn.q_norm.weight"), eps);
      rms_rows(k, n, Hkv * hd, hd, w("self_attn.k_norm.weight"), eps);
    }
    rope(q, H);
    rope(k, Hkv);
    Mat o(n * H * hd, 0.0);
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t kh = hh / (H / Hkv);
        const int64_t lo = c.sliding_window > 0 ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
        std::vector<double> s;
        double mx = -1e300;
        for (int64_t j = lo; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[(t * H + hh) * hd + e] * k[(j * Hkv + kh) * hd + e];
          s.push_back(d * scale);
          mx = std::max(mx, s.back());
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = lo; j <= t; ++j)
          for (int64_t e = 0; e < hd; ++e)
            o[(t * H + hh) * hd + e] += s[j - lo] / sum * v[(j * Hkv + kh) * hd + e];
      }
    Mat a = matmul_t(o, n, H * hd, w("self_attn.o_proj.weight"), D, nullptr);
    for (int64_t i = 0; i < n * D; ++i) x[i] += a[i];
    Mat h2 = x;
    rms_rows(h2, n, D, D, w("post_attention_layernorm.weight"), eps);
    Mat g = matmul_t(h2, n, D, w("mlp.gate_proj.weight"), I, nullptr);
    Mat u = matmul_t(h2, n, D, w("mlp.up_proj.weight"), I, nullptr);
    for (int64_t i = 0; i < n * I; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    Mat d = matmul_t(g, n, I, w("mlp.down_proj.weight"), D, nullptr);
    for (int64_t i = 0; i < n * D; ++i) x[i] += d[i];
  }
  rms_rows(x, n, D, D, spec.weight("model.norm.weight"), eps);
  const auto& head = spec.weight(c.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  Mat logits = matmul_t(x, n, D, head, c.vocab, nullptr);
  return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace llmrt::testing
