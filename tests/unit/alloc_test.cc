// The decode loop allocates nothing: after a warm-up step, CpuExecutor::forward() of a decode
// batch makes no heap allocation (every global operator new of this binary is counted), for the
// f32 kernels and for the quantized fast and reference kernels, with 1 and 2 threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "runtime/engine/cpu_executor.h"
#include "runtime/plan/plan_file.h"
#include "tests/unit/tiny_plan.h"

// AddressSanitizer brings its own operator new; replacing it there mismatches with the
// sanitizer's allocations, so the sanitizer build skips these tests (the regular build runs them).
#if defined(__SANITIZE_ADDRESS__)
#define LLMRT_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LLMRT_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef LLMRT_COUNT_ALLOCATIONS
#define LLMRT_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

#if LLMRT_COUNT_ALLOCATIONS
namespace {
void* counted(std::size_t n, std::size_t align = 0) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

namespace llmrt {
namespace {

// Decodes `steps` tokens of two sequences (one decode row each) after a 3-token prefill and
// returns the allocations made by the forward() calls after the first decode step.
long allocations_in_decode(const Plan& plan, int threads, const std::string& kernels, int steps) {
  CpuExecutorOptions opt;
  opt.threads = threads;
  opt.num_kv_blocks = 32;
  opt.cpu_kernels = kernels;
  const long before_create = g_allocations.load();
  auto ex = CpuExecutor::create(plan, opt);
  EXPECT_GT(g_allocations.load() - before_create, 0) << "the counter sees the executor's own allocations";
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return -1;
  const int32_t bs = (*ex)->block_size();
  std::vector<float> logits(2 * static_cast<size_t>((*ex)->vocab_size()));
  // Sequence s owns blocks 8s .. 8s+7.
  std::vector<int32_t> tables = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  auto step = [&](int pos, int rows_per_seq) {
    std::vector<int32_t> tokens, positions, qs = {0}, ctx, idx;
    std::vector<int64_t> slots;
    for (int s = 0; s < 2; ++s) {
      for (int r = 0; r < rows_per_seq; ++r) {
        const int p = pos - rows_per_seq + 1 + r;
        tokens.push_back((p * 7 + s * 3) % 16);
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(tables[8 * s + p / bs]) * bs + p % bs);
      }
      qs.push_back(static_cast<int32_t>(tokens.size()));
      ctx.push_back(pos + 1);
      idx.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    BatchInput b;
    b.tokens = tokens;
    b.positions = positions;
    b.kv_slots = slots;
    b.query_start = qs;
    b.context_lens = ctx;
    b.block_tables = tables;
    b.max_blocks_per_seq = 8;
    b.logits_indices = idx;
    // Only forward() is counted: the batch vectors above are the test's, not the loop's.
    const long before = g_allocations.load();
    Status st = (*ex)->forward(b, logits.data());
    const long made = g_allocations.load() - before;
    EXPECT_TRUE(st.ok()) << st.to_string();
    return made;
  };
  step(2, 3);  // prefill 3 tokens
  step(3, 1);  // first decode step: scratch may grow here
  long total = 0;
  for (int i = 0; i < steps; ++i) total += step(4 + i, 1);
  return total;
}

TEST(DecodeLoop, ForwardMakesNoHeapAllocation) {
  if (!LLMRT_COUNT_ALLOCATIONS) GTEST_SKIP() << "AddressSanitizer build: operator new is the sanitizer's";
  testing::TinyPlanConfig cfg;
  cfg.fused = true;
  auto plan = testing::open_tiny_plan(testing::make_tiny_plan(cfg));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (int threads : {1, 2})
    EXPECT_EQ(allocations_in_decode(**plan, threads, "", 20), 0) << threads << " threads";
}

TEST(DecodeLoop, QuantizedForwardMakesNoHeapAllocation) {
  if (!LLMRT_COUNT_ALLOCATIONS) GTEST_SKIP() << "AddressSanitizer build: operator new is the sanitizer's";
  // A 1-layer int4 plan (cpu_interleaved8) kept with the plan fuzzer's corpus.
  auto plan = Plan::open(std::string(LLMRT_TEST_SOURCE_DIR) + "/tests/fuzz/corpus/plan/micro_llama_int4.fb");
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const char* kernels : {"fast", "reference"})
    for (int threads : {1, 2})
      EXPECT_EQ(allocations_in_decode(**plan, threads, kernels, 20), 0) << kernels << ", " << threads << " threads";
}

}  // namespace
}  // namespace llmrt
