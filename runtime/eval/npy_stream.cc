#include "runtime/eval/npy_stream.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace llmrt {

uint16_t float_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);  // inf, nan
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                        // below 2^-14: subnormal half (or zero)
    float v;
    std::memcpy(&v, &a, 4);
    // v * 2^24 is exact; nearbyint rounds half to even in the default rounding mode.
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  const uint32_t mant = a & 0x7fffffu;
  uint32_t h = (((a >> 23) - 127 + 15) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return sign | static_cast<uint16_t>(h);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                                  : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMaxHeader = 1 << 20;

// A cursor over the header dict, a Python literal such as
// {'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }
struct DictParser {
  std::string_view s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool string(std::string* out) {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
    const char q = s[i++];
    size_t end = s.find(q, i);
    if (end == std::string_view::npos) return false;
    *out = std::string(s.substr(i, end - i));
    i = end + 1;
    return true;
  }
  bool word(std::string_view w) {
    ws();
    if (s.substr(i, w.size()) != w) return false;
    i += w.size();
    return true;
  }
  bool integer(int64_t* out) {
    ws();
    size_t start = i;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (v > (int64_t{1} << 50)) return false;
      v = v * 10 + (s[i] - '0');
      ++i;
    }
    if (i < s.size() && s[i] == 'L') ++i;  // Python 2 long suffix
    *out = v;
    return i > start;
  }
};

size_t item_size(const std::string& descr) {
  if (descr == "<f2" || descr == "<i2") return 2;
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  return 0;
}

// Opens `path`, parses its header and checks that the file holds exactly the array it describes.
StatusOr<NpyHeader> open_npy(const std::string& path, std::unique_ptr<std::FILE, FileCloser>* file) {
  file->reset(std::fopen(path.c_str(), "rb"));
  if (!*file) return not_found(path + ": " + std::strerror(errno));
  std::vector<uint8_t> head(12);
  size_t got = std::fread(head.data(), 1, head.size(), file->get());
  if (got < 10) return invalid_argument(path + ": not an .npy file (too short)");
  head.resize(got);
  if (std::memcmp(head.data(), kMagic, 6) != 0) return invalid_argument(path + ": not an .npy file (bad magic)");
  const uint8_t major = head[6];
  size_t hlen = 0, prefix = 0;
  if (major == 1) {
    hlen = head[8] | (size_t(head[9]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12) return invalid_argument(path + ": truncated .npy header");
    hlen = head[8] | (size_t(head[9]) << 8) | (size_t(head[10]) << 16) | (size_t(head[11]) << 24);
    prefix = 12;
  } else {
    return invalid_argument(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (hlen > kMaxHeader) return invalid_argument(path + ": .npy header too large");
  head.resize(prefix + hlen);
  if (std::fseek(file->get(), 0, SEEK_SET) != 0 ||
      std::fread(head.data(), 1, head.size(), file->get()) != head.size())
    return invalid_argument(path + ": truncated .npy header");
  ASSIGN_OR_RETURN(NpyHeader h, parse_npy_header(head, path));
  const size_t item = item_size(h.descr);
  int64_t count = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && count > (int64_t{1} << 60) / d) return invalid_argument(path + ": .npy shape too large");
    count *= d;
  }
  struct stat st;
  if (fstat(fileno(file->get()), &st) != 0) return internal_error(path + ": " + std::strerror(errno));
  const uint64_t want = uint64_t(h.data_offset) + uint64_t(count) * item;
  if (uint64_t(st.st_size) != want)
    return invalid_argument(path + ": the file has " + std::to_string(st.st_size) + " bytes, its .npy header (" +
                            h.descr + ", " + std::to_string(count) + " values) needs " + std::to_string(want));
  return h;
}

}  // namespace

StatusOr<NpyHeader> parse_npy_header(std::span<const uint8_t> bytes, const std::string& what) {
  auto bad = [&](const std::string& why) { return invalid_argument(what + ": bad .npy header: " + why); };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) return bad("no NUMPY magic");
  size_t prefix = 0, hlen = 0;
  if (bytes[6] == 1) {
    prefix = 10;
    hlen = bytes[8] | (size_t(bytes[9]) << 8);
  } else if (bytes[6] == 2 || bytes[6] == 3) {
    if (bytes.size() < 12) return bad("truncated");
    prefix = 12;
    hlen = bytes[8] | (size_t(bytes[9]) << 8) | (size_t(bytes[10]) << 16) | (size_t(bytes[11]) << 24);
  } else {
    return bad("version " + std::to_string(bytes[6]));
  }
  if (hlen > kMaxHeader || bytes.size() < prefix + hlen) return bad("truncated");
  DictParser p{std::string_view(reinterpret_cast<const char*>(bytes.data()) + prefix, hlen)};
  NpyHeader h;
  h.data_offset = prefix + hlen;
  bool has_descr = false, has_order = false, has_shape = false;
  if (!p.eat('{')) return bad("expected '{'");
  while (!p.eat('}')) {
    std::string key;
    if (!p.string(&key) || !p.eat(':')) return bad("expected 'key':");
    if (key == "descr") {
      if (!p.string(&h.descr)) return bad("descr is not a string");
      has_descr = true;
    } else if (key == "fortran_order") {
      if (p.word("False")) h.fortran_order = false;
      else if (p.word("True")) h.fortran_order = true;
      else return bad("fortran_order is not True/False");
      has_order = true;
    } else if (key == "shape") {
      if (!p.eat('(')) return bad("shape is not a tuple");
      while (!p.eat(')')) {
        int64_t d = 0;
        if (!p.integer(&d)) return bad("shape entry is not an integer");
        h.shape.push_back(d);
        if (h.shape.size() > 32) return bad("too many dimensions");
        if (!p.eat(',')) {
          if (!p.eat(')')) return bad("expected ',' or ')' in shape");
          break;
        }
      }
      has_shape = true;
    } else {
      return bad("unknown key '" + key + "'");
    }
    if (!p.eat(',')) {
      if (!p.eat('}')) return bad("expected ',' or '}'");
      break;
    }
  }
  if (!has_descr || !has_order || !has_shape) return bad("descr, fortran_order and shape are required");
  if (h.descr.size() == 3 && h.descr[0] == '=') h.descr[0] = '<';  // native order is little-endian here
  if (item_size(h.descr) == 0) return bad("unsupported dtype '" + h.descr + "'");
  return h;
}

StatusOr<std::vector<int32_t>> read_npy_int_vector(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file;
  ASSIGN_OR_RETURN(NpyHeader h, open_npy(path, &file));
  if (h.shape.size() != 1)
    return invalid_argument(path + ": expected a 1-D array of token ids, got " + std::to_string(h.shape.size()) +
                            " dimensions");
  if (h.descr != "<i4" && h.descr != "<i8")
    return invalid_argument(path + ": expected int32 token ids, got dtype '" + h.descr + "'");
  const size_t n = static_cast<size_t>(h.shape[0]), item = item_size(h.descr);
  if (n == 0) return std::vector<int32_t>();
  std::vector<uint8_t> raw(n * item);
  if (std::fseek(file.get(), static_cast<long>(h.data_offset), SEEK_SET) != 0 ||
      std::fread(raw.data(), 1, raw.size(), file.get()) != raw.size())
    return invalid_argument(path + ": short read");
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t v;
    if (item == 4) {
      int32_t x;
      std::memcpy(&x, raw.data() + 4 * i, 4);
      v = x;
    } else {
      std::memcpy(&v, raw.data() + 8 * i, 8);
    }
    if (v < INT32_MIN || v > INT32_MAX)
      return invalid_argument(path + ": value " + std::to_string(v) + " at index " + std::to_string(i) +
                              " does not fit int32");
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

StatusOr<std::unique_ptr<NpyRowReader>> NpyRowReader::open(const std::string& path) {
  std::unique_ptr<NpyRowReader> r(new NpyRowReader());
  r->path_ = path;
  ASSIGN_OR_RETURN(NpyHeader h, open_npy(path, &r->file_));
  if (h.descr != "<f2" && h.descr != "<f4")
    return invalid_argument(path + ": expected float16 or float32 log-probabilities, got dtype '" + h.descr + "'");
  if (h.shape.size() != 2 || h.fortran_order)
    return invalid_argument(path + ": expected a C-order 2-D array [positions, vocab]");
  r->rows_ = h.shape[0];
  r->cols_ = h.shape[1];
  if (r->cols_ == 0) return invalid_argument(path + ": rows of log-probabilities are empty (shape [" +
                                             std::to_string(r->rows_) + ", 0])");
  r->item_ = item_size(h.descr);
  // open_npy checked rows * cols values against the file's size; with no rows that bounds nothing
  // (fuzz.npy: shape (0, 755555555555) asked for a 1.5 TB row buffer), and no row is ever read.
  if (r->rows_ > 0) r->buf_.resize(size_t(r->cols_) * r->item_);
  if (std::fseek(r->file_.get(), static_cast<long>(h.data_offset), SEEK_SET) != 0)
    return internal_error(path + ": seek failed");
  return r;
}

Status NpyRowReader::read_row(std::span<float> out) {
  if (next_ >= rows_) return out_of_range(path_ + ": no row " + std::to_string(next_) + " (the file has " +
                                          std::to_string(rows_) + ")");
  if (static_cast<int64_t>(out.size()) != cols_) return invalid_argument("read_row: wrong row size");
  if (std::fread(buf_.data(), 1, buf_.size(), file_.get()) != buf_.size())
    return invalid_argument(path_ + ": short read at row " + std::to_string(next_));
  ++next_;
  if (item_ == 4) {
    std::memcpy(out.data(), buf_.data(), buf_.size());
  } else {
    for (int64_t i = 0; i < cols_; ++i) {
      uint16_t h;
      std::memcpy(&h, buf_.data() + 2 * i, 2);
      out[i] = f16_to_float(h);
    }
  }
  return ok_status();
}

StatusOr<std::unique_ptr<NpyF16Writer>> NpyF16Writer::create(const std::string& path, int64_t rows, int64_t cols) {
  std::unique_ptr<NpyF16Writer> w(new NpyF16Writer());
  w->path_ = path;
  w->rows_ = rows;
  w->cols_ = cols;
  w->file_.reset(std::fopen(path.c_str(), "wb"));
  if (!w->file_) return not_found(path + ": " + std::strerror(errno));
  std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "), }";
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict.push_back('\n');
  std::string head(kMagic, 6);
  head.push_back('\x01');
  head.push_back('\x00');
  head.push_back(static_cast<char>(dict.size() & 0xff));
  head.push_back(static_cast<char>(dict.size() >> 8));
  head += dict;
  if (std::fwrite(head.data(), 1, head.size(), w->file_.get()) != head.size())
    return internal_error(path + ": write failed");
  w->buf_.resize(size_t(cols));
  return w;
}

Status NpyF16Writer::append_row(std::span<const double> row) {
  if (written_ >= rows_) return out_of_range(path_ + ": more rows than the header's " + std::to_string(rows_));
  if (static_cast<int64_t>(row.size()) != cols_) return invalid_argument("append_row: wrong row size");
  for (int64_t i = 0; i < cols_; ++i) buf_[i] = float_to_f16(static_cast<float>(row[i]));
  if (std::fwrite(buf_.data(), 2, buf_.size(), file_.get()) != buf_.size())
    return internal_error(path_ + ": write failed: " + std::strerror(errno));
  ++written_;
  return ok_status();
}

Status NpyF16Writer::finish() {
  if (!file_) return failed_precondition(path_ + ": already finished");
  if (written_ != rows_)
    return failed_precondition(path_ + ": " + std::to_string(written_) + " of " + std::to_string(rows_) +
                               " rows written");
  std::FILE* f = file_.release();
  if (std::fclose(f) != 0) return internal_error(path_ + ": close failed: " + std::strerror(errno));
  return ok_status();
}

}  // namespace llmrt
