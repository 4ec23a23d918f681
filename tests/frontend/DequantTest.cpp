//===- DequantTest.cpp - F16/BF16 and ggml blocks to f32 -------------------===//

#include "compiler/frontend/Dequant.h"
#include "compiler/frontend/Gguf.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

using namespace llmc;
using namespace llmc::test;

TEST(Dequant, HalfToFloatSpecialValues) {
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x03FF), std::ldexp(1023.0f, -24)); // largest subnormal
  EXPECT_EQ(halfToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(halfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
  EXPECT_EQ(halfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(halfToFloat(0x7E00)));
}

TEST(Dequant, HalfRoundTripsEveryFiniteValue) {
  // Every finite half converts to a float that converts back to the same bits
  // (the test's own toHalf handles normal values only).
  for (uint32_t h = 0x0400; h < 0x7C00; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(toHalf(f), h) << h;
    ASSERT_EQ(toHalf(-f), h | 0x8000u) << h;
  }
}

TEST(Dequant, Bf16) {
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0xC0A0), -5.0f);
  EXPECT_EQ(bf16ToFloat(0x4049), 3.140625f);
}

TEST(Dequant, Q8_0HandBuiltBlock) {
  Bytes block;
  put<uint16_t>(block, toHalf(0.5f));
  for (int j = 0; j < 32; ++j)
    put<int8_t>(block, static_cast<int8_t>(j - 16));
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(SourceDType::Q8_0, block.data(), block.size(), 32,
                         out.data()).ok());
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(out[j], 0.5f * (j - 16)) << j;
}

TEST(Dequant, Q4_0HandBuiltBlock) {
  Bytes block;
  put<uint16_t>(block, toHalf(2.0f));
  for (int j = 0; j < 16; ++j) // low nibble j, high nibble 15 - j
    put<uint8_t>(block, static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(SourceDType::Q4_0, block.data(), block.size(), 32,
                         out.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * (15 - j - 8)) << j;
  }
}

TEST(Dequant, Q4_1HandBuiltBlock) {
  Bytes block;
  put<uint16_t>(block, toHalf(0.25f));
  put<uint16_t>(block, toHalf(-1.5f));
  for (int j = 0; j < 16; ++j)
    put<uint8_t>(block, static_cast<uint8_t>((j % 16) | (((j * 3) % 16) << 4)));
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize(SourceDType::Q4_1, block.data(), block.size(), 32,
                         out.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * j - 1.5f) << j;
    EXPECT_EQ(out[j + 16], 0.25f * ((j * 3) % 16) - 1.5f) << j;
  }
}

TEST(Dequant, SizeMismatchIsAnError) {
  Bytes block(34, 0);
  std::vector<float> out(64);
  llmrt::Status st = dequantize(SourceDType::Q8_0, block.data(), 33, 32, out.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs 34 bytes, got 33"), std::string::npos)
      << st.message();
  st = dequantize(SourceDType::Q4_1, block.data(), block.size(), 31, out.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("whole blocks"), std::string::npos) << st.message();
  EXPECT_EQ(storageBytes(SourceDType::Q4_0, 64), 36);
  EXPECT_EQ(storageBytes(SourceDType::Q4_0, -1), -1);
  EXPECT_EQ(storageBytes(SourceDType::F32, std::numeric_limits<int64_t>::max()), -1);
}

// quant_ref.gguf was written by the `gguf` Python package (see
// data/make_quant_ref.py): each quantized tensor next to gguf.quants'
// dequantization of it.
TEST(Dequant, MatchesGgufPythonReference) {
  auto file = GgufFile::open(std::string(LLMC_FRONTEND_TEST_DATA) + "/quant_ref.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  int checked = 0;
  for (const char *name : {"Q8_0", "Q4_0", "Q4_1", "F16", "BF16"}) {
    const GgufTensorInfo *q = (*file)->findTensor(name);
    const GgufTensorInfo *ref = (*file)->findTensor(std::string(name) + ".expected");
    ASSERT_TRUE(q && ref) << name;
    ASSERT_EQ(q->numElements, ref->numElements);
    std::optional<SourceDType> dtype = ggmlToSourceDType(q->type);
    ASSERT_TRUE(dtype) << name;
    EXPECT_STREQ(sourceDTypeName(*dtype), name);
    std::vector<float> got(q->numElements), want(ref->numElements);
    ASSERT_TRUE(dequantize(*dtype, (*file)->tensorData(*q), q->numBytes,
                           q->numElements, got.data()).ok());
    ASSERT_TRUE(dequantize(SourceDType::F32, (*file)->tensorData(*ref),
                           ref->numBytes, ref->numElements, want.data()).ok());
    for (int64_t i = 0; i < q->numElements; ++i)
      ASSERT_EQ(got[i], want[i]) << name << " element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// ---- ggml's wider blocks (Q5_0, Q5_1, the k-quants, IQ4_NL, IQ4_XS) --------

namespace {

std::string fnv1a64(const float *v, int64_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto *bytes = reinterpret_cast<const uint8_t *>(v);
  for (int64_t i = 0; i < n * 4; ++i)
    h = (h ^ bytes[i]) * 0x100000001B3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace

// Files llama.cpp quantized (tests/reference/make_kquant_fixtures.py): every tensor dequantized
// here is what the `gguf` package's numpy dequantization gives, value for value (a hash of its
// f32 bytes, zeros' signs included), so the formats that hold these blocks (heldFormat) hold
// ggml's values exactly.
TEST(Dequant, LlamaCppKQuantFilesGiveTheGgufPackagesValues) {
  const std::string dir = LLMC_KQUANT_FIXTURES;
  std::ifstream in(dir + "/reference.json");
  ASSERT_TRUE(in) << dir << "/reference.json";
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::set<std::string> typesSeen;
  ASSERT_EQ(ref["files"].size(), 8u);
  for (const auto &[file, entry] : ref["files"].items()) {
    SCOPED_TRACE(file);
    auto gguf = GgufFile::open(dir + "/" + file);
    ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
    ASSERT_EQ((*gguf)->tensors().size(), entry["tensors"].size());
    for (const GgufTensorInfo &t : (*gguf)->tensors()) {
      SCOPED_TRACE(t.name);
      const auto &want = entry["tensors"].at(t.name);
      ASSERT_STREQ(ggmlTypeName(t.type), want["type"].get<std::string>().c_str());
      auto dtype = ggmlToSourceDType(t.type);
      ASSERT_TRUE(dtype.has_value());
      typesSeen.insert(sourceDTypeName(*dtype));
      std::vector<float> out(static_cast<size_t>(t.numElements));
      ASSERT_TRUE(dequantize(*dtype, (*gguf)->tensorData(t), t.numBytes, t.numElements, out.data()).ok());
      EXPECT_EQ(fnv1a64(out.data(), t.numElements), want["fnv1a64"].get<std::string>());
      // Held rows: the repacked blocks' bytes are a row of their format, read back the same.
      if (auto f = heldFormat(*dtype); f && t.dims.size() == 2) {
        const int64_t k = t.dims[0], rowBytes = *llmrt::quant::row_bytes(*f, k);
        std::vector<uint8_t> row(static_cast<size_t>(rowBytes));
        std::vector<float> back(static_cast<size_t>(k));
        const int64_t srcRow = storageBytes(*dtype, k), last = t.dims[1] - 1;
        repackBlocks(*dtype, (*gguf)->tensorData(t) + last * srcRow, k / blockElements(*dtype), row.data());
        EXPECT_EQ(llmrt::quant::check_row(*f, row.data(), k), "");
        llmrt::quant::dequantize_row(*f, row.data(), k, back.data());
        EXPECT_EQ(std::memcmp(back.data(), out.data() + last * k, k * sizeof(float)), 0);
      }
    }
  }
  EXPECT_EQ(typesSeen, (std::set<std::string>{"F32", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1",
                                              "IQ4_NL", "IQ4_XS"}));
}

TEST(Dequant, WiderBlocksHaveTheirGgmlSizesAndFormats) {
  EXPECT_EQ(storageBytes(SourceDType::Q5_0, 64), 44);
  EXPECT_EQ(storageBytes(SourceDType::Q5_1, 64), 48);
  EXPECT_EQ(storageBytes(SourceDType::Q4_K, 512), 288);
  EXPECT_EQ(storageBytes(SourceDType::Q5_K, 256), 176);
  EXPECT_EQ(storageBytes(SourceDType::Q6_K, 256), 210);
  EXPECT_EQ(storageBytes(SourceDType::Q6_K, 128), -1); // not a whole super-block
  EXPECT_EQ(storageBytes(SourceDType::Q3_K, 512), 220);
  EXPECT_EQ(storageBytes(SourceDType::Q2_K, 512), 168);
  EXPECT_EQ(storageBytes(SourceDType::IQ4_NL, 64), 36);
  EXPECT_EQ(storageBytes(SourceDType::IQ4_XS, 256), 136);
  EXPECT_EQ(storageBytes(SourceDType::IQ4_XS, 32), -1);
  const std::pair<SourceDType, const char *> held[] = {
      {SourceDType::Q8_0, "int8-g32-f16-sym"}, {SourceDType::Q4_0, "int4-g32-f16-sym"},
      {SourceDType::Q4_1, "int4-g32-f16-min"}, {SourceDType::Q5_0, "int5-g32-f16-sym"},
      {SourceDType::Q5_1, "int5-g32-f16-min"}, {SourceDType::Q4_K, "int4-g256s32-f16-min"},
      {SourceDType::Q5_K, "int5-g256s32-f16-min"}, {SourceDType::Q6_K, "int8-g256s16-f16-sym"},
      {SourceDType::Q3_K, "int4-g256s16-f16-sym"}, {SourceDType::IQ4_NL, "int4-g32-f16-nl"},
      {SourceDType::IQ4_XS, "int4-g256s32-f16-nl"}, {SourceDType::Q2_K, "int4-g256s16-f16-min"}};
  // Bytes per 256 elements held: Q4_K 148 (file 144), Q5_K 180 (176), Q6_K 274 (210), IQ4_XS 138
  // (136), Q3_K 146 (110), Q2_K 164 (84): the sub-scale formats; Q5_0 and Q5_1 are the file's (int5).
  const std::pair<SourceDType, int64_t> heldBlockBytes[] = {
      {SourceDType::Q4_K, 148}, {SourceDType::Q5_K, 180}, {SourceDType::Q6_K, 274}, {SourceDType::IQ4_XS, 138},
      {SourceDType::Q3_K, 146}, {SourceDType::Q2_K, 164},
      {SourceDType::Q5_0, 8 * 22}, {SourceDType::Q5_1, 8 * 24}};
  for (const auto &[type, bytes] : heldBlockBytes)
    EXPECT_EQ(*llmrt::quant::row_bytes(*heldFormat(type), 256), bytes) << sourceDTypeName(type);
  for (const auto &[type, name] : held) {
    EXPECT_EQ(llmrt::quant::format_name(*heldFormat(type)), name) << sourceDTypeName(type);
    // Widened exactly where the held block is larger than the file's (Dequant.cpp's stack buffer
    // takes 274 bytes: Q6_K's).
    const int64_t heldBytes = *llmrt::quant::row_bytes(*heldFormat(type), blockElements(type));
    EXPECT_EQ(widenedBlocks(type), heldBytes > blockBytes(type)) << sourceDTypeName(type);
    EXPECT_LE(heldBytes, 274) << sourceDTypeName(type);
  }
  EXPECT_FALSE(heldFormat(SourceDType::F16).has_value());
}

// One Q6_K block built by hand: element e = 16 g + i has code (e * 7) % 64 and scale g - 8, d = 0.5:
// its value is (0.5 * (g - 8)) * (code - 32), through both the f32 path and the held format.
TEST(Dequant, Q6KBlockFollowsItsLayout) {
  uint8_t block[210] = {};
  auto codeOf = [](int e) { return (e * 7) % 64; };
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, quarter = e % 128 / 32, l = e % 32, q = codeOf(e);
    uint8_t &low = block[64 * n + l + 32 * (quarter % 2)];
    low |= static_cast<uint8_t>(quarter < 2 ? q & 15 : (q & 15) << 4);
    block[128 + 32 * n + l] |= static_cast<uint8_t>((q >> 4) << (2 * quarter));
  }
  for (int g = 0; g < 16; ++g)
    block[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(g - 8));
  block[208] = 0x00, block[209] = 0x38; // f16 0.5
  std::vector<float> out(256);
  ASSERT_TRUE(dequantize(SourceDType::Q6_K, block, sizeof block, 256, out.data()).ok());
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(out[e], (0.5f * static_cast<float>(e / 16 - 8)) * static_cast<float>(codeOf(e) - 32)) << e;
}
