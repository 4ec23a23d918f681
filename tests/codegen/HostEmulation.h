// Host emulation of the CUDA subset that llmc's generated kernels use, so a
// test can compile a kernel's exact source as C++ and run it on the CPU.
//
// A launch runs the blocks one after another on the calling thread. The
// threads of a block are fibers (ucontext) scheduled round-robin: a fiber runs
// until it waits at __syncthreads (all live threads of the block) or at a warp
// barrier (__syncwarp, and the two halves of every warp shuffle: all live
// threads of its warp), so a barrier costs a context switch instead of an OS
// thread wake-up. threadIdx is set by the scheduler before it switches to a
// fiber; __shared__ becomes a function-local static, i.e. per-block shared
// memory since blocks run one at a time (filled with 0xff bytes before each
// block: NaN floats, -1 integers, as undefined as the GPU's). A launch whose threads can never all
// meet at a barrier (a divergent __syncthreads) aborts with a message, where
// the GPU would hang. Used only by tests/codegen (compiled at test time into a
// shared library, one per kernel).
//
// The order in which the fibers of a block (and the blocks of a grid) run is LLMC_EMU_ORDER's:
// "forward" (the default: thread and block 0 first), "reverse", or "shuffle:SEED" (a new random
// order every round). A kernel whose result depends on it reads what another thread writes
// without a barrier in between, a race on the GPU (where the threads of a block, even the lanes
// of a warp, do not run in step): in the forward order a reader above the writer sees the write,
// in the reverse order it does not. tests/codegen runs its kernel tests in the other orders too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <ucontext.h>
#include <utility>
#include <vector>

struct LlmcDim3 {
  unsigned x, y, z;
};

static LlmcDim3 threadIdx = {0, 0, 0};
static LlmcDim3 blockIdx = {0, 0, 0};
static LlmcDim3 blockDim = {1, 1, 1};
static LlmcDim3 gridDim = {1, 1, 1};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
// Every __shared__ variable lives in the section llmc_shared, which the launch fills with 0xff
// bytes (NaN floats, -1 integers) before each block: on the GPU a block's shared memory starts
// undefined, not zero nor what the block before left.
#define __shared__ static __attribute__((section("llmc_shared")))
#define __launch_bounds__(...)
// Kernels pick their emulated forms of inline PTX (tensor-core mma, cvt) by this macro.
#define LLMC_HOST_EMULATION 1

namespace llmc_emu {

enum class State { kRunnable, kBlockBarrier, kWarpBarrier, kDone };

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  State state = State::kRunnable;
};

struct Scheduler {
  ucontext_t main;
  std::vector<Fiber> fibers;
  unsigned current = 0;
  std::function<void()> kernel;
};

static Scheduler *sched = nullptr;

// LLMC_EMU_ORDER (read once per kernel library): the order of each round of fibers and of blocks.
struct Order {
  enum Mode { kForward, kReverse, kShuffle } mode = kForward;
  uint64_t state = 0; // the shuffle's generator (splitmix64)
};
static Order &order() {
  static Order o = [] {
    Order r;
    const char *e = std::getenv("LLMC_EMU_ORDER");
    if (!e || !*e || std::strcmp(e, "forward") == 0)
      return r;
    if (std::strcmp(e, "reverse") == 0) {
      r.mode = Order::kReverse;
      return r;
    }
    char *end = nullptr;
    if (std::strncmp(e, "shuffle:", 8) == 0) {
      r.state = std::strtoull(e + 8, &end, 10);
      if (end != e + 8 && *end == 0) {
        r.mode = Order::kShuffle;
        return r;
      }
    }
    std::fprintf(stderr, "HostEmulation: LLMC_EMU_ORDER='%s' is none of forward, reverse, shuffle:SEED\n", e);
    std::abort();
  }();
  return o;
}
// 0 .. n-1 in the order's sequence for this round.
static void arrange(std::vector<unsigned> &ids, unsigned n) {
  ids.resize(n);
  for (unsigned i = 0; i < n; ++i)
    ids[i] = order().mode == Order::kReverse ? n - 1 - i : i;
  if (order().mode != Order::kShuffle)
    return;
  for (unsigned i = n; i > 1; --i) { // Fisher-Yates
    uint64_t z = (order().state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::swap(ids[i - 1], ids[z % i]);
  }
}
static uint64_t shuffleSlots[1024];
static uint32_t mmaSlots[1024][6]; // per thread: a0..a3, b0, b1 of a warp-wide mma
constexpr size_t kStackBytes = 256 * 1024;

static void trampoline() {
  sched->kernel();
  sched->fibers[sched->current].state = State::kDone;
  swapcontext(&sched->fibers[sched->current].ctx, &sched->main);
}

static void wait(State s) {
  Fiber &f = sched->fibers[sched->current];
  f.state = s;
  swapcontext(&f.ctx, &sched->main);
}

// Runs one block's fibers until all are done.
static void runBlock() {
  const unsigned n = static_cast<unsigned>(sched->fibers.size());
  unsigned done = 0;
  std::vector<unsigned> ids;
  while (done < n) {
    bool ran = false;
    arrange(ids, n);
    for (const unsigned t : ids) {
      Fiber &f = sched->fibers[t];
      if (f.state != State::kRunnable)
        continue;
      sched->current = t;
      threadIdx = {t, 0, 0};
      swapcontext(&sched->main, &f.ctx);
      ran = true;
      if (f.state == State::kDone)
        ++done;
    }
    // Release warps whose live threads all wait at the warp barrier, then the
    // block when all its live threads wait at __syncthreads.
    bool released = false;
    for (unsigned w = 0; w * 32 < n; ++w) {
      bool all = true, any = false;
      for (unsigned t = w * 32; t < n && t < w * 32 + 32; ++t) {
        const State s = sched->fibers[t].state;
        if (s == State::kDone)
          continue;
        any = true;
        all &= s == State::kWarpBarrier;
      }
      if (any && all) {
        for (unsigned t = w * 32; t < n && t < w * 32 + 32; ++t)
          if (sched->fibers[t].state == State::kWarpBarrier)
            sched->fibers[t].state = State::kRunnable;
        released = true;
      }
    }
    bool all = done < n;
    for (const Fiber &f : sched->fibers)
      all &= f.state == State::kDone || f.state == State::kBlockBarrier;
    if (all) {
      for (Fiber &f : sched->fibers)
        if (f.state == State::kBlockBarrier)
          f.state = State::kRunnable;
      released = true;
    }
    if (!ran && !released && done < n) {
      std::fprintf(stderr, "HostEmulation: block %u deadlocked (threads wait at different barriers)\n",
                   blockIdx.x);
      std::abort();
    }
  }
}

} // namespace llmc_emu

static inline void __syncthreads() { llmc_emu::wait(llmc_emu::State::kBlockBarrier); }
static inline void __syncwarp(unsigned = 0xffffffffu) { llmc_emu::wait(llmc_emu::State::kWarpBarrier); }

/// __shfl_xor_sync over the whole warp (every lane must call it, as the
/// generated kernels do: mask 0xffffffff).
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int laneMask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  const unsigned me = threadIdx.x, partner = me ^ unsigned(laneMask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  llmc_emu::shuffleSlots[me] = bits;
  __syncwarp();
  T out = v;
  if (partner / 32 == me / 32 && partner < blockDim.x)
    std::memcpy(&out, &llmc_emu::shuffleSlots[partner], sizeof(T));
  __syncwarp(); // the slots are reused by the next shuffle
  return out;
}

/// __shfl_up_sync over the whole warp (every lane calls it): lane l gets lane l - delta's value,
/// lanes below delta their own.
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned delta) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  const unsigned me = threadIdx.x, lane = me & 31;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  llmc_emu::shuffleSlots[me] = bits;
  __syncwarp();
  T out = v;
  if (lane >= delta)
    std::memcpy(&out, &llmc_emu::shuffleSlots[me - delta], sizeof(T));
  __syncwarp(); // the slots are reused by the next shuffle
  return out;
}

/// __shfl_sync over the whole warp (every lane calls it): lane srcLane's value (srcLane mod 32).
template <class T> static inline T __shfl_sync(unsigned, T v, int srcLane) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  const unsigned me = threadIdx.x, from = me - (me & 31) + (unsigned(srcLane) & 31u);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  llmc_emu::shuffleSlots[me] = bits;
  __syncwarp();
  T out = v;
  if (from < blockDim.x)
    std::memcpy(&out, &llmc_emu::shuffleSlots[from], sizeof(T));
  __syncwarp(); // the slots are reused by the next shuffle
  return out;
}

/// __match_any_sync over the whole warp (every lane calls it): the lanes whose value equals this
/// lane's.
static inline unsigned __match_any_sync(unsigned, unsigned v) {
  const unsigned me = threadIdx.x, base = me - (me & 31);
  llmc_emu::shuffleSlots[me] = v;
  __syncwarp();
  unsigned bits = 0;
  for (unsigned l = 0; l < 32 && base + l < blockDim.x; ++l)
    bits |= unsigned(llmc_emu::shuffleSlots[base + l] == v) << l;
  __syncwarp();
  return bits;
}

/// __reduce_add_sync (redux.sync.add.u32): the sum over the lanes of `mask`, which every lane of
/// the warp calls (each with its group's mask, as after __match_any_sync).
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  const unsigned me = threadIdx.x, base = me - (me & 31);
  llmc_emu::shuffleSlots[me] = v;
  __syncwarp();
  unsigned sum = 0;
  for (unsigned l = 0; l < 32 && base + l < blockDim.x; ++l)
    if (mask >> l & 1u)
      sum += unsigned(llmc_emu::shuffleSlots[base + l]);
  __syncwarp();
  return sum;
}

/// __ballot_sync over the whole warp (every lane calls it): bit l set when lane l's predicate is.
static inline unsigned __ballot_sync(unsigned, bool pred) {
  const unsigned me = threadIdx.x, base = me - (me & 31);
  llmc_emu::shuffleSlots[me] = pred ? 1 : 0;
  __syncwarp();
  unsigned bits = 0;
  for (unsigned l = 0; l < 32 && base + l < blockDim.x; ++l)
    bits |= unsigned(llmc_emu::shuffleSlots[base + l] != 0) << l;
  __syncwarp();
  return bits;
}
static inline bool __any_sync(unsigned mask, bool pred) { return (__ballot_sync(mask, pred) & mask) != 0u; }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
/// Fibers switch only at barriers, so a read-modify-write is atomic here.
template <class T> static inline T atomicAdd(T *p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

static inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
static inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
/// Blocks run one after another, so memory is always coherent: a fence orders nothing more.
static inline void __threadfence() {}
/// Load through L2 only (no L1): a plain load here.
template <class T> static inline T __ldcg(const T *p) { return *p; }

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

/// Float to int, round to nearest even (the host's default rounding mode).
static inline int __float2int_rn(float x) { return int(lrintf(x)); }

/// Round-to-nearest product and sum that the compiler may not contract into an FMA (volatile
/// keeps each result rounded to float even where the host build contracts).
static inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
static inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
static inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
/// The high 64 bits of a 64 x 64-bit product.
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
static inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}

/// dp4a.<a>.s32: c + the sum of the 4 byte products of a (signed bytes, else unsigned) and b
/// (signed bytes).
template <bool kSignedA> static inline int llmcEmuDp4a(unsigned a, unsigned b, int c) {
  for (int i = 0; i < 4; ++i) {
    const int x = kSignedA ? int(int8_t(a >> (8 * i))) : int((a >> (8 * i)) & 255u);
    c += x * int(int8_t(b >> (8 * i)));
  }
  return c;
}
/// prmt.b32: byte i of the result is byte (s >> 4 i) & 7 of the 8 bytes {b, a} (a's 0-3).
static inline unsigned __byte_perm(unsigned a, unsigned b, unsigned s) {
  const uint64_t both = uint64_t(a) | (uint64_t(b) << 32);
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= unsigned((both >> (8 * ((s >> (4 * i)) & 7u))) & 255u) << (8 * i);
  return r;
}

/// cvt.rna.tf32.f32: f32 rounded to TF32 (10 mantissa bits), ties away from zero; the result
/// is an f32 bit pattern whose low 13 bits are zero (non-finite values pass through).
static inline unsigned llmcEmuToTf32(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return u;
  return (u + 0x1000u) & 0xffffe000u; // adding half an ulp to the magnitude rounds ties away
}

/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = A B + C over the warp (every lane
/// calls it), with the PTX ISA's fragment layout: lane = 4 g + q holds
///   A (16x8, row major): a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4);
///   B (8x8, column major): b0 (k = q, n = g), b1 (k = q+4, n = g);
///   C, D (16x8): c0 (g, 2q), c1 (g, 2q+1), c2 (g+8, 2q), c3 (g+8, 2q+1).
/// Sums in double, then rounds once (the hardware's internal order is unspecified).
static inline void llmcEmuMmaTf32(float c[4], const unsigned a[4], const unsigned b[2]) {
  const unsigned me = threadIdx.x, lane = me & 31, base = me - lane;
  for (int i = 0; i < 4; ++i)
    llmc_emu::mmaSlots[me][i] = a[i];
  llmc_emu::mmaSlots[me][4] = b[0];
  llmc_emu::mmaSlots[me][5] = b[1];
  __syncwarp();
  auto f = [](uint32_t bits) {
    float v;
    std::memcpy(&v, &bits, 4);
    return double(v);
  };
  auto A = [&](int row, int col) { // lane 4 (row % 8) + col % 4, register (row / 8) + 2 (col / 4)
    return f(llmc_emu::mmaSlots[base + 4 * (row & 7) + (col & 3)][(row >> 3) + 2 * (col >> 2)]);
  };
  auto B = [&](int k, int n) { return f(llmc_emu::mmaSlots[base + 4 * n + (k & 3)][4 + (k >> 2)]); };
  const int g = int(lane >> 2), q = int(lane & 3);
  float d[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
    double sum = c[i];
    for (int k = 0; k < 8; ++k)
      sum += A(row, k) * B(k, col);
    d[i] = float(sum);
  }
  __syncwarp(); // the slots are reused by the next mma
  for (int i = 0; i < 4; ++i)
    c[i] = d[i];
}

/// Runs kernel() as a <<<grid, block>>> launch.
// cp.async.bulk.prefetch.L2 (a hint: nothing to fetch on the host): the emulation logs the
// ranges a launch asks for, with the asking block and thread, for the tests of what a kernel
// prefetches (HostKernel::prefetches).
struct LlmcPrefetch {
  unsigned block, thread;
  unsigned long long address;
  unsigned bytes;
};
static std::vector<LlmcPrefetch> llmcPrefetchLog;
// The linker's bounds of the section of the kernel library's __shared__ variables (absent when
// it has none).
extern "C" char __start_llmc_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_llmc_shared[] __attribute__((weak, visibility("hidden")));
static inline void llmcEmuPrefetchL2(unsigned long long address, unsigned bytes) {
  llmcPrefetchLog.push_back({blockIdx.x, threadIdx.x, address, bytes});
}

template <class Kernel> static void llmcLaunch(unsigned grid, unsigned block, Kernel kernel) {
  using namespace llmc_emu;
  llmcPrefetchLog.clear();
  Scheduler s;
  s.kernel = kernel;
  s.fibers.resize(block);
  for (Fiber &f : s.fibers)
    f.stack.reset(new char[kStackBytes]);
  Scheduler *outer = sched;
  sched = &s;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  std::vector<unsigned> blocks;
  arrange(blocks, grid);
  for (const unsigned b : blocks) {
    blockIdx = {b, 0, 0};
    if (__start_llmc_shared != nullptr)
      std::memset(__start_llmc_shared, 0xff, size_t(__stop_llmc_shared - __start_llmc_shared));
    for (Fiber &f : s.fibers) {
      f.state = State::kRunnable;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = kStackBytes;
      f.ctx.uc_link = &s.main;
      makecontext(&f.ctx, trampoline, 0);
    }
    runBlock();
  }
  // In block and thread order whatever the schedule (each thread's in its program order).
  std::stable_sort(llmcPrefetchLog.begin(), llmcPrefetchLog.end(), [](const LlmcPrefetch &a, const LlmcPrefetch &b) {
    return a.block != b.block ? a.block < b.block : a.thread < b.thread;
  });
  sched = outer;
}
