// Rotary position embedding with Hugging Face transformers semantics.
//  * inverse frequencies: inv_freq[i] = 1 / theta^(2i / head_dim) in f32
//    (_compute_default_rope_parameters); "linear" divides them by factor (the same as dividing
//    positions by factor); "llama3" applies _compute_llama3_parameters' frequency-dependent
//    scaling (low frequencies / factor, high frequencies unchanged, smooth blend in between).
//  * angle = position * inv_freq[i] (f32), cos/sin in f32.
//  * "neox": element i pairs with i + head_dim/2 (rotate_half); "interleaved": 2i with 2i+1.
#include <cmath>
#include <string>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/vector_ops.h"

namespace llmrt::cpu {

StatusOr<RopeConfig::Type> parse_rope_type(std::string_view name) {
  if (name.empty() || name == "default") return RopeConfig::Type::kDefault;
  if (name == "linear") return RopeConfig::Type::kLinear;
  if (name == "llama3") return RopeConfig::Type::kLlama3;
  return unimplemented("rope_type '" + std::string(name) +
                       "' is not supported (expected default, linear or llama3)");
}

StatusOr<std::vector<float>> rope_inv_freq(const RopeConfig& c) {
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > kMaxRopeHeadDim)
    return invalid_argument("rope head_dim must be even and in [2, 1024], got " +
                            std::to_string(c.head_dim));
  if (!(c.theta > 0.0) || !std::isfinite(c.theta))
    return invalid_argument("rope theta must be positive and finite");
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  const float base = static_cast<float>(c.theta);
  const float dim = static_cast<float>(c.head_dim);
  for (int i = 0; i < half; ++i)
    inv[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / dim);
  if (c.type == RopeConfig::Type::kDefault) return inv;
  if (!(c.factor > 0.0) || !std::isfinite(c.factor))
    return invalid_argument("rope factor must be positive and finite");
  const float factor = static_cast<float>(c.factor);
  if (c.type == RopeConfig::Type::kLinear) {
    for (float& f : inv) f /= factor;
    return inv;
  }
  // llama3
  if (!(c.low_freq_factor > 0.0) || !(c.high_freq_factor > 0.0) ||
      c.high_freq_factor == c.low_freq_factor || !std::isfinite(c.low_freq_factor) ||
      !std::isfinite(c.high_freq_factor))
    return invalid_argument(
        "llama3 rope needs positive, distinct low_freq_factor and high_freq_factor");
  if (c.original_max_position <= 0)
    return invalid_argument("llama3 rope needs original_max_position > 0");
  const float old_ctx = static_cast<float>(c.original_max_position);
  const float low = static_cast<float>(c.low_freq_factor);
  const float high = static_cast<float>(c.high_freq_factor);
  const float low_freq_wavelen = static_cast<float>(c.original_max_position / c.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(c.original_max_position / c.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (float& f : inv) {
    const float wavelen = two_pi / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

void rope_angles(int32_t position, const float* inv_freq, int half, float* cs, float* sn) {
  const float pos = static_cast<float>(position);
  for (int i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    cs[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

void rope_heads(const float* x, int num_heads, int head_dim, const float* cs, const float* sn,
                bool interleaved, float* y) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    const float* xi = x + static_cast<int64_t>(h) * head_dim;
    float* yo = y + static_cast<int64_t>(h) * head_dim;
    if (interleaved) {
      for (int i = 0; i < half; ++i) {
        const float x0 = xi[2 * i], x1 = xi[2 * i + 1];
        yo[2 * i] = x0 * cs[i] - x1 * sn[i];
        yo[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
      }
    } else {
      vec::rotate(xi, xi + half, cs, sn, yo, yo + half, half);
    }
  }
}

void rope(const float* x, int64_t rows, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, bool interleaved, float* y, ThreadPool& pool) {
  const int64_t width = static_cast<int64_t>(num_heads) * head_dim;
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    float cs[kMaxRopeHeadDim / 2];
    float sn[kMaxRopeHeadDim / 2];
    for (int64_t t = b; t < e; ++t) {
      rope_angles(positions[t], inv_freq, head_dim / 2, cs, sn);
      rope_heads(x + t * width, num_heads, head_dim, cs, sn, interleaved, y + t * width);
    }
  });
}

}  // namespace llmrt::cpu
