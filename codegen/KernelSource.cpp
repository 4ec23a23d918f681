//===- KernelSource.cpp - Helpers for writing kernel source ---------------===//

#include "codegen/KernelSource.h"

#include <cassert>
#include <cmath>
#include <cstdio>

namespace llmc {
namespace detail {

std::string floatLiteral(float value) {
  assert(std::isfinite(value) && "kernel constants must be finite");
  // 9 significant digits round-trip every float; %e keeps the form stable.
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.8ef", static_cast<double>(value));
  return buf;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string substitute(
    std::string_view tmpl,
    const std::vector<std::pair<std::string, std::string>> &bindings) {
  std::string out;
  out.reserve(tmpl.size() + 256);
  std::vector<bool> used(bindings.size(), false);
  size_t pos = 0;
  while (pos < tmpl.size()) {
    size_t open = tmpl.find("${", pos);
    if (open == std::string_view::npos) {
      out.append(tmpl.substr(pos));
      break;
    }
    out.append(tmpl.substr(pos, open - pos));
    size_t close = tmpl.find('}', open + 2);
    assert(close != std::string_view::npos && "unterminated placeholder");
    std::string_view name = tmpl.substr(open + 2, close - open - 2);
    bool found = false;
    for (size_t i = 0; i < bindings.size(); ++i) {
      if (bindings[i].first == name) {
        out.append(bindings[i].second);
        used[i] = true;
        found = true;
        break;
      }
    }
    // ${ENTRY} stays for finishSpec.
    if (!found) {
      assert(name == "ENTRY" && "unbound template placeholder");
      out.append(tmpl.substr(open, close - open + 1));
    }
    pos = close + 1;
  }
  for (size_t i = 0; i < used.size(); ++i)
    assert(used[i] && "unused template binding");
  (void)used;
  return out;
}

const char *const kBlockReductions = R"cuda(
__device__ __forceinline__ float blockSum(float v, float *red) {
  const int tid = threadIdx.x;
  red[tid] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (tid < s)
      red[tid] += red[tid + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}
__device__ __forceinline__ float blockMax(float v, float *red) {
  const int tid = threadIdx.x;
  red[tid] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (tid < s)
      red[tid] = fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}
)cuda";

int reductionBlockSize(int64_t n) {
  int block = 32;
  while (block < 1024 && int64_t(block) * 4 < n)
    block *= 2;
  return block;
}

int elementwiseBlockSize(int64_t n) {
  int block = 32;
  while (block < 256 && block < n)
    block *= 2;
  return block;
}

KernelSpec finishSpec(std::string family, const std::string &prefix,
                      const std::string &body, int blockSize,
                      std::string gridRule) {
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%012llx",
                static_cast<unsigned long long>(fnv1a64(body) >> 16));
  KernelSpec spec;
  spec.family = std::move(family);
  spec.entry = prefix + "_" + hash;
  const std::string placeholder = "${ENTRY}";
  std::string source = body;
  for (size_t at = source.find(placeholder); at != std::string::npos;
       at = source.find(placeholder, at + spec.entry.size()))
    source.replace(at, placeholder.size(), spec.entry);
  spec.source = std::move(source);
  spec.blockDim = {blockSize, 1, 1};
  spec.gridRule = std::move(gridRule);
  spec.sharedMemBytes = 0;
  return spec;
}

} // namespace detail
} // namespace llmc
