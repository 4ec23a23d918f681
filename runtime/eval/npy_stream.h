// NumPy .npy files for `llmrt eval`, streamed so memory stays bounded by one row:
//   - token ids: a 1-D int32 (or int64) array, read whole;
//   - log-probabilities: a 2-D float16 (or float32) array [positions, vocab], read row by row
//     (--kl-base) or written row by row under a header whose shape is fixed up front
//     (--save-logprobs).
// Files come from users: the header (magic, version, dict, dtype, order, shape) and the file size
// are checked when the file is opened; a file that disagrees is an error, never a crash.
// Formats 1.0, 2.0 and 3.0 are read; 1.0 is written (the header is padded to 64 bytes).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

/// IEEE binary16 <-> binary32, round to nearest even, overflow to +-inf.
uint16_t float_to_f16(float x);
float f16_to_float(uint16_t h);

/// The parsed header of an .npy file.
struct NpyHeader {
  std::string descr;            // "<f2", "<f4", "<i4", "<i8"
  bool fortran_order = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;       // bytes before the array data
};

/// Parses the header of `bytes` (the first bytes of a file, at least the whole header). `what`
/// names the file in errors.
StatusOr<NpyHeader> parse_npy_header(std::span<const uint8_t> bytes, const std::string& what);

/// A 1-D integer array (int32 or int64 values that fit int32), e.g. token ids.
StatusOr<std::vector<int32_t>> read_npy_int_vector(const std::string& path);

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

/// A 2-D float16 or float32 array read one row at a time, in order.
class NpyRowReader {
 public:
  static StatusOr<std::unique_ptr<NpyRowReader>> open(const std::string& path);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  /// Reads the next row into out (cols() entries). Error past the last row or on a short read.
  Status read_row(std::span<float> out);

 private:
  NpyRowReader() = default;
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int64_t rows_ = 0, cols_ = 0, next_ = 0;
  size_t item_ = 0;  // 2 or 4
  std::vector<uint8_t> buf_;
};

/// Writes a float16 array [rows, cols] row by row. The header states the final shape, so the
/// file is complete only when every row has been written and finish() returned ok.
class NpyF16Writer {
 public:
  static StatusOr<std::unique_ptr<NpyF16Writer>> create(const std::string& path, int64_t rows, int64_t cols);
  Status append_row(std::span<const double> row);
  /// Flushes and closes; error unless rows() rows were written.
  Status finish();
  int64_t rows_written() const { return written_; }

 private:
  NpyF16Writer() = default;
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int64_t rows_ = 0, cols_ = 0, written_ = 0;
  std::vector<uint16_t> buf_;
};

}  // namespace llmrt
