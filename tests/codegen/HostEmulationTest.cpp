// The host emulation's schedule orders (LLMC_EMU_ORDER, HostEmulation.h): a kernel that reads
// another thread's write without a barrier in between gets the write in the forward order and
// not in the reverse or a shuffled one, so the kernel tests run in those orders find such races;
// with the barrier, every order gives the same result. Blocks follow the order too.

#include "HostKernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using llmc::KernelSpec;
using llmc::testing::HostKernel;

// A kernel of this test: `entry`'s source and block size (grid rule "rows").
KernelSpec testKernel(const std::string &entry, int block, const std::string &source) {
  KernelSpec spec;
  spec.family = "test";
  spec.entry = entry;
  spec.blockDim = {block, 1, 1};
  spec.gridRule = "rows";
  spec.source = source;
  return spec;
}

// Each thread writes its id + 1 to shared memory, then (with or without a barrier) reads its
// lower neighbour's slot: out[t] = slot[t - 1] (thread 0 reads its own).
KernelSpec neighbourKernel(bool barrier) {
  const std::string entry = barrier ? "neighbour_synced" : "neighbour_racy";
  return testKernel(entry, 64, "extern \"C\" __global__ void " + entry + R"cuda((int *out, int T) {
  __shared__ int slot[64];
  const int t = threadIdx.x;
  slot[t] = t + 1;
)cuda" + (barrier ? "  __syncthreads();\n" : "") + R"cuda(
  out[blockIdx.x * 64 + t] = slot[t > 0 ? t - 1 : 0];
}
)cuda");
}

// The order in which blocks start: out[b] = how many blocks ran before block b.
KernelSpec blockOrderKernel() {
  return testKernel("block_order", 32, R"cuda(
extern "C" __global__ void block_order(int *out, int *counter, int T) {
  if (threadIdx.x == 0)
    out[blockIdx.x] = atomicAdd(counter, 1);
}
)cuda");
}

// Reads shared memory no thread of the block wrote: out[b] = the bits of a float and an int that
// the block before left as 2.5 and 7.
KernelSpec unwrittenKernel() {
  return testKernel("unwritten", 32, R"cuda(
extern "C" __global__ void unwritten(float *f, int *i, int T) {
  __shared__ float sf[32];
  __shared__ int si[32];
  if (threadIdx.x == 0) {
    f[blockIdx.x] = sf[5];
    i[blockIdx.x] = si[9];
  }
  __syncthreads();
  sf[threadIdx.x] = 2.5f;
  si[threadIdx.x] = 7;
}
)cuda");
}

using NeighbourFn = void (*)(int *, int, unsigned);
using BlockOrderFn = void (*)(int *, int *, int, unsigned);

// The kernel's outputs for 3 blocks under `order` (each HostKernel is its own library, which
// reads LLMC_EMU_ORDER at its first launch).
std::vector<int> neighbours(bool barrier, const char *order) {
  setenv("LLMC_EMU_ORDER", order, 1);
  HostKernel k(neighbourKernel(barrier), "int *out, int T", "out, T");
  EXPECT_TRUE(k.ok()) << k.error();
  std::vector<int> out(3 * 64, -1);
  if (k.ok())
    k.get<NeighbourFn>()(out.data(), 3, 3);
  unsetenv("LLMC_EMU_ORDER");
  return out;
}

std::vector<int> expectedNeighbours() {
  std::vector<int> want(3 * 64);
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 64; ++t)
      want[b * 64 + t] = t > 0 ? t : 1;
  return want;
}

TEST(HostEmulation, TheForwardOrderHidesARaceTheOtherOrdersShow) {
  const std::vector<int> want = expectedNeighbours();
  EXPECT_EQ(neighbours(false, "forward"), want);
  // Reverse: every reader above thread 0 runs before its writer and reads the slot as the block
  // found it: 0xff bytes.
  const std::vector<int> reversed = neighbours(false, "reverse");
  for (int b = 0; b < 3; ++b)
    for (int t = 1; t < 64; ++t)
      EXPECT_EQ(reversed[b * 64 + t], -1) << "block " << b << " thread " << t;
  // A shuffle: some readers run before their writers (all 63 in order has odds 1 / 64!).
  int stale = 0;
  for (const int v : neighbours(false, "shuffle:7"))
    stale += v == -1;
  EXPECT_GT(stale, 0);
  EXPECT_LT(stale, 3 * 63);
}

TEST(HostEmulation, WithTheBarrierEveryOrderGivesTheSameResult) {
  const std::vector<int> want = expectedNeighbours();
  for (const char *order : {"forward", "reverse", "shuffle:7", "shuffle:12345"}) {
    SCOPED_TRACE(order);
    EXPECT_EQ(neighbours(true, order), want);
  }
}

TEST(HostEmulation, BlocksRunInTheOrder) {
  auto run = [](const char *order) {
    setenv("LLMC_EMU_ORDER", order, 1);
    HostKernel k(blockOrderKernel(), "int *out, int *counter, int T", "out, counter, T");
    EXPECT_TRUE(k.ok()) << k.error();
    std::vector<int> out(5, -1);
    int counter = 0;
    if (k.ok())
      k.get<BlockOrderFn>()(out.data(), &counter, 5, 5);
    unsetenv("LLMC_EMU_ORDER");
    EXPECT_EQ(counter, 5);
    return out;
  };
  EXPECT_EQ(run("forward"), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(run("reverse"), (std::vector<int>{4, 3, 2, 1, 0}));
  std::vector<int> shuffled = run("shuffle:3");
  EXPECT_NE(shuffled, (std::vector<int>{0, 1, 2, 3, 4}));
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, (std::vector<int>{0, 1, 2, 3, 4})); // each block once
}

} // namespace

namespace {

TEST(HostEmulation, SharedMemoryStartsAsNothingTheKernelCanRelyOn) {
  HostKernel k(unwrittenKernel(), "float *f, int *i, int T", "f, i, T");
  ASSERT_TRUE(k.ok()) << k.error();
  std::vector<float> f(4, 0.0f);
  std::vector<int> i(4, 0);
  k.get<void (*)(float *, int *, int, unsigned)>()(f.data(), i.data(), 4, 4);
  for (int b = 0; b < 4; ++b) { // neither zero nor the values of the block before
    EXPECT_TRUE(std::isnan(f[b])) << b;
    EXPECT_EQ(i[b], -1) << b;
  }
}

} // namespace
