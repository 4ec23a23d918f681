// splitmix64's finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
// 2014; public constants): a stateless 64-bit mixing function. The sampler's counter-based RNG
// and the synthetic weights draw their bits from it.
#pragma once

#include <cstdint>

namespace llmrt {

inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace llmrt
