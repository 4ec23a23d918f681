//===- Safetensors.h - safetensors reader (single and sharded) -*- C++ -*-===//
//
// The safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {str: str}}, then the data section; offsets are relative to its start.
// Everything in the header is validated against the file before any tensor
// is read: dtype names, shapes, byte sizes, bounds and overlaps.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/frontend/MappedFile.h"
#include "compiler/frontend/Model.h"

#include <map>
#include <unordered_map>

namespace llmc {

enum class SafetensorsDType {
  BOOL, U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, F32, U64,
  I64, F64
};

/// The dtype called `name` ("F32", "BF16", ...), if it is one.
std::optional<SafetensorsDType> parseSafetensorsDType(std::string_view name);
const char *safetensorsDTypeName(SafetensorsDType type);
int64_t safetensorsDTypeSize(SafetensorsDType type);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  int64_t numElements = 0;
  /// Byte range in the data section: [begin, end).
  uint64_t begin = 0, end = 0;
};

class SafetensorsFile {
public:
  /// Maps and validates the file at `path`.
  static llmrt::StatusOr<std::unique_ptr<SafetensorsFile>>
  open(const std::string &path);
  /// Validates bytes the caller keeps alive for the lifetime of the result.
  static llmrt::StatusOr<std::unique_ptr<SafetensorsFile>>
  parse(const uint8_t *data, size_t size, const std::string &nameForErrors);

  /// Tensors in data-offset order.
  const std::vector<SafetensorsTensor> &tensors() const { return tensors_; }
  const SafetensorsTensor *find(std::string_view name) const;
  /// The "__metadata__" map (may be empty).
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// First byte of `tensor`'s data (tensor.end - tensor.begin bytes).
  const uint8_t *tensorData(const SafetensorsTensor &tensor) const {
    return dataSection_ + tensor.begin;
  }
  const std::string &name() const { return name_; }

private:
  SafetensorsFile() = default;
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  const uint8_t *dataSection_ = nullptr;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> byName_;
  std::map<std::string, std::string> metadata_;
};

/// Parses model.safetensors.index.json: returns its weight_map (tensor name →
/// shard file name). Shard names must be plain file names in the same folder.
llmrt::StatusOr<std::map<std::string, std::string>>
parseSafetensorsIndex(std::string_view json, const std::string &whereForErrors);

/// A TensorSource over one or several safetensors files. Only F32, F16 and
/// BF16 tensors are accepted, unless `keepInt32` is set: then I32 tensors
/// (the qweight/qzeros/g_idx of GPTQ and AWQ checkpoints) are accepted too,
/// kept out of tensors() and readable only through raw().
class SafetensorsSource : public TensorSource {
public:
  /// One file (model.safetensors).
  static llmrt::StatusOr<std::unique_ptr<SafetensorsSource>>
  openFile(const std::string &path, bool keepInt32 = false);
  /// A sharded checkpoint: the index's weight_map names the shards, which
  /// are opened from the index's folder.
  static llmrt::StatusOr<std::unique_ptr<SafetensorsSource>>
  openIndex(const std::string &indexPath, bool keepInt32 = false);
  /// Tensors of already parsed files; a name in two files is an error.
  static llmrt::StatusOr<std::unique_ptr<SafetensorsSource>>
  fromFiles(std::vector<std::unique_ptr<SafetensorsFile>> files,
            bool keepInt32 = false);

  const std::vector<SourceTensor> &tensors() const override { return tensors_; }
  llmrt::Status readF32(std::string_view name, float *out) const override;

  /// A stored tensor's header entry and bytes, whatever its dtype.
  struct Raw {
    const SafetensorsTensor *tensor;
    const uint8_t *data; // tensor->end - tensor->begin bytes
    const std::string *fileName;
  };
  /// Any tensor of the files by name (float or I32), or nullopt.
  std::optional<Raw> raw(std::string_view name) const;
  /// Names of every tensor in the files, I32 ones included, file by file in
  /// data order.
  std::vector<std::string> allNames() const;

private:
  SafetensorsSource() = default;
  struct Location {
    const SafetensorsFile *file;
    const SafetensorsTensor *tensor;
  };
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<SourceTensor> tensors_;
  std::unordered_map<std::string, Location> locations_;
};

} // namespace llmc
