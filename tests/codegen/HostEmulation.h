// Host emulation of the CUDA subset that llmc's generated kernels use, so a
// test can compile a kernel's exact source as C++ and run it on the CPU.
//
// A launch runs the blocks one after another; the threads of a block are real
// std::threads sharing a std::barrier (__syncthreads), and __shared__ becomes
// a function-local static, i.e. per-block shared memory since blocks run one
// at a time. Used only by tests/codegen (compiled at test time into a shared
// library, one per kernel).
#pragma once

#include <barrier>
#include <math.h>
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

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

static inline void __syncthreads() { llmcBarrier->arrive_and_wait(); }

/// Runs kernel() as a <<<grid, block>>> launch.
template <class Kernel>
static void llmcLaunch(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  std::barrier<> barrier(static_cast<std::ptrdiff_t>(block));
  llmcBarrier = &barrier;
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
