//===- MappedFile.h - Read-only memory-mapped file -------------*- C++ -*-===//
#pragma once

#include "runtime/base/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace llmc {

/// A whole file mapped read-only; unmapped on destruction. Pages are loaded
/// on first touch, so opening a multi-GB checkpoint costs no RAM.
class MappedFile {
public:
  static llmrt::StatusOr<std::shared_ptr<MappedFile>>
  open(const std::string &path);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  const std::string &path() const { return path_; }

private:
  MappedFile() = default;
  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// Reads a whole (small) text file such as config.json.
llmrt::StatusOr<std::string> readTextFile(const std::string &path);

} // namespace llmc
