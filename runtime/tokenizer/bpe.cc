#include "runtime/tokenizer/bpe.h"

#include <queue>

#include <xxhash.h>

namespace llmrt {
namespace {

struct Symbol {
  int32_t id;    // -1 once merged into its left neighbour
  int32_t prev;  // index, -1 at the start
  int32_t next;  // index, -1 at the end
};

struct Candidate {
  int32_t rank;
  int32_t left;  // index of the left symbol
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

uint64_t table_size_for(size_t n) {
  uint64_t size = 16;
  while (size < 2 * static_cast<uint64_t>(n)) size <<= 1;
  return size;
}

}  // namespace

void TokenIndex::build(const std::vector<std::string>* tokens) {
  tokens_ = tokens;
  uint64_t size = table_size_for(tokens->size());
  slots_.assign(size, -1);
  mask_ = size - 1;
  for (size_t id = 0; id < tokens->size(); ++id) {
    const std::string& text = (*tokens)[id];
    for (uint64_t i = XXH3_64bits(text.data(), text.size()) & mask_;; i = (i + 1) & mask_) {
      int32_t& slot = slots_[i];
      if (slot < 0) {
        slot = static_cast<int32_t>(id);
        break;
      }
      if ((*tokens)[slot] == text) break;  // duplicate text: keep the lower id
    }
  }
}

int32_t TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  for (uint64_t i = XXH3_64bits(text.data(), text.size()) & mask_;; i = (i + 1) & mask_) {
    int32_t slot = slots_[i];
    if (slot < 0) return -1;
    if ((*tokens_)[slot] == text) return slot;
  }
}

void BpeMerges::reserve(size_t n) {
  uint64_t size = table_size_for(n);
  slots_.assign(size, Slot{});
  mask_ = size - 1;
}

void BpeMerges::insert(uint64_t k, Merge m) {
  for (uint64_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == k) return;
    if (s.key == kEmpty) {
      s.key = k;
      s.merge = m;
      ++count_;
      return;
    }
  }
}

void BpeMerges::apply(std::vector<int32_t>* ids) const {
  const int32_t n = static_cast<int32_t>(ids->size());
  if (n < 2) return;
  std::vector<Symbol> syms(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = {(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1};

  std::priority_queue<Candidate, std::vector<Candidate>, Later> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = syms[left].next;
    if (right < 0) return;
    if (const Merge* m = find(syms[left].id, syms[right].id)) {
      queue.push({m->rank, left, syms[left].id, syms[right].id, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[c.left];
    if (left.id != c.left_id || left.next < 0) continue;  // stale
    Symbol& right = syms[left.next];
    if (right.id != c.right_id) continue;  // stale
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }

  ids->clear();
  for (int32_t i = 0; i >= 0; i = syms[i].next) ids->push_back(syms[i].id);
}

}  // namespace llmrt
