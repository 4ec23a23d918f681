//===- DequantTest.cpp - F16/BF16/Q8_0/Q4_0/Q4_1 to f32 -------------------===//

#include "compiler/frontend/Dequant.h"
#include "compiler/frontend/Gguf.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
