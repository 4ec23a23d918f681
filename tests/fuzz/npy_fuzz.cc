// libFuzzer target: .npy files given to `llmrt eval` (--token-ids, --kl-base), through the header
// parser and both file readers of runtime/eval/npy_stream.h. Any bytes must give an error or a
// consistent result: a dtype, non-negative dims, data after the header, no more ids than bytes,
// rows read in full up to rows() and an error after. Anything else traps. Seeds: corpus/npy/ (tests/fuzz/corpus/
// make_seeds.py writes them).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/eval/npy_stream.h"

namespace {

std::string scratch_path() {
  static const std::string path = "/tmp/llmc_npy_fuzz_" + std::to_string(getpid()) + ".npy";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = llmrt::parse_npy_header({data, size}, "fuzz.npy");
  if (header.ok()) {
    if (header->descr.empty()) std::abort();  // any dtype parses; the readers pick theirs
    for (int64_t dim : header->shape)
      if (dim < 0) std::abort();
    if (header->data_offset < 10) std::abort();  // magic + version + length come first
  }
  const std::string path = scratch_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto ids = llmrt::read_npy_int_vector(path);
  if (ids.ok() && ids->size() > size) std::abort();  // every id came from the file
  auto reader = llmrt::NpyRowReader::open(path);
  if (reader.ok()) {
    auto& r = **reader;
    // The file size bounds the shape (a header promising more data than the file has fails).
    // With no rows the width is only a number in the header: nothing is allocated or read.
    if (r.rows() < 0 || r.cols() < 0 || (r.rows() > 0 && r.cols() > static_cast<int64_t>(size))) std::abort();
    std::vector<float> row(static_cast<size_t>(r.rows() > 0 ? r.cols() : 0));
    int64_t got = 0;
    while (got < r.rows() && got < 64 && r.read_row(row).ok()) ++got;
    if (got == r.rows() && r.read_row(row).ok()) std::abort();  // past the last row
  }
  std::remove(path.c_str());
  return 0;
}
