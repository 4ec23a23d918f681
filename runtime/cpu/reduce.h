// The canonical lane-8 horizontal sum shared by the CPU kernels (see kernels.h): eight partial
// sums combined as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Internal to runtime/cpu.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#define LLMRT_HAVE_X86 1
#define LLMRT_AVX2 __attribute__((target("avx2,fma")))
#define LLMRT_AVX2_F16C __attribute__((target("avx2,fma,f16c")))
#define LLMRT_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace llmrt::cpu {

inline float reduce8(const float acc[8]) {
  float s4[4];
  for (int l = 0; l < 4; ++l) s4[l] = acc[l] + acc[l + 4];
  float s0 = s4[0] + s4[2];
  float s1 = s4[1] + s4[3];
  return s0 + s1;
}

#ifdef LLMRT_HAVE_X86
LLMRT_AVX2 inline float hsum_canonical(__m256 acc) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // [s4_0+s4_2, s4_1+s4_3, ..]
  __m128 s = _mm_add_ss(s2, _mm_movehdup_ps(s2));      // s2_0 + s2_1
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace llmrt::cpu
