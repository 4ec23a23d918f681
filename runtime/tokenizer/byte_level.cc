#include "runtime/tokenizer/byte_level.h"

#include <array>

namespace llmrt {
namespace {

bool stands_for_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points used are < 256 + 68
  ByteTables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = stands_for_itself(b) ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// Valid ranges for the second byte of a sequence, by lead byte (Unicode Table 3-7).
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Total length of the sequence a lead byte starts, or 0 if it cannot start one.
size_t sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t byte) { return tables().to_cp[byte]; }

int code_point_to_byte(uint32_t code_point) {
  if (code_point >= tables().from_cp.size()) return -1;
  return tables().from_cp[code_point];
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_byte_level(std::string_view bytes, std::string* out) {
  const auto& t = tables();
  for (unsigned char c : bytes) append_utf8(t.to_cp[c], out);
}

bool append_bytes_from_byte_level(std::string_view text, std::string* out) {
  bool all_mapped = true;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = valid_utf8_length(text, pos);
    if (len == 0) {  // not UTF-8 at all: copy the byte through
      out->push_back(text[pos]);
      all_mapped = false;
      ++pos;
      continue;
    }
    int b = code_point_to_byte(decode_utf8(text, pos, len));
    if (b >= 0) {
      out->push_back(static_cast<char>(b));
    } else {
      out->append(text.substr(pos, len));
      all_mapped = false;
    }
    pos += len;
  }
  return all_mapped;
}

size_t valid_utf8_length(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const auto lead = static_cast<uint8_t>(text[pos]);
  size_t n = sequence_length(lead);
  if (n == 0 || pos + n > text.size()) return 0;
  if (n == 1) return 1;
  if (!second_byte_ok(lead, static_cast<uint8_t>(text[pos + 1]))) return 0;
  for (size_t i = 2; i < n; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if (b < 0x80 || b > 0xBF) return 0;
  }
  return n;
}

uint32_t decode_utf8(std::string_view text, size_t pos, size_t len) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data() + pos);
  switch (len) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
             (p[3] & 0x3Fu);
  }
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = valid_utf8_length(text, pos);
    if (len == 0) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

bool is_incomplete_utf8_prefix(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  const auto lead = static_cast<uint8_t>(text[pos]);
  size_t n = sequence_length(lead);
  size_t have = text.size() - pos;
  if (n <= 1 || have >= n) return false;
  if (have >= 2 && !second_byte_ok(lead, static_cast<uint8_t>(text[pos + 1]))) return false;
  for (size_t i = 2; i < have; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if (b < 0x80 || b > 0xBF) return false;
  }
  return true;
}

}  // namespace llmrt
