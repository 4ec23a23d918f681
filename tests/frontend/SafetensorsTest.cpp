//===- SafetensorsTest.cpp - safetensors reader, good and bad files -------===//

#include "compiler/frontend/Safetensors.h"

#include "TestFiles.h"

#include <gtest/gtest.h>

using namespace llmc;
using namespace llmc::test;

namespace {

std::string errorOf(const Bytes &bytes) {
  auto file = SafetensorsFile::parse(bytes.data(), bytes.size(), "t.safetensors");
  return file.ok() ? std::string("<ok>") : file.status().message();
}

#define EXPECT_ERROR_CONTAINS(bytes, text)                                     \
  do {                                                                         \
    std::string msg_ = errorOf(bytes);                                         \
    EXPECT_NE(msg_.find(text), std::string::npos) << "error: " << msg_;        \
  } while (0)

} // namespace

TEST(Safetensors, ReadsF32F16Bf16) {
  SafetensorsBuilder b;
  b.addF32("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  Bytes half;
  for (float f : {0.5f, -2.0f, 1024.0f, 0.0f})
    put<uint16_t>(half, toHalf(f));
  b.add("h", "F16", {4}, half);
  Bytes bf;
  for (float f : {1.0f, -3.5f})
    put<uint16_t>(bf, toBf16(f));
  b.add("b", "BF16", {1, 2}, bf);
  TempDir dir;
  std::string path = dir.write("model.safetensors", b.build());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const SafetensorsTensor *a = (*file)->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->dtype, SafetensorsDType::F32);

  auto source = SafetensorsSource::openFile(path);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  const SourceTensor *h = (*source)->find("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->dtype, SourceDType::F16);
  std::vector<float> out(6);
  ASSERT_TRUE((*source)->readF32("a", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  out.assign(4, 0);
  ASSERT_TRUE((*source)->readF32("h", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -2.0f, 1024.0f, 0.0f}));
  out.assign(2, 0);
  ASSERT_TRUE((*source)->readF32("b", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -3.5f}));
  llmrt::Status missing = (*source)->readF32("nope", out.data());
  EXPECT_EQ(missing.code(), llmrt::StatusCode::kNotFound);
}

TEST(Safetensors, UnalignedDataIsReadCorrectly) {
  // Header length 13 puts the data section at an odd address.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  Bytes data = {0xAA};
  Bytes f = floatBytes({3.25f, -7.0f});
  data.insert(data.end(), f.begin(), f.end());
  Bytes bytes = makeSafetensors(header, data);
  auto file = SafetensorsFile::parse(bytes.data(), bytes.size(), "t");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file).value());
  auto source = SafetensorsSource::fromFiles(std::move(files));
  ASSERT_TRUE(source.ok());
  std::vector<float> out(2);
  ASSERT_TRUE((*source)->readF32("x", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{3.25f, -7.0f}));
}

TEST(Safetensors, BadInputsGiveClearErrors) {
  const Bytes four = floatBytes({1, 2, 3, 4});
  auto file = [&](const std::string &tensorJson) {
    return makeSafetensors("{" + tensorJson + "}", four);
  };
  EXPECT_ERROR_CONTAINS(Bytes({1, 2, 3}), "too short");
  {
    Bytes b;
    put<uint64_t>(b, 1000);
    b.push_back('{');
    EXPECT_ERROR_CONTAINS(b, "header length 1000 exceeds the file");
  }
  {
    Bytes b;
    put<uint64_t>(b, ~0ull);
    EXPECT_ERROR_CONTAINS(b, "exceeds the file");
  }
  EXPECT_ERROR_CONTAINS(makeSafetensors("[1,2]", {}), "not a JSON object");
  EXPECT_ERROR_CONTAINS(makeSafetensors("{\"a\": ", {}), "not valid JSON");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"Q9","shape":[4],"data_offsets":[0,16]})"),
      "tensor 'a': unknown dtype 'Q9'");
  EXPECT_ERROR_CONTAINS(file(R"("a":{"shape":[4],"data_offsets":[0,16]})"),
                        "tensor 'a': missing or non-string 'dtype'");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"),
      "shape entries must be non-negative integers");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":"4","data_offsets":[0,16]})"),
      "non-array 'shape'");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]})"),
      "out of range");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[8,4]})"),
      "is after end");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]})"),
      "shape has 3 elements of F32");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0]})"),
      "'data_offsets' must be an array [begin, end]");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]})"),
      "overflows");
  EXPECT_ERROR_CONTAINS(
      file(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})"),
      "overlap");
  EXPECT_ERROR_CONTAINS(file(R"("__metadata__":{"k":1})"), "not a string");
  EXPECT_ERROR_CONTAINS(file(R"("a":[1])"), "entry is not an object");
}

TEST(Safetensors, EveryTruncationFailsCleanly) {
  SafetensorsBuilder b;
  b.addF32("a", {2, 2}, {1, 2, 3, 4});
  b.addF32("b", {3}, {5, 6, 7});
  Bytes full = b.build();
  ASSERT_EQ(errorOf(full), "<ok>");
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + n);
    EXPECT_NE(errorOf(cut), "<ok>") << "prefix of " << n << " bytes parsed";
  }
}

TEST(Safetensors, UnsupportedDtypeIsNamedBySource) {
  SafetensorsBuilder b;
  b.add("ids", "I64", {2}, Bytes(16, 0));
  Bytes bytes = b.build();
  auto file = SafetensorsFile::parse(bytes.data(), bytes.size(), "t");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file).value());
  auto source = SafetensorsSource::fromFiles(std::move(files));
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find("tensor 'ids' has dtype I64"),
            std::string::npos)
      << source.status().message();
}

TEST(Safetensors, ShardedIndex) {
  TempDir dir;
  SafetensorsBuilder s1, s2;
  s1.addF32("a", {2}, {1, 2});
  s2.addF32("b", {3}, {3, 4, 5});
  dir.write("m-1.safetensors", s1.build());
  dir.write("m-2.safetensors", s2.build());
  std::string index = dir.write(
      "model.safetensors.index.json",
      std::string(R"({"metadata":{"total_size":20},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})"));
  auto source = SafetensorsSource::openIndex(index);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ((*source)->tensors().size(), 2u);
  std::vector<float> out(3);
  ASSERT_TRUE((*source)->readF32("b", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{3, 4, 5}));

  // The index names a tensor its shard lacks.
  std::string bad = dir.write(
      "bad.index.json",
      std::string(R"({"weight_map":{"a":"m-1.safetensors","c":"m-2.safetensors"}})"));
  auto badSource = SafetensorsSource::openIndex(bad);
  ASSERT_FALSE(badSource.ok());
  EXPECT_NE(badSource.status().message().find("tensor 'c' in shard 'm-2.safetensors'"),
            std::string::npos)
      << badSource.status().message();

  // A missing shard.
  std::string missing = dir.write(
      "missing.index.json", std::string(R"({"weight_map":{"a":"m-9.safetensors"}})"));
  auto missingSource = SafetensorsSource::openIndex(missing);
  ASSERT_FALSE(missingSource.ok());
  EXPECT_NE(missingSource.status().message().find("m-9.safetensors"), std::string::npos);

  // Same tensor in two shards.
  SafetensorsBuilder s3;
  s3.addF32("a", {2}, {9, 9});
  s3.addF32("x", {1}, {0});
  dir.write("m-3.safetensors", s3.build());
  std::string dup = dir.write(
      "dup.index.json",
      std::string(R"({"weight_map":{"a":"m-1.safetensors","x":"m-3.safetensors"}})"));
  auto dupSource = SafetensorsSource::openIndex(dup);
  ASSERT_FALSE(dupSource.ok());
  EXPECT_NE(dupSource.status().message().find("tensor 'a' appears in both"),
            std::string::npos)
      << dupSource.status().message();
}

TEST(Safetensors, IndexRejectsPathsOutsideTheFolder) {
  for (const char *text :
       {R"({"weight_map":{"a":"../evil.safetensors"}})",
        R"({"weight_map":{"a":"/etc/passwd"}})", R"({"weight_map":{"a":".."}})",
        R"({"weight_map":{"a":""}})"}) {
    auto map = parseSafetensorsIndex(text, "index.json");
    ASSERT_FALSE(map.ok()) << text;
    EXPECT_NE(map.status().message().find("not a plain file name"), std::string::npos)
        << map.status().message();
  }
  EXPECT_FALSE(parseSafetensorsIndex(R"({"weight_map":{"a":3}})", "i").ok());
  EXPECT_FALSE(parseSafetensorsIndex(R"({"metadata":{}})", "i").ok());
  EXPECT_FALSE(parseSafetensorsIndex("not json", "i").ok());
}
