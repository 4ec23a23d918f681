// The BPE merge table and merge loop, over token ids.
//
// A word starts as one symbol per character (per byte for byte-level vocabularies); the adjacent
// pair with the lowest merge rank is merged, leftmost first among equal ranks, until no adjacent
// pair has a merge. A priority queue over candidate pairs with lazy invalidation makes this
// O(n log n) per word.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

/// Token text → id, as a flat open-addressing table over the caller's token strings (which must
/// outlive it and not change). Duplicate texts: the lowest id wins.
class TokenIndex {
 public:
  void build(const std::vector<std::string>* tokens);
  /// The id of `text`, or -1.
  int32_t find(std::string_view text) const;

 private:
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<int32_t> slots_;  // -1 = empty
  uint64_t mask_ = 0;
};

class BpeMerges {
 public:
  /// `merges` are "left right" strings in rank order; `find_id` maps a token text to its id (or
  /// -1). Every merge must name two known tokens whose concatenation is also a token.
  template <typename FindId>
  static StatusOr<std::unique_ptr<BpeMerges>> create(const std::vector<std::string>& merges,
                                                     const FindId& find_id);

  /// Merges `symbols` (token ids, one per initial character) in place.
  void apply(std::vector<int32_t>* symbols) const;

  size_t size() const { return count_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static uint64_t mix(uint64_t k) {  // splitmix64 finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    return k ^ (k >> 31);
  }
  void reserve(size_t n);
  /// Inserts unless the pair is present (the lowest rank wins, as in Hugging Face tokenizers).
  void insert(uint64_t k, Merge m);
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t k = key(left, right);
    for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t count_ = 0;
};

template <typename FindId>
StatusOr<std::unique_ptr<BpeMerges>> BpeMerges::create(const std::vector<std::string>& merges,
                                                       const FindId& find_id) {
  std::unique_ptr<BpeMerges> m(new BpeMerges());
  m->reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      return invalid_argument("merge " + std::to_string(rank) + " '" + line +
                              "' is not two tokens separated by one space");
    }
    std::string_view left(line.data(), space);
    std::string_view right(line.data() + space + 1, line.size() - space - 1);
    int32_t left_id = find_id(left);
    int32_t right_id = find_id(right);
    joined.assign(left);
    joined.append(right);
    int32_t result_id = find_id(std::string_view(joined));
    if (left_id < 0 || right_id < 0 || result_id < 0) {
      std::string missing = left_id < 0 ? std::string(left)
                            : right_id < 0 ? std::string(right)
                                           : joined;
      return invalid_argument("merge " + std::to_string(rank) + " '" + line +
                              "' refers to a token not in the vocabulary: '" + missing + "'");
    }
    m->insert(key(left_id, right_id), Merge{static_cast<int32_t>(rank), result_id});
  }
  return m;
}

}  // namespace llmrt
