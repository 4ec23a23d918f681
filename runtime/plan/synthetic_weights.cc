#include "runtime/plan/synthetic_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "runtime/base/mix.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/quant/quant_format.h"

namespace llmrt {
namespace {

// Uniform floats from 24 bits of splitmix64's i-th output for a row's base: each value is drawn
// independently of the one before (no serial chain), so the loop keeps several in flight. (The
// 24 bits convert as a signed 32-bit integer, which vector units convert; same value.)
inline float uniform_at(uint64_t base, int64_t i, float lo, float hi) {
  const uint64_t s = mix64(base + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
  return lo + (hi - lo) * static_cast<float>(static_cast<int32_t>(s >> 40)) * (1.0f / 16777216.0f);
}

// out[i] = uniform_at(base, i, lo, hi) for i < k, compiled for the CPU kernels' ISA levels
// (runtime/cpu/cpu_features.h: baseline, AVX2, AVX-512) and run at the active one. The same IEEE
// operations in the same order (-ffp-contract=off keeps multiplies and adds apart), so the same
// floats at every level; the scalar loop took ~3 ns a weight, most of an 8B model's load.
__attribute__((always_inline)) inline void uniform_row(uint64_t base, float lo, float hi, float* out,
                                                       int64_t k) {
  for (int64_t i = 0; i < k; ++i) out[i] = uniform_at(base, i, lo, hi);
}
void uniform_row_baseline(uint64_t base, float lo, float hi, float* out, int64_t k) {
  uniform_row(base, lo, hi, out, k);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void uniform_row_avx2(uint64_t base, float lo, float hi, float* out,
                                                          int64_t k) {
  uniform_row(base, lo, hi, out, k);
}
// (AVX-512 DQ's 64-bit multiplies too: without them the loop runs at half the speed, so the AVX2
// loop serves a CPU without DQ, where no known one has AVX-512 VNNI.)
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512dq"))) void uniform_row_avx512(
    uint64_t base, float lo, float hi, float* out, int64_t k) {
  uniform_row(base, lo, hi, out, k);
}
#endif
void uniform(uint64_t base, float lo, float hi, float* out, int64_t k) {
#if defined(__x86_64__)
  static const bool dq = (__builtin_cpu_init(), __builtin_cpu_supports("avx512dq") != 0);
  if (active_isa() == CpuIsa::kAvx512Vnni && dq) return uniform_row_avx512(base, lo, hi, out, k);
  if (active_isa() != CpuIsa::kScalar) return uniform_row_avx2(base, lo, hi, out, k);
#endif
  uniform_row_baseline(base, lo, hi, out, k);
}

// One row of f32 values per the rules in the header.
void fill_row(uint64_t seed, uint64_t name_hash, int64_t row, bool matrix, bool bias, float* out,
              int64_t k) {
  const uint64_t base = seed ^ mix64(name_hash ^ mix64(static_cast<uint64_t>(row)));
  if (matrix) {
    const float a = std::sqrt(3.0f / static_cast<float>(k));
    uniform(base, -a, a, out, k);
  } else if (bias) {
    uniform(base, -0.02f, 0.02f, out, k);
  } else {
    uniform(base, -0.1f, 0.1f, out, k);
    for (int64_t i = 0; i < k; ++i) out[i] += 1.0f;
  }
}

// Runs body(i) for i in [0, n) on `threads` threads (work claimed from a counter).
template <typename Body>
void parallel(int64_t n, int threads, Body&& body) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) body(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

Status generate_synthetic_weights(const fb::Plan& plan, uint64_t seed, uint8_t* weights,
                                  uint64_t size, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!plan.tensors()) return ok_status();
  for (const fb::Tensor* t : *plan.tensors()) {
    const std::string name = t->name()->str();
    const uint64_t h = XXH3_64bits(name.data(), name.size());
    const auto* shape = t->shape();
    if (!shape || shape->size() < 1 || shape->size() > 2)
      return invalid_argument("synthetic weights: tensor '" + name + "' is not 1-D or 2-D");
    const int64_t n = shape->size() == 2 ? shape->Get(0) : 1;
    const int64_t k = shape->Get(shape->size() - 1);
    if (t->offset() > size || t->size() > size - t->offset())
      return invalid_argument("synthetic weights: tensor '" + name + "' lies outside the weight section");
    uint8_t* dst = weights + t->offset();
    const bool matrix = shape->size() == 2;
    // "x.bias", or a fused "concat(q.bias,k.bias,v.bias)"
    const bool bias = name.find(".bias") != std::string::npos;
    if ((!t->quant() || t->quant()->size() == 0) &&
        (t->dtype() == fb::DType::BF16 || t->dtype() == fb::DType::F16)) {
      if (t->size() != static_cast<uint64_t>(n * k) * 2)
        return invalid_argument("synthetic weights: tensor '" + name + "' has an inconsistent size");
      const bool bf16 = t->dtype() == fb::DType::BF16;
      parallel(n, threads, [&](int64_t r) {  // the f32 row, rounded to nearest even
        std::vector<float> x(static_cast<size_t>(k));
        std::vector<uint16_t> v(static_cast<size_t>(k));
        fill_row(seed, h, r, matrix, bias, x.data(), k);
        if (bf16)
          for (int64_t i = 0; i < k; ++i) v[i] = quant::float_to_bf16(x[i]);
        else
          for (int64_t i = 0; i < k; ++i) v[i] = quant::float_to_half(x[i]);
        std::memcpy(dst + r * k * 2, v.data(), static_cast<size_t>(k) * 2);
      });
      continue;
    }
    if (!t->quant() || t->quant()->size() == 0) {
      if (t->dtype() != fb::DType::F32 || t->size() != static_cast<uint64_t>(n * k) * 4)
        return unimplemented("synthetic weights: tensor '" + name + "' has dtype " +
                             fb::EnumNameDType(t->dtype()) + " (only f32, f16, bf16 and quantized are generated)");
      float* out = reinterpret_cast<float*>(dst);
      parallel(n, threads, [&](int64_t r) { fill_row(seed, h, r, matrix, bias, out + r * k, k); });
      continue;
    }
    ASSIGN_OR_RETURN(quant::Format f, quant::parse_format(t->quant()->str()));
    ASSIGN_OR_RETURN(quant::Layout l, quant::parse_layout(t->layout() ? t->layout()->str() : std::string()));
    ASSIGN_OR_RETURN(int64_t rb, quant::row_bytes(f, k));
    ASSIGN_OR_RETURN(uint64_t need, quant::tensor_bytes(f, l, n, k));
    if (!matrix || need != t->size())
      return invalid_argument("synthetic weights: quantized tensor '" + name + "' has an inconsistent size");
    // One unit = one tile of 8 rows (tiled layouts) or one row.
    const int64_t per = quant::is_tiled(l) ? quant::kTileRows : 1;
    parallel((n + per - 1) / per, threads, [&](int64_t u) {
      std::vector<float> x(static_cast<size_t>(k));
      std::vector<uint8_t> rows(static_cast<size_t>(per * rb), 0);
      const int64_t r0 = u * per, cnt = std::min(per, n - r0);
      for (int64_t i = 0; i < cnt; ++i) {
        fill_row(seed, h, r0 + i, true, false, x.data(), k);
        quant::quantize_row(f, x.data(), k, rows.data() + i * rb);
      }
      if (per == 1)
        std::memcpy(dst + r0 * rb, rows.data(), static_cast<size_t>(rb));
      else
        quant::pack_tile(f, l, k, rows.data(), cnt, dst + r0 * rb);
    });
  }
  return ok_status();
}

}  // namespace llmrt
