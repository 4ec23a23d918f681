#include "runtime/base/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace llmrt {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    count *= d;
  }
  if (shape.size() > 1) dims.pop_back();  // (n,) for 1-D, (a,b) otherwise
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + header_len(2) + header, padded with spaces to a multiple of 64, '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return invalid_argument("cannot create '" + path + "': " + std::strerror(errno));
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  uint16_t len = static_cast<uint16_t>(header.size());
  unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(len_le, 1, 2, f) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            (count == 0 || std::fwrite(data, sizeof(float), count, f) == static_cast<size_t>(count));
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return invalid_argument("writing '" + path + "' failed");
  return ok_status();
}

}  // namespace llmrt
