//===- QuantCheckpointTest.cpp - GPTQ/AWQ checkpoints as plain weights ----===//
//
// Fixtures: tests/fixtures/quant/<name>/ from tests/reference/make_quant_models.py
// (GPTQModel and AutoAWQ packers). packer_dequant.safetensors holds rows of the
// packer's own dequantization of every quantized linear; readF32 must match it
// bit for bit, and readPacked must be the same numbers in cpu_row_groups form.
// The synthetic tests build qweight/qzeros/scales by hand (independently of
// the reader) to pin the packing conventions and the error messages.
//
//===----------------------------------------------------------------------===//

#include "compiler/frontend/HfModel.h"
#include "compiler/frontend/QuantCheckpoint.h"
#include "compiler/frontend/Safetensors.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

using namespace llmc;
using namespace llmc::test;
namespace quant = llmrt::quant;

namespace {

const std::string kFixtures = LLMC_QUANT_FIXTURES;

const char *kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                          "mlp.down_proj"};

struct FixtureCase {
  const char *name;
  const char *format; // expected nativeFormat of every linear; "" = none
};

const FixtureCase kCases[] = {
    {"gptq_4bit_sym", "int4-g32-f16-sym"},
    {"gptq_4bit_asym", "int4-g32-f16-zp"},
    {"gptq_8bit_sym", "int8-g32-f16-sym"},
    {"gptq_4bit_desc_act", "int4-g32-f16-sym"},  // columns reordered by group
    {"awq_4bit_gemm", "int4-g32-f16-zp"},
};

bool sameBits(const float *a, const float *b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

class QuantFixture : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(QuantFixture, MatchesPackerDequantAndRepacksExactly) {
  const FixtureCase &c = GetParam();
  const std::string dir = kFixtures + "/" + c.name;
  auto model = loadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const TensorSource &src = *model->tensors;
  auto dequant = SafetensorsFile::open(dir + "/packer_dequant.safetensors");
  ASSERT_TRUE(dequant.ok()) << dequant.status().to_string();

  int checked = 0;
  for (int64_t layer = 0; layer < model->config.numLayers; ++layer) {
    for (const char *lin : kLinears) {
      const std::string prefix = "model.layers." + std::to_string(layer) + "." + lin;
      const std::string name = prefix + ".weight";
      SCOPED_TRACE(name);
      const SourceTensor *t = src.find(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->dtype, SourceDType::Packed);
      ASSERT_EQ(t->shape.size(), 2u);
      const int64_t n = t->shape[0], k = t->shape[1];
      // The checkpoint's own tensors are hidden behind X.weight.
      for (const char *part : {".qweight", ".qzeros", ".scales", ".g_idx"})
        EXPECT_EQ(src.find(prefix + part), nullptr) << part;

      std::vector<float> w(n * k);
      ASSERT_TRUE(src.readF32(name, w.data()).ok());
      // desc_act: column j holds input perm[j] (a permutation); otherwise inputs in order.
      std::vector<int64_t> perm(k);
      for (int64_t j = 0; j < k; ++j)
        perm[j] = j;
      if (auto p = src.inputPermutation(name)) {
        EXPECT_EQ(std::string(c.name), "gptq_4bit_desc_act");
        ASSERT_EQ(static_cast<int64_t>(p->size()), k);
        std::vector<int64_t> sorted = *p;
        std::sort(sorted.begin(), sorted.end());
        ASSERT_EQ(sorted, perm) << "not a permutation";
        EXPECT_NE(*p, perm) << "identity permutation reported";
        perm = *p;
      } else {
        EXPECT_NE(std::string(c.name), "gptq_4bit_desc_act");
      }

      // Rows 0..7 and n-8..n-1 of the packer's dequantization.
      const SafetensorsTensor *ref = (*dequant)->find(name);
      ASSERT_NE(ref, nullptr);
      ASSERT_EQ(ref->dtype, SafetensorsDType::F32);
      ASSERT_EQ(ref->shape, (std::vector<int64_t>{16, k}));
      std::vector<float> refRows(16 * k);
      std::memcpy(refRows.data(), (*dequant)->tensorData(*ref), refRows.size() * 4);
      for (int64_t r = 0; r < 16; ++r) {
        int64_t row = r < 8 ? r : n - 16 + r;
        std::vector<float> want(k);
        for (int64_t j = 0; j < k; ++j)
          want[j] = refRows[r * k + perm[j]];
        EXPECT_TRUE(sameBits(&w[row * k], want.data(), k))
            << "row " << row << " differs from the packer's dequantization";
      }

      auto format = src.nativeFormat(name);
      if (*c.format == '\0') {
        EXPECT_FALSE(format.has_value()) << quant::format_name(*format);
        std::vector<uint8_t> none(16);
        EXPECT_FALSE(src.readPacked(name, none.data()).ok());
        ++checked;
        continue;
      }
      ASSERT_TRUE(format.has_value());
      EXPECT_EQ(quant::format_name(*format), c.format);
      auto rowBytes = quant::row_bytes(*format, k);
      ASSERT_TRUE(rowBytes.ok());
      std::vector<uint8_t> packed(n * *rowBytes);
      ASSERT_TRUE(src.readPacked(name, packed.data()).ok());
      std::vector<float> row(k);
      for (int64_t o = 0; o < n; ++o) {
        EXPECT_EQ(quant::check_row(*format, &packed[o * *rowBytes], k), "");
        quant::dequantize_row(*format, &packed[o * *rowBytes], k, row.data());
        ASSERT_TRUE(sameBits(row.data(), &w[o * k], k)) << "packed row " << o;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7 * model->config.numLayers);

  // Float tensors pass through.
  const SourceTensor *embed = src.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_NE(embed->dtype, SourceDType::Packed);
  std::vector<float> e(embed->numElements());
  EXPECT_TRUE(src.readF32("model.embed_tokens.weight", e.data()).ok());
  std::vector<float> scratch(64 * 1024);
  EXPECT_FALSE(
      src.readF32("model.layers.0.self_attn.q_proj.scales", scratch.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantFixture, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(QuantFixtures, DescActFixtureHasPermutedGroups) {
  // desc_act is only a test of the column reordering when g_idx really is permuted.
  auto file = SafetensorsFile::open(kFixtures + "/gptq_4bit_desc_act/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const SafetensorsTensor *g = (*file)->find("model.layers.0.mlp.down_proj.g_idx");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->dtype, SafetensorsDType::I32);
  std::vector<int32_t> idx(g->numElements);
  std::memcpy(idx.data(), (*file)->tensorData(*g), idx.size() * 4);
  bool permuted = false;
  for (size_t i = 0; i < idx.size(); ++i)
    permuted |= idx[i] != static_cast<int32_t>(i / 32);
  EXPECT_TRUE(permuted);
}

// ---------------------------------------------------------------------------
// Synthetic checkpoints.

Bytes i32Bytes(const std::vector<uint32_t> &v) {
  Bytes b;
  for (uint32_t x : v)
    put<uint32_t>(b, x);
  return b;
}
Bytes f16Bytes(const std::vector<float> &v) {
  Bytes b;
  for (float x : v)
    put<uint16_t>(b, toHalf(x));
  return b;
}

struct Synthetic {
  Bytes bytes;
  std::vector<std::unique_ptr<SafetensorsFile>> files;

  llmrt::StatusOr<std::unique_ptr<QuantCheckpointSource>>
  open(const SafetensorsBuilder &b, const QuantConfig &cfg) {
    bytes = b.build();
    auto file = SafetensorsFile::parse(bytes.data(), bytes.size(), "synthetic");
    if (!file.ok())
      return file.status();
    std::vector<std::unique_ptr<SafetensorsFile>> fs;
    fs.push_back(std::move(file).value());
    auto source = SafetensorsSource::fromFiles(std::move(fs), true);
    if (!source.ok())
      return source.status();
    return QuantCheckpointSource::create(std::move(source).value(), cfg);
  }
};

QuantConfig gptqConfig(int bits, int64_t group, bool sym, bool v1) {
  QuantConfig c;
  c.method = QuantConfig::Method::Gptq;
  c.bits = bits;
  c.groupSize = group;
  c.sym = sym;
  c.zerosMinusOne = v1;
  return c;
}

/// GPTQ 4-bit linear, in = 64, out = 8, group 32: codes q(i, o) and zero
/// points z(g, o) chosen by formula, packed here the way the format says.
struct GptqLinear {
  int64_t in = 64, out = 8, group = 32;
  static uint32_t q(int64_t i, int64_t o) { return (i * 7 + o * 3) % 16; }
  static uint32_t z(int64_t g, int64_t o) { return (g * 5 + o) % 16; } // includes 0
  static float s(int64_t g, int64_t o) { return 0.125f * (1 + g + 2 * o); }

  void add(SafetensorsBuilder &b, bool v1) const {
    std::vector<uint32_t> qweight(in / 8 * out, 0);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        qweight[(i / 8) * out + o] |= q(i, o) << (4 * (i % 8));
    const int64_t groups = in / group;
    std::vector<uint32_t> qzeros(groups, 0);
    std::vector<float> scales;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t o = 0; o < out; ++o) {
        qzeros[g] |= z(g, o) << (4 * o);
        scales.push_back(s(g, o));
      }
      if (v1) // GPTQModel's v2 -> v1: the whole word minus 0x11111111
        qzeros[g] -= 0x11111111u;
    }
    std::vector<uint32_t> gIdx;
    for (int64_t i = 0; i < in; ++i)
      gIdx.push_back(static_cast<uint32_t>(i / group));
    b.add("lin.qweight", "I32", {in / 8, out}, i32Bytes(qweight));
    b.add("lin.qzeros", "I32", {groups, 1}, i32Bytes(qzeros));
    b.add("lin.scales", "F16", {groups, out}, f16Bytes(scales));
    b.add("lin.g_idx", "I32", {in}, i32Bytes(gIdx));
  }
};

TEST(QuantSynthetic, GptqV1ZerosAreUndoneOnTheWholeWord) {
  for (bool v1 : {true, false}) {
    SCOPED_TRACE(v1 ? "v1" : "v2");
    GptqLinear lin;
    SafetensorsBuilder b;
    lin.add(b, v1);
    b.addF32("norm.weight", {4}, {1, 2, 3, 4});
    Synthetic syn;
    auto src = syn.open(b, gptqConfig(4, 32, false, v1));
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    const SourceTensor *t = (*src)->find("lin.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{8, 64}));
    EXPECT_NE((*src)->find("norm.weight"), nullptr);
    std::vector<float> w(8 * 64);
    ASSERT_TRUE((*src)->readF32("lin.weight", w.data()).ok());
    for (int64_t o = 0; o < 8; ++o)
      for (int64_t i = 0; i < 64; ++i) {
        float want = GptqLinear::s(i / 32, o) *
                     (static_cast<float>(GptqLinear::q(i, o)) -
                      static_cast<float>(GptqLinear::z(i / 32, o)));
        ASSERT_EQ(w[o * 64 + i], want) << "o " << o << " i " << i;
      }
    auto f = (*src)->nativeFormat("lin.weight");
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(quant::format_name(*f), "int4-g32-f16-zp");
    std::vector<uint8_t> packed(8 * *quant::row_bytes(*f, 64));
    ASSERT_TRUE((*src)->readPacked("lin.weight", packed.data()).ok());
    // Row 1, group 1: scale bits, zero point, then nibbles (i, i + 16).
    const uint8_t *g1 = &packed[1 * 2 * 19 + 19];
    EXPECT_EQ(g1[0] | (g1[1] << 8), toHalf(GptqLinear::s(1, 1)));
    EXPECT_EQ(g1[2], GptqLinear::z(1, 1));
    EXPECT_EQ(g1[3], GptqLinear::q(32, 1) | (GptqLinear::q(48, 1) << 4));
  }
}

TEST(QuantSynthetic, AwqInterleavedColumns) {
  // AWQ GEMM: qweight [in, out / 8], column 8c + {0,2,4,6,1,3,5,7}[p] in nibble p.
  const int64_t in = 32, out = 16;
  auto q = [](int64_t i, int64_t o) { return static_cast<uint32_t>((i + 3 * o) % 16); };
  auto z = [](int64_t o) { return static_cast<uint32_t>((o * 5 + 1) % 16); };
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<uint32_t> qweight(in * out / 8, 0), qzeros(out / 8, 0);
  for (int64_t i = 0; i < in; ++i)
    for (int64_t c = 0; c < out / 8; ++c)
      for (int p = 0; p < 8; ++p)
        qweight[i * (out / 8) + c] |= q(i, 8 * c + order[p]) << (4 * p);
  for (int64_t c = 0; c < out / 8; ++c)
    for (int p = 0; p < 8; ++p)
      qzeros[c] |= z(8 * c + order[p]) << (4 * p);
  std::vector<float> scales;
  for (int64_t o = 0; o < out; ++o)
    scales.push_back(0.5f + 0.25f * o);
  SafetensorsBuilder b;
  b.add("a.qweight", "I32", {in, out / 8}, i32Bytes(qweight));
  b.add("a.qzeros", "I32", {1, out / 8}, i32Bytes(qzeros));
  b.add("a.scales", "F16", {1, out}, f16Bytes(scales));
  QuantConfig cfg;
  cfg.method = QuantConfig::Method::Awq;
  cfg.bits = 4;
  cfg.groupSize = 32;
  cfg.sym = false;
  Synthetic syn;
  auto src = syn.open(b, cfg);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  std::vector<float> w(out * in);
  ASSERT_TRUE((*src)->readF32("a.weight", w.data()).ok());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      ASSERT_EQ(w[o * in + i], scales[o] * (static_cast<float>(q(i, o)) -
                                            static_cast<float>(z(o))))
          << "o " << o << " i " << i;
}

TEST(QuantSynthetic, Gptq8BitSymIsSignedInt8) {
  // 8-bit, one group per row (group_size -1), all zero points 128 (v1: 127).
  const int64_t in = 32, out = 4;
  std::vector<uint32_t> qweight(in / 4 * out, 0);
  auto q = [](int64_t i, int64_t o) { return static_cast<uint32_t>((i * 37 + o * 11) % 256); };
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o)
      qweight[(i / 4) * out + o] |= q(i, o) << (8 * (i % 4));
  SafetensorsBuilder b;
  b.add("l.qweight", "I32", {in / 4, out}, i32Bytes(qweight));
  b.add("l.qzeros", "I32", {1, 1}, i32Bytes({0x7F7F7F7Fu}));
  b.add("l.scales", "F16", {1, out}, f16Bytes({0.5f, 1.0f, 2.0f, -0.25f}));
  Synthetic syn;
  auto src = syn.open(b, gptqConfig(8, -1, true, true));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto f = (*src)->nativeFormat("l.weight");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(quant::format_name(*f), "int8-row-f16-sym");
  std::vector<float> w(out * in), row(in);
  ASSERT_TRUE((*src)->readF32("l.weight", w.data()).ok());
  EXPECT_EQ(w[1 * in + 5], 1.0f * (static_cast<float>(q(5, 1)) - 128.0f));
  std::vector<uint8_t> packed(out * *quant::row_bytes(*f, in));
  ASSERT_TRUE((*src)->readPacked("l.weight", packed.data()).ok());
  for (int64_t o = 0; o < out; ++o) {
    quant::dequantize_row(*f, &packed[o * (2 + in)], in, row.data());
    EXPECT_TRUE(sameBits(row.data(), &w[o * in], in)) << "row " << o;
  }
}

void expectCreateError(const SafetensorsBuilder &b, const QuantConfig &cfg,
                       const std::string &needle) {
  Synthetic syn;
  auto src = syn.open(b, cfg);
  ASSERT_FALSE(src.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(src.status().message().find(needle), std::string::npos)
      << src.status().message();
}

TEST(QuantSynthetic, MalformedTensorsGiveClearErrors) {
  const QuantConfig cfg = gptqConfig(4, 32, true, true);
  const Bytes q8x8 = i32Bytes(std::vector<uint32_t>(8 * 8, 0x88888888u));
  const Bytes z2 = i32Bytes({0x77777777u, 0x77777777u});
  const Bytes s2x8 = f16Bytes(std::vector<float>(16, 1.0f));
  auto gIdx = [](int64_t n, int32_t bad = -1, int64_t at = -1) {
    std::vector<uint32_t> v;
    for (int64_t i = 0; i < n; ++i)
      v.push_back(static_cast<uint32_t>(i == at ? bad : i / 32));
    return i32Bytes(v);
  };
  {
    SafetensorsBuilder b; // qweight out 4 but scales out 8
    b.add("x.qweight", "I32", {8, 4}, i32Bytes(std::vector<uint32_t>(32, 0)));
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.add("x.g_idx", "I32", {64}, gIdx(64));
    expectCreateError(b, cfg, "tensor 'x.qweight' has shape [8, 4], expected [in * 4 / 32, 8]");
  }
  {
    SafetensorsBuilder b; // 3 groups for 64 inputs in groups of 32
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {3, 1}, i32Bytes({0, 0, 0}));
    b.add("x.scales", "F16", {3, 8}, f16Bytes(std::vector<float>(24, 1.0f)));
    b.add("x.g_idx", "I32", {64}, gIdx(64));
    expectCreateError(b, cfg, "tensor 'x.scales' has 3 groups (rows), but 64 inputs in "
                              "groups of 32 make 2");
  }
  {
    SafetensorsBuilder b; // qzeros with the wrong group count
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {1, 1}, i32Bytes({0}));
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.add("x.g_idx", "I32", {64}, gIdx(64));
    expectCreateError(b, cfg, "tensor 'x.qzeros' has shape [1, 1], expected [2, 1]");
  }
  {
    SafetensorsBuilder b; // g_idx too short
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.add("x.g_idx", "I32", {32}, gIdx(32));
    expectCreateError(b, cfg, "tensor 'x.g_idx' has shape [32], expected [64]");
  }
  {
    SafetensorsBuilder b; // g_idx value out of range
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.add("x.g_idx", "I32", {64}, gIdx(64, 2, 40));
    expectCreateError(b, cfg, "tensor 'x.g_idx' maps input 40 to group 2, outside [0, 2)");
  }
  {
    SafetensorsBuilder b; // negative g_idx value
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.add("x.g_idx", "I32", {64}, gIdx(64, -1, 3));
    expectCreateError(b, cfg, "maps input 3 to group -1");
  }
  {
    SafetensorsBuilder b; // missing scales
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    expectCreateError(b, cfg, "quantized linear 'x.weight': tensor 'x.scales' is missing");
  }
  {
    SafetensorsBuilder b; // qweight stored as F32
    b.add("x.qweight", "F32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    expectCreateError(b, cfg, "tensor 'x.qweight' has dtype F32, expected I32");
  }
  {
    SafetensorsBuilder b; // an I32 tensor that belongs to no linear
    b.add("stray.qzeros", "I32", {2, 1}, z2);
    expectCreateError(b, cfg, "tensor 'stray.qzeros' has dtype I32 but is not");
  }
  {
    SafetensorsBuilder b; // desc_act without g_idx
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    QuantConfig desc = cfg;
    desc.descAct = true;
    expectCreateError(b, desc, "tensor 'x.g_idx' is missing (desc_act needs it)");
  }
  {
    SafetensorsBuilder b; // both X.weight and X.qweight
    b.add("x.qweight", "I32", {8, 8}, q8x8);
    b.add("x.qzeros", "I32", {2, 1}, z2);
    b.add("x.scales", "F16", {2, 8}, s2x8);
    b.addF32("x.weight", {1}, {0.0f});
    expectCreateError(b, cfg, "tensor 'x.weight' exists next to 'x.qweight'");
  }
}

TEST(QuantSynthetic, Int32TensorsNeedAQuantizationConfig) {
  SafetensorsBuilder b;
  b.add("x.qweight", "I32", {1, 1}, i32Bytes({0}));
  Bytes bytes = b.build();
  auto file = SafetensorsFile::parse(bytes.data(), bytes.size(), "plain");
  ASSERT_TRUE(file.ok());
  std::vector<std::unique_ptr<SafetensorsFile>> fs;
  fs.push_back(std::move(file).value());
  auto source = SafetensorsSource::fromFiles(std::move(fs));
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("has dtype I32"), std::string::npos);
}

TEST(QuantSynthetic, DescActPermutedGroupsAreReorderedByGroup) {
  GptqLinear lin;
  // Same codes, but g_idx alternates groups: valid, not contiguous, 32 inputs per group.
  std::vector<uint32_t> qweight(lin.in / 8 * lin.out, 0);
  for (int64_t i = 0; i < lin.in; ++i)
    for (int64_t o = 0; o < lin.out; ++o)
      qweight[(i / 8) * lin.out + o] |= GptqLinear::q(i, o) << (4 * (i % 8));
  auto open = [&](const std::vector<uint32_t> &gIdx) {
    SafetensorsBuilder b;
    b.add("lin.qweight", "I32", {lin.in / 8, lin.out}, i32Bytes(qweight));
    b.add("lin.qzeros", "I32", {2, 1}, i32Bytes({0x77777777u, 0x77777777u}));
    std::vector<float> scales;
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t o = 0; o < lin.out; ++o)
        scales.push_back(GptqLinear::s(g, o));
    b.add("lin.scales", "F16", {2, lin.out}, f16Bytes(scales));
    b.add("lin.g_idx", "I32", {lin.in}, i32Bytes(gIdx));
    QuantConfig cfg = gptqConfig(4, 32, true, true);
    cfg.descAct = true;
    auto syn = std::make_unique<Synthetic>();
    auto src = syn->open(b, cfg);
    return std::make_pair(std::move(syn), std::move(src));
  };
  std::vector<uint32_t> alternating;
  for (int64_t i = 0; i < lin.in; ++i)
    alternating.push_back(static_cast<uint32_t>(i % 2));
  auto [syn, src] = open(alternating);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto format = (*src)->nativeFormat("lin.weight");
  ASSERT_TRUE(format.has_value());
  EXPECT_EQ(quant::format_name(*format), "int4-g32-f16-sym");
  auto perm = (*src)->inputPermutation("lin.weight");
  ASSERT_TRUE(perm.has_value());
  for (int64_t j = 0; j < lin.in; ++j)  // group 0 (even inputs) first, each group in input order
    EXPECT_EQ((*perm)[j], j < 32 ? 2 * j : 2 * (j - 32) + 1) << j;
  // readF32 column j = input perm[j]; the packed rows hold the same values.
  std::vector<float> w(lin.out * lin.in), row(lin.in);
  ASSERT_TRUE((*src)->readF32("lin.weight", w.data()).ok());
  std::vector<uint8_t> packed(lin.out * *quant::row_bytes(*format, lin.in));
  ASSERT_TRUE((*src)->readPacked("lin.weight", packed.data()).ok());
  for (int64_t o = 0; o < lin.out; ++o) {
    quant::dequantize_row(*format, &packed[o * (packed.size() / lin.out)], lin.in, row.data());
    for (int64_t j = 0; j < lin.in; ++j) {
      const int64_t i = (*perm)[j];
      const float want = GptqLinear::s(i % 2, o) * (static_cast<float>(GptqLinear::q(i, o)) - 8.0f);
      ASSERT_EQ(w[o * lin.in + j], want) << o << " " << j;
      ASSERT_EQ(row[j], want) << o << " " << j;
    }
  }

  // Uneven groups (33 + 31 inputs) cannot be regrouped: exact f32, inputs in order.
  std::vector<uint32_t> uneven(lin.in, 1);
  for (int64_t i = 0; i < 33; ++i)
    uneven[2 * i < lin.in ? 2 * i : 2 * (i - 32) + 1] = 0;
  auto [syn2, src2] = open(uneven);
  ASSERT_TRUE(src2.ok()) << src2.status().to_string();
  EXPECT_FALSE((*src2)->nativeFormat("lin.weight").has_value());
  EXPECT_FALSE((*src2)->inputPermutation("lin.weight").has_value());
  ASSERT_TRUE((*src2)->readF32("lin.weight", w.data()).ok());
  EXPECT_EQ(w[3], GptqLinear::s(1, 0) * (static_cast<float>(GptqLinear::q(3, 0)) - 8.0f));
}

// ---------------------------------------------------------------------------
// quantization_config.

llmrt::StatusOr<std::optional<QuantConfig>> parse(const std::string &qc) {
  return parseQuantConfig("{\"quantization_config\": " + qc + "}", "config.json");
}

void expectParseError(const std::string &qc, const std::string &needle) {
  auto r = parse(qc);
  ASSERT_FALSE(r.ok()) << qc;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(QuantConfigParse, ReadsGptqAndAwq) {
  auto none = parseQuantConfig("{\"hidden_size\": 4}", "c");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto g = parse(R"({"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": false,
                     "desc_act": true, "checkpoint_format": "gptq_v2"})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE(g->has_value());
  EXPECT_EQ((*g)->method, QuantConfig::Method::Gptq);
  EXPECT_EQ((*g)->bits, 8);
  EXPECT_EQ((*g)->groupSize, 128);
  EXPECT_FALSE((*g)->sym);
  EXPECT_TRUE((*g)->descAct);
  EXPECT_FALSE((*g)->zerosMinusOne);

  auto v1 = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": -1})");
  ASSERT_TRUE(v1.ok());
  EXPECT_TRUE((*v1)->zerosMinusOne);
  EXPECT_EQ((*v1)->groupSize, -1);

  auto a = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm",
                     "zero_point": true})");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ((*a)->method, QuantConfig::Method::Awq);
  EXPECT_EQ((*a)->groupSize, 64);
}

TEST(QuantConfigParse, Errors) {
  expectParseError(R"({"quant_method": "bitsandbytes", "bits": 4, "group_size": 32})",
                   "quant_method 'bitsandbytes' is not supported (gptq, awq)");
  expectParseError(R"({"quant_method": "gptq", "bits": 3, "group_size": 32})",
                   "3-bit gptq is not supported (4, 8)");
  expectParseError(R"({"quant_method": "awq", "bits": 8, "group_size": 32})",
                   "8-bit awq is not supported (4)");
  expectParseError(R"({"quant_method": "gptq", "group_size": 32})",
                   "'quantization_config.bits' is missing");
  expectParseError(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})",
                   "'quantization_config.group_size' must be positive or -1");
  expectParseError(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemv"})",
                   "AWQ version 'gemv' is not supported (gemm)");
  expectParseError(R"({"quant_method": "gptq", "bits": 4, "group_size": 32,
                       "checkpoint_format": "marlin"})",
                   "GPTQ checkpoint format 'marlin' is not supported");
  expectParseError(R"({"quant_method": "gptq", "bits": 4, "group_size": 32,
                       "dynamic": {".*down.*": {"bits": 8}}})",
                   "'dynamic'");
  expectParseError(R"({"bits": 4})", "'quantization_config.quant_method' is missing");
  expectParseError(R"("gptq")", "must be an object");
}

} // namespace
