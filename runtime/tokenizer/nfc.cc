#include "runtime/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/tokenizer/byte_level.h"

namespace llmrt {
namespace {

struct CccEntry {
  uint32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  uint32_t cp;
  uint16_t offset;
  uint8_t length;
};
struct ComposeEntry {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

#include "runtime/tokenizer/unicode_nfc_tables.inc"

// Hangul syllables (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CccEntry* end = kCcc + sizeof(kCcc) / sizeof(kCcc[0]);
  const CccEntry* it =
      std::lower_bound(kCcc, end, cp, [](const CccEntry& e, uint32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const DecompEntry* end = kDecomp + sizeof(kDecomp) / sizeof(kDecomp[0]);
    const DecompEntry* it = std::lower_bound(
        kDecomp, end, cp, [](const DecompEntry& e, uint32_t c) { return e.cp < c; });
    if (it != end && it->cp == cp) {
      out->insert(out->end(), kDecompData + it->offset, kDecompData + it->offset + it->length);
      return;
    }
  }
  out->push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const ComposeEntry* end = kCompose + sizeof(kCompose) / sizeof(kCompose[0]);
  const ComposeEntry* it = std::lower_bound(
      kCompose, end, std::make_pair(a, b), [](const ComposeEntry& e, std::pair<uint32_t, uint32_t> k) {
        return e.first < k.first || (e.first == k.first && e.second < k.second);
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

bool is_trivially_nfc(std::string_view text) {
  // U+0300 is 0xCC 0x80: every byte below 0xCC starts or continues a code point < U+0300.
  for (unsigned char c : text) {
    if (c >= 0xCC) return false;
  }
  return true;
}

void append_nfc(std::string_view text, std::string* out) {
  if (is_trivially_nfc(text)) {
    out->append(text);
    return;
  }
  // 1. Full canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = valid_utf8_length(text, pos);
    if (len == 0) {  // not expected (callers validate); keep going byte by byte
      decompose(0xFFFD, &cps);
      ++pos;
      continue;
    }
    decompose(decode_utf8(text, pos, len), &cps);
    pos += len;
  }
  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // 3. Canonical composition.
  std::vector<uint32_t> result;
  result.reserve(cps.size());
  long starter = -1;   // index in result of the last starter, -1 if none
  int last_ccc = -1;   // class of the last character appended after the starter; -1: none
  for (uint32_t cp : cps) {
    int ccc = ccc_of(cp);
    if (starter >= 0) {
      bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (uint32_t c = compose(result[starter], cp)) {
          result[starter] = c;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<long>(result.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    result.push_back(cp);
  }
  for (uint32_t cp : result) append_utf8(cp, out);
}

}  // namespace llmrt
