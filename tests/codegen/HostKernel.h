// Tests of generated kernels on the CPU: a kernel's exact source compiled
// with the host C++ compiler against HostEmulation.h into a shared library,
// and the helpers the numerics tests share.
#pragma once

#include "CodegenTestUtil.h"
#include "codegen/KernelSpec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace llmc::testing {

/// A kernel's source built with the host compiler into a shared library
/// exposing `llmc_host_run(<params>, unsigned grid)`.
class HostKernel {
public:
  /// `params`: the kernel's C parameter list; `args`: its argument names.
  HostKernel(const KernelSpec &spec, const std::string &params,
             const std::string &args) {
    if (!dir_.ok()) {
      error_ = "no temp dir";
      return;
    }
    std::string harness =
        "#include \"HostEmulation.h\"\n" + spec.source +
        "\nextern \"C\" void llmc_host_run(" + params + ", unsigned grid) {\n"
        "  llmcLaunch(grid, " + std::to_string(spec.blockDim[0]) +
        ", [&] { " + spec.entry + "(" + args + "); });\n}\n"
        "extern \"C\" size_t llmc_host_prefetches(const void **log) {\n"
        "  *log = llmcPrefetchLog.data();\n  return llmcPrefetchLog.size();\n}\n";
    std::string src = dir_.file("harness.cpp"), lib = dir_.file("harness.so");
    llmc::testing::writeFile(src, harness.data(), harness.size());
    auto r = llmc::testing::runCommand(
        std::string("'") + LLMC_HOST_CXX +
            "' -std=c++20 -O0 -fPIC -shared -pthread -Wall "
            "-Wno-unknown-pragmas -Wno-unused-const-variable -I'" +
            LLMC_HOST_EMULATION_DIR + "' '" + src + "' -o '" + lib + "'",
        dir_.file("build.log"));
    if (r.exitCode != 0) {
      error_ = "host build failed:\n" + r.output + "\n" + harness;
      return;
    }
    handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      error_ = std::string("dlopen: ") + dlerror();
      return;
    }
    fn_ = dlsym(handle_, "llmc_host_run");
    if (!fn_)
      error_ = "llmc_host_run not found";
  }
  ~HostKernel() {
    if (handle_)
      dlclose(handle_);
  }
  bool ok() const { return fn_ != nullptr; }
  const std::string &error() const { return error_; }
  template <class Fn> Fn get() const { return reinterpret_cast<Fn>(fn_); }
  /// The L2 prefetches the last run asked for, in order (HostEmulation.h's LlmcPrefetch).
  struct Prefetch {
    unsigned block, thread;
    unsigned long long address;
    unsigned bytes;
  };
  std::vector<Prefetch> prefetches() const {
    auto log = reinterpret_cast<size_t (*)(const void **)>(dlsym(handle_, "llmc_host_prefetches"));
    const void *data = nullptr;
    const size_t n = log ? log(&data) : 0;
    const Prefetch *p = static_cast<const Prefetch *>(data);
    return std::vector<Prefetch>(p, p + n);
  }

private:
  TempDir dir_;
  void *handle_ = nullptr;
  void *fn_ = nullptr;
  std::string error_;
};

/// Deterministic values in [lo, hi).
inline std::vector<float> randomVector(size_t n, uint32_t seed, float lo = -2.0f,
                                float hi = 2.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float &x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * float((s >> 40) & 0xFFFFFF) / float(1 << 24);
  }
  return v;
}

inline void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= tol * std::max(1.0, std::fabs(want[i])))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want "
                      << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

inline bool bitEqual(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// gridDim.x for T rows of S sequences by the spec's grid rule (KernelSpec.h).
inline int gridFor(const KernelSpec &spec, int T, int S = 0) {
  std::string rule = spec.gridRule;
  if (const size_t plus = rule.find(" + seqs*"); plus != std::string::npos) {
    size_t end = plus + 8; // the rule without " + seqs*<s>", plus s per sequence
    while (end < rule.size() && std::isdigit(static_cast<unsigned char>(rule[end])))
      ++end;
    KernelSpec base = spec;
    base.gridRule = rule.substr(0, plus) + rule.substr(end);
    return gridFor(base, T) + S * std::stoi(rule.substr(plus + 8, end - plus - 8));
  }
  int small = 1; // " x<m> when rows<=<r>"
  if (const size_t x = rule.find(" x"); x != std::string::npos) {
    const size_t when = rule.find(" when rows<=");
    EXPECT_NE(when, std::string::npos) << rule;
    if (T <= std::stoi(rule.substr(when + 12)))
      small = std::stoi(rule.substr(x + 2, when - x - 2));
    rule = rule.substr(0, x);
  }
  if (rule == "rows")
    return T * small;
  if (rule.rfind("rows/", 0) == 0) {
    const size_t star = rule.find('*');
    EXPECT_NE(star, std::string::npos) << rule;
    const int c = std::stoi(rule.substr(5, star - 5));
    return (T + c - 1) / c * std::stoi(rule.substr(star + 1)) * small;
  }
  EXPECT_EQ(rule.rfind("rows*", 0), 0u) << rule;
  return T * std::stoi(rule.substr(5)) * small;
}

} // namespace llmc::testing
