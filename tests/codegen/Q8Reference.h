// The int8 activation rows of the fast contract as the CPU makes them, packed in the layout the
// int8-activation GEMV reads (codegen/KernelFamilies.h, emitQuantizeQ8Kernel): the reference
// for the kernels that write such rows.
#pragma once

#include "codegen/KernelFamilies.h"
#include "runtime/cpu/kernels.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace llmc::testing {

/// The fast contract's int8 activations of one row as the CPU quantizes them.
struct Q8Row {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};
inline Q8Row cpuQuantize(const float *x, int k) {
  Q8Row r;
  r.q.resize(size_t(k));
  r.d.resize(size_t(k / 32));
  r.s.resize(size_t(k / 32));
  llmrt::cpu::quantize_activations_scalar(x, k, r.q.data(), r.d.data(), r.s.data());
  return r;
}
/// Where quantize_q8 puts element e of a row (KernelFamilies.h: span, lane quad, sub-block, and
/// the 8 elements 2q, 2q+16, 2q+1, 2q+17, 2q+8, 2q+24, 2q+9, 2q+25 of the quad's bytes).
inline size_t q8CodeAt(int e) {
  const int b = e / 32, i = e % 32, span = b / 4, j = b % 4;
  const int q = (i % 8) / 2, pair = i / 8, odd = i % 2;
  static constexpr int kByte[2][4] = {{0, 4, 1, 5}, {2, 6, 3, 7}}; // [odd][pair]
  return size_t(span) * 128 + 32 * q + 8 * j + kByte[odd][pair];
}
/// The q8 row the layout describes, built here from the CPU's quantization (unused bytes 0xEE).
inline std::vector<uint8_t> packQ8Row(const Q8Row &r, int k) {
  std::vector<uint8_t> row(size_t(llmc::q8RowBytes(k)), 0xEE);
  const int spans = (k + 127) / 128;
  for (int e = 0; e < k; ++e)
    row[q8CodeAt(e)] = uint8_t(r.q[size_t(e)]);
  for (int b = 0; b < k / 32; ++b) {
    std::memcpy(&row[size_t(spans) * 128 + 4 * size_t(b)], &r.d[size_t(b)], 4);
    std::memcpy(&row[size_t(spans) * 144 + 4 * size_t(b)], &r.s[size_t(b)], 4);
  }
  return row;
}

} // namespace llmc::testing
