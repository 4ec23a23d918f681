//===- Gguf.h - GGUF v2/v3 reader ------------------------------*- C++ -*-===//
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count × {string key, u32 value type, value}, tensor_count × {string name,
// u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml type, u64 offset},
// padding to general.alignment (default 32), then the data section; tensor
// offsets are relative to its start. Strings are u64 length + bytes; arrays
// are u32 element type + u64 count + elements.
// Every count, length and offset is checked against the bytes that remain
// before anything is allocated, so hostile files fail cleanly.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/MappedFile.h"
#include "compiler/frontend/Model.h"

#include <map>
#include <unordered_map>

namespace llmc {

enum class GgufValueType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5,
  Float32 = 6, Bool = 7, String = 8, Array = 9, UInt64 = 10, Int64 = 11,
  Float64 = 12,
};
const char *ggufValueTypeName(GgufValueType type);

/// One metadata value. A scalar is stored as a one-element vector of its
/// kind, an array as a vector of its element kind:
///   integers and bools → ints (UInt64 bit-cast to int64), Float32/Float64 →
///   floats, strings → strings, arrays of arrays → arrays.
struct GgufValue {
  GgufValueType type = GgufValueType::UInt8;
  /// For arrays: the element type; for scalars: equal to `type`.
  GgufValueType elementType = GgufValueType::UInt8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> arrays;

  bool isArray() const { return type == GgufValueType::Array; }
  /// Number of elements (1 for a scalar).
  size_t size() const;
};

/// ggml tensor types (numbering from ggml.h).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q8_1 = 9, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20,
  IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27,
  F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35,
};
/// Name of a ggml type ("Q4_1"), or nullptr if the number is unknown.
const char *ggmlTypeName(uint32_t type);
/// The SourceDType for F32/F16/BF16/Q8_0/Q4_0/Q4_1, else nullopt.
std::optional<SourceDType> ggmlToSourceDType(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0; // GgmlType
  /// ne[]: innermost (contiguous) dimension first, as stored.
  std::vector<int64_t> dims;
  int64_t numElements = 0;
  /// Byte range in the data section.
  uint64_t offset = 0, numBytes = 0;
};

class GgufFile {
public:
  /// Maps and validates the file at `path`.
  static llmrt::StatusOr<std::unique_ptr<GgufFile>>
  open(const std::string &path);
  /// Validates bytes the caller keeps alive for the lifetime of the result.
  static llmrt::StatusOr<std::unique_ptr<GgufFile>>
  parse(const uint8_t *data, size_t size, const std::string &nameForErrors);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string &name() const { return name_; }

  // --- metadata ---
  const std::map<std::string, GgufValue> &metadata() const { return metadata_; }
  bool has(std::string_view key) const;
  const GgufValue *findValue(std::string_view key) const;
  /// A scalar string.
  llmrt::StatusOr<std::string> getString(std::string_view key) const;
  /// A scalar of any integer type (UInt64 above INT64_MAX is an error).
  llmrt::StatusOr<int64_t> getInt(std::string_view key) const;
  /// A scalar Float32/Float64, or an integer converted to double.
  llmrt::StatusOr<double> getFloat(std::string_view key) const;
  llmrt::StatusOr<bool> getBool(std::string_view key) const;
  /// An array of strings.
  llmrt::StatusOr<std::vector<std::string>>
  getStringArray(std::string_view key) const;
  /// An array of any integer type.
  llmrt::StatusOr<std::vector<int64_t>> getIntArray(std::string_view key) const;
  /// An array of floats (or integers, converted).
  llmrt::StatusOr<std::vector<double>> getFloatArray(std::string_view key) const;

  // --- tensors ---
  /// In file order.
  const std::vector<GgufTensorInfo> &tensors() const { return tensors_; }
  const GgufTensorInfo *findTensor(std::string_view name) const;
  const uint8_t *tensorData(const GgufTensorInfo &tensor) const {
    return dataSection_ + tensor.offset;
  }

private:
  GgufFile() = default;
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensorByName_;
  const uint8_t *dataSection_ = nullptr;
};

/// The model in a GGUF file (arch llama, qwen2, qwen3): config, generation
/// defaults, tokenizer, and tensors renamed to Hugging Face names with HF
/// shapes ([out, in]); llama Q/K rows are un-permuted on read.
llmrt::StatusOr<LoadedModel> loadGgufModel(std::unique_ptr<GgufFile> file,
                                           const std::string &path);

/// The tokenizer in GGUF metadata (tokenizer.ggml.*), or nullopt when the
/// file has none.
llmrt::StatusOr<std::optional<llmrt::TokenizerData>>
readGgufTokenizer(const GgufFile &file);

/// The Hugging Face name for a GGUF tensor name ("blk.3.attn_q.weight" →
/// "model.layers.3.self_attn.q_proj.weight"), or nullopt if unknown.
std::optional<std::string> ggufToHfTensorName(std::string_view ggufName);

/// Row index of a llama.cpp-permuted Q/K weight (GGUF order) holding HF row
/// `hfRow`, for rows = numHeads * headDim. llama.cpp's converter reorders the
/// rows of each head from [2, headDim/2] to [headDim/2, 2].
int64_t ggufRowForHfRow(int64_t hfRow, int64_t headDim);

} // namespace llmc
