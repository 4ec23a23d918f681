// Host emulation of the CUDA subset that llmc's generated kernels use, so a
// test can compile a kernel's exact source as C++ and run it on the CPU.
//
// A launch runs the blocks one after another; the threads of a block are real
// std::threads sharing a std::barrier (__syncthreads), and __shared__ becomes
// a function-local static, i.e. per-block shared memory since blocks run one
// at a time. Warp shuffles exchange through a per-block slot array between two
// waits on the warp's own barrier (warps of a block may run different numbers
// of loop iterations, as on the GPU). Used only by tests/codegen (compiled at test time into a shared
// library, one per kernel).
#pragma once

#include <barrier>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

struct LlmcDim3 {
  unsigned x, y, z;
};

static thread_local LlmcDim3 threadIdx = {0, 0, 0};
static thread_local LlmcDim3 blockIdx = {0, 0, 0};
static LlmcDim3 blockDim = {1, 1, 1};
static LlmcDim3 gridDim = {1, 1, 1};
static std::barrier<> *llmcBarrier = nullptr;
static std::vector<std::unique_ptr<std::barrier<>>> llmcWarpBarriers;
static uint64_t llmcShuffleSlots[1024];

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

static inline void __syncthreads() { llmcBarrier->arrive_and_wait(); }

static inline void __syncwarp(unsigned = 0xffffffffu) {
  llmcWarpBarriers[threadIdx.x / 32]->arrive_and_wait();
}

/// __shfl_xor_sync over the whole warp (every lane must call it, as the
/// generated kernels do: mask 0xffffffff).
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int laneMask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  const unsigned me = threadIdx.x, partner = me ^ unsigned(laneMask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  llmcShuffleSlots[me] = bits;
  __syncwarp();
  T out = v;
  if (partner / 32 == me / 32 && partner < blockDim.x)
    std::memcpy(&out, &llmcShuffleSlots[partner], sizeof(T));
  __syncwarp(); // the slots are reused by the next shuffle
  return out;
}

static inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
static inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

/// Runs kernel() as a <<<grid, block>>> launch.
template <class Kernel>
static void llmcLaunch(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  std::barrier<> barrier(static_cast<std::ptrdiff_t>(block));
  llmcBarrier = &barrier;
  llmcWarpBarriers.clear();
  for (unsigned w = 0; w * 32 < block; ++w)
    llmcWarpBarriers.push_back(std::make_unique<std::barrier<>>(
        static_cast<std::ptrdiff_t>(block - w * 32 < 32 ? block - w * 32 : 32)));
  std::vector<std::thread> threads;
  threads.reserve(block);
  for (unsigned t = 0; t < block; ++t) {
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        kernel();
        // No thread starts block b+1 (and reuses shared memory) before every
        // thread has finished block b.
        barrier.arrive_and_wait();
      }
    });
  }
  for (std::thread &th : threads)
    th.join();
  llmcBarrier = nullptr;
}
