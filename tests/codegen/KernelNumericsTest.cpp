// The generated kernels' exact source, compiled as host C++ (HostEmulation.h
// emulates threads, blocks, shared memory and __syncthreads) and run on the
// CPU against scalar double-precision references of PROGRAM.md semantics.
// The RoPE frequencies are also checked against Hugging Face transformers
// (fixtures/rope_inv_freq.txt, from gen_rope_fixture.py).

#include "codegen/KernelFamilies.h"

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using llmc::KernelSpec;
using llmc::testing::HostKernel;
using llmc::testing::randomVector;
using llmc::testing::expectNear;
using llmc::testing::bitEqual;
using llmc::testing::gridFor;

// --- rms_norm ---------------------------------------------------------------

using RmsNormFn = void (*)(const float *, const float *, float *, int,
                           unsigned);

std::vector<double> rmsNormRef(const std::vector<float> &x,
                               const std::vector<float> &w, int T, int D,
                               int G, float eps) {
  std::vector<double> y(size_t(T) * D);
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < D / G; ++g) {
      const float *xs = &x[size_t(t) * D + size_t(g) * G];
      double ss = 0;
      for (int j = 0; j < G; ++j)
        ss += double(xs[j]) * xs[j];
      double inv = 1.0 / std::sqrt(ss / G + double(eps));
      for (int j = 0; j < G; ++j)
        y[size_t(t) * D + size_t(g) * G + j] = xs[j] * inv * w[j];
    }
  return y;
}

/// Every block's thread 0 asks the L2 for the norm's weight (whole 16-byte units) before its
/// wait on the kernel before (sm_90+; the host emulation logs it), and nothing else.
void expectWeightPrefetch(const HostKernel &k, const std::vector<float> &w, int grid) {
  const auto log = k.prefetches();
  ASSERT_EQ(log.size(), size_t(grid));
  for (int b = 0; b < grid; ++b) {
    EXPECT_EQ(log[b].block, unsigned(b));
    EXPECT_EQ(log[b].thread, 0u);
    EXPECT_EQ(log[b].address, reinterpret_cast<unsigned long long>(w.data()));
    EXPECT_EQ(log[b].bytes, w.size() * 4 / 16 * 16);
  }
}

void checkRmsNorm(int D, int G, float eps) {
  SCOPED_TRACE("D=" + std::to_string(D) + " G=" + std::to_string(G));
  auto spec = llmc::emitRmsNormKernel({D, G, eps});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  HostKernel k(*spec, "const float *x, const float *w, float *out, int T",
               "x, w, out, T");
  ASSERT_TRUE(k.ok()) << k.error();
  auto run = k.get<RmsNormFn>();

  const int T = 5;
  std::vector<float> x = randomVector(size_t(T) * D, 1);
  std::vector<float> w = randomVector(G, 2, 0.5f, 1.5f);
  x[3] = 40.0f; // one large value
  std::vector<float> out(x.size(), NAN), out2(x.size(), NAN);
  run(x.data(), w.data(), out.data(), T, gridFor(*spec, T));
  expectNear(out, rmsNormRef(x, w, T, D, G, eps), 2e-6, "rms_norm");

  expectWeightPrefetch(k, w, gridFor(*spec, T));
  // Any grid size gives the same bits (grid-stride loop, fixed order).
  run(x.data(), w.data(), out2.data(), T, 2);
  EXPECT_TRUE(bitEqual(out, out2));
  // A row's result does not depend on the other rows of the batch.
  std::vector<float> one(D, NAN);
  run(x.data() + size_t(2) * D, w.data(), one.data(), 1, gridFor(*spec, 1));
  EXPECT_EQ(std::memcmp(one.data(), out.data() + size_t(2) * D,
                        D * sizeof(float)),
            0);
  // T = 0 writes nothing.
  std::vector<float> untouched(D, 7.0f);
  run(x.data(), w.data(), untouched.data(), 0, 1);
  EXPECT_EQ(untouched[0], 7.0f);
}

TEST(KernelNumerics, RmsNorm) {
  checkRmsNorm(100, 100, 1e-5f); // 32 threads, 4 per thread, ragged tail
  checkRmsNorm(576, 576, 1e-5f); // SmolLM2 hidden: 256 threads, tail
  checkRmsNorm(96, 24, 1e-6f);   // per-head groups
}

// --- add_rms_norm -----------------------------------------------------------

using AddRmsNormFn = void (*)(const float *, const float *, const float *,
                              float *, float *, int, unsigned);

TEST(KernelNumerics, AddRmsNorm) {
  const int D = 200, T = 3;
  const float eps = 1e-5f;
  auto spec = llmc::emitAddRmsNormKernel({D, D, eps});
  ASSERT_TRUE(spec.ok());
  HostKernel k(*spec,
               "const float *x, const float *residual, const float *w, "
               "float *normed, float *sum, int T",
               "x, residual, w, normed, sum, T");
  ASSERT_TRUE(k.ok()) << k.error();
  auto run = k.get<AddRmsNormFn>();
  std::vector<float> x = randomVector(size_t(T) * D, 3);
  std::vector<float> r = randomVector(size_t(T) * D, 4);
  std::vector<float> w = randomVector(D, 5, 0.5f, 1.5f);
  std::vector<float> normed(x.size()), sum(x.size());
  run(x.data(), r.data(), w.data(), normed.data(), sum.data(), T, T);
  expectWeightPrefetch(k, w, T);

  std::vector<float> wantSum(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    wantSum[i] = x[i] + r[i];
  EXPECT_TRUE(bitEqual(sum, wantSum));
  expectNear(normed, rmsNormRef(wantSum, w, T, D, D, eps), 2e-6,
             "add_rms_norm");

  // In place: sum written over the residual buffer.
  std::vector<float> res = r, normed2(x.size());
  run(x.data(), res.data(), w.data(), normed2.data(), res.data(), T, 1);
  EXPECT_TRUE(bitEqual(res, wantSum));
  EXPECT_TRUE(bitEqual(normed2, normed));
}

// --- rope -------------------------------------------------------------------

/// HF inv_freq, written from transformers' modeling_rope_utils formulas.
std::vector<double> ropeInvFreqRef(const llmc::RopeParams &p) {
  const int half = int(p.headDim / 2);
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i)
    inv[i] = 1.0 / std::pow(p.theta, double(2 * i) / double(p.headDim));
  if (p.ropeType == "linear")
    for (double &f : inv)
      f /= p.factor;
  if (p.ropeType == "llama3") {
    double old = double(p.originalMaxPosition);
    double lowWl = old / p.lowFreqFactor, highWl = old / p.highFreqFactor;
    for (double &f : inv) {
      double wl = 2 * M_PI / f;
      double scaled = wl > lowWl ? f / p.factor : f;
      double smooth =
          (old / wl - p.lowFreqFactor) / (p.highFreqFactor - p.lowFreqFactor);
      double smoothed = (1 - smooth) * scaled / p.factor + smooth * scaled;
      bool medium = !(wl < highWl) && !(wl > lowWl);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

using RopeFn = void (*)(const float *, const int *, float *, int, unsigned);

void checkRope(const llmc::RopeParams &p) {
  SCOPED_TRACE(p.style + "/" + p.ropeType);
  auto spec = llmc::emitRopeKernel(p);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto inv = llmc::computeRopeInvFreq(p);
  ASSERT_TRUE(inv.ok());
  std::vector<double> invRef = ropeInvFreqRef(p);
  ASSERT_EQ(inv->size(), invRef.size());
  for (size_t i = 0; i < invRef.size(); ++i)
    EXPECT_NEAR((*inv)[i], invRef[i], 1e-6 * invRef[i]) << i;

  HostKernel k(*spec, "const float *x, const int *positions, float *out, int T",
               "x, positions, out, T");
  ASSERT_TRUE(k.ok()) << k.error();
  auto run = k.get<RopeFn>();
  const int H = int(p.numHeads), hd = int(p.headDim), W = H * hd;
  std::vector<int> pos = {0, 1, 7, 100, 4095, 31};
  const int T = int(pos.size());
  std::vector<float> x = randomVector(size_t(T) * W, 6);
  std::vector<float> out(x.size(), NAN);
  run(x.data(), pos.data(), out.data(), T, T);

  std::vector<double> want(x.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        // HF: freqs = float(position) * inv_freq in fp32, cos/sin of that.
        float angle = float(pos[t]) * float(invRef[i]);
        double c = std::cos(double(angle)), s = std::sin(double(angle));
        size_t base = size_t(t) * W + size_t(h) * hd;
        size_t a = p.style == "neox" ? base + i : base + 2 * i;
        size_t b = p.style == "neox" ? a + hd / 2 : a + 1;
        want[a] = x[a] * c - x[b] * s;
        want[b] = x[b] * c + x[a] * s;
      }
  expectNear(out, want, 2e-6, "rope");

  // In place, with a small grid: same bits.
  std::vector<float> inplace = x;
  run(inplace.data(), pos.data(), inplace.data(), T, 2);
  EXPECT_TRUE(bitEqual(inplace, out));
}

TEST(KernelNumerics, RopeDefaultNeox) {
  llmc::RopeParams p;
  p.numHeads = 3;
  p.headDim = 16;
  p.theta = 10000.0;
  checkRope(p);
}

TEST(KernelNumerics, RopeLlama3Interleaved) {
  llmc::RopeParams p;
  p.numHeads = 3;
  p.headDim = 16;
  p.theta = 10000.0;
  p.style = "interleaved";
  p.ropeType = "llama3";
  p.factor = 8.0;
  p.originalMaxPosition = 256; // puts pairs in all three bands
  checkRope(p);
}

TEST(KernelNumerics, RopeLinearNeoxWide) {
  llmc::RopeParams p;
  p.numHeads = 9;
  p.headDim = 64;
  p.theta = 100000.0;
  p.ropeType = "linear";
  p.factor = 4.0;
  checkRope(p);
}

/// computeRopeInvFreq against Hugging Face transformers' own numbers.
TEST(KernelNumerics, RopeInvFreqMatchesTransformers) {
  std::ifstream in(std::string(LLMC_CODEGEN_FIXTURES) + "/rope_inv_freq.txt");
  ASSERT_TRUE(in) << "missing fixture rope_inv_freq.txt";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream ss(line);
    llmc::RopeParams p;
    std::string colon;
    ss >> p.ropeType >> p.theta >> p.headDim >> p.factor >> p.lowFreqFactor >>
        p.highFreqFactor >> p.originalMaxPosition >> colon;
    ASSERT_EQ(colon, ":") << line;
    std::vector<float> want;
    float v;
    while (ss >> v)
      want.push_back(v);
    SCOPED_TRACE(line.substr(0, 60));
    auto got = llmc::computeRopeInvFreq(p);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) // fp32 pow: within a few ulp
      EXPECT_NEAR((*got)[i], want[i], 4e-7 * want[i]) << "pair " << i;
    ++cases;
  }
  EXPECT_GE(cases, 7);
}

// --- silu_mul ---------------------------------------------------------------

using SiluMulFn = void (*)(const float *, const float *, float *, int,
                           unsigned);
using SiluMulFusedFn = void (*)(const float *, float *, int, unsigned);

double siluRef(double g) { return g / (1.0 + std::exp(-g)); }

// Widths with one chunk per row, several (the last one partial) with 16-byte loads, and several
// without (I not a multiple of 4); grids covering every (row, chunk) and far smaller ones.
TEST(KernelNumerics, SiluMulBothForms) {
  for (const int I : {100, 2052, 1030}) {
    SCOPED_TRACE("I = " + std::to_string(I));
    const int T = 4;
    std::vector<float> gate = randomVector(size_t(T) * I, 7, -8.0f, 8.0f);
    std::vector<float> up = randomVector(size_t(T) * I, 8);
    gate[0] = -100.0f; // exp overflow side: silu -> -0
    gate[1] = 100.0f;
    std::vector<double> want(size_t(T) * I);
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = siluRef(gate[i]) * up[i];

    auto split = llmc::emitSiluMulKernel({I, false});
    ASSERT_TRUE(split.ok());
    ASSERT_EQ(split->gridRule.rfind("rows*", 0), 0u) << split->gridRule;
    const unsigned chunks = unsigned(std::stoul(split->gridRule.substr(5)));
    EXPECT_EQ(chunks, I == 100 ? 1u : I == 2052 ? 3u : 5u);
    HostKernel ks(*split, "const float *gate, const float *up, float *out, int T",
                  "gate, up, out, T");
    ASSERT_TRUE(ks.ok()) << ks.error();
    std::vector<float> out(want.size(), NAN);
    ks.get<SiluMulFn>()(gate.data(), up.data(), out.data(), T, T * chunks);
    expectNear(out, want, 2e-6, "silu_mul");
    // In place (out aliases gate), with a grid of 3 blocks walking every (row, chunk).
    std::vector<float> inPlace = gate;
    ks.get<SiluMulFn>()(inPlace.data(), up.data(), inPlace.data(), T, 3);
    EXPECT_TRUE(bitEqual(inPlace, out));

    std::vector<float> gu(size_t(T) * 2 * I);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < I; ++j) {
        gu[size_t(t) * 2 * I + j] = gate[size_t(t) * I + j];
        gu[size_t(t) * 2 * I + I + j] = up[size_t(t) * I + j];
      }
    auto fused = llmc::emitSiluMulKernel({I, true});
    ASSERT_TRUE(fused.ok());
    EXPECT_EQ(fused->gridRule, split->gridRule);
    HostKernel kf(*fused, "const float *gate_up, float *out, int T",
                  "gate_up, out, T");
    ASSERT_TRUE(kf.ok()) << kf.error();
    for (const unsigned grid : {T * chunks, 3u}) {
      std::vector<float> outFused(want.size(), NAN);
      kf.get<SiluMulFusedFn>()(gu.data(), outFused.data(), T, grid);
      EXPECT_TRUE(bitEqual(outFused, out)) << "grid " << grid;
    }
  }
}

} // namespace
