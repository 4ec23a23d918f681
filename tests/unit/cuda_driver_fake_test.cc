// The runtime's real CUDA driver path (runtime/cuda/cuda_driver.cc: dlopen("libcuda.so.1"),
// symbols, contexts, streams, graphs, events, launches) against the stand-in driver of
// fake_libcuda.cc, which this test loads first so that the driver's dlopen finds it by its
// soname. The fake checks what a GPU's driver checks (the current context per thread, stream
// capture's forbidden calls, addresses, launch geometry) and counts launches; it runs no kernel.

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_driver.h"

namespace llmrt::cuda {
namespace {

struct Counts {
  uint64_t launches = 0, programmatic = 0, graph_launches = 0, bytes_in_use = 0;
};

class FakeCudaDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lib_ = dlopen(LLMC_FAKE_CUDA, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
  }
  void SetUp() override {
    auto d = load_driver();
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    driver_ = std::move(*d);
    ASSERT_TRUE(driver_->use_device(0).ok());
  }
  Counts counts() const {
    using Fn = void (*)(uint64_t*, uint64_t*, uint64_t*, uint64_t*);
    auto fn = reinterpret_cast<Fn>(dlsym(lib_, "llmc_fake_cuda_counts"));
    Counts c;
    if (fn) fn(&c.launches, &c.programmatic, &c.graph_launches, &c.bytes_in_use);
    return c;
  }
  FunctionHandle function() {
    static const char cubin[] = "\x7f" "ELF fake cubin";
    auto m = driver_->load_module(cubin, sizeof(cubin), false);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    auto f = driver_->get_function(m.ok() ? *m : nullptr, "llm_test_kernel");
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? *f : nullptr;
  }

  static inline void* lib_ = nullptr;
  std::unique_ptr<Driver> driver_;
};

const int kBlock[3] = {128, 1, 1};

TEST_F(FakeCudaDriver, LoadsItByItsSonameAndListsTheDevice) {
  auto v = driver_->version();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 13000);
  auto devs = driver_->devices();
  ASSERT_TRUE(devs.ok()) << devs.status().to_string();
  ASSERT_EQ(devs->size(), 1u);
  EXPECT_EQ((*devs)[0].name, "Fake CUDA device (llmc tests)");
  EXPECT_EQ((*devs)[0].cc_major, 9);
  EXPECT_EQ((*devs)[0].cc_minor, 0);
  EXPECT_EQ((*devs)[0].total_memory, uint64_t(8192) << 20);
}

// The serve engine calls from threads of its own: each call makes the driver's context current on
// its thread (a GPU run once failed every request with CUDA_ERROR_INVALID_CONTEXT for want of it).
TEST_F(FakeCudaDriver, CallsFromAnotherThreadFindTheContext) {
  // The fake itself refuses a thread without a current context, as the real driver does.
  using Alloc = int (*)(uint64_t*, size_t);
  auto raw_alloc = reinterpret_cast<Alloc>(dlsym(lib_, "cuMemAlloc_v2"));
  ASSERT_NE(raw_alloc, nullptr);
  int raw = 0;
  std::thread([&] {
    uint64_t p = 0;
    raw = raw_alloc(&p, 64);
  }).join();
  EXPECT_EQ(raw, 201);  // CUDA_ERROR_INVALID_CONTEXT

  FunctionHandle fn = function();
  auto p = driver_->alloc(1024);
  ASSERT_TRUE(p.ok());
  std::vector<float> in(256), out(256, 0.0f);
  for (int i = 0; i < 256; ++i) in[i] = float(i) * 0.5f;
  ASSERT_TRUE(driver_->copy_to_device(*p, in.data(), 1024).ok());
  const uint64_t before = counts().launches;
  Status copied, launched, synced, freed;
  std::thread([&] {
    copied = driver_->copy_to_host(out.data(), *p, 1024);
    void* params[1] = {nullptr};
    launched = driver_->launch(fn, 4, kBlock, 0, params);
    synced = driver_->synchronize();
    freed = driver_->free(*p);
  }).join();
  EXPECT_TRUE(copied.ok()) << copied.to_string();
  EXPECT_TRUE(launched.ok()) << launched.to_string();
  EXPECT_TRUE(synced.ok()) << synced.to_string();
  EXPECT_TRUE(freed.ok()) << freed.to_string();
  EXPECT_EQ(out, in);
  EXPECT_EQ(counts().launches, before + 1);
}

TEST_F(FakeCudaDriver, ErrorsNameTheCallAndTheResult) {
  auto huge = driver_->alloc(uint64_t(9) << 30);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("out of device memory"), std::string::npos);

  auto p = driver_->alloc(64);
  ASSERT_TRUE(p.ok());
  char buf[128];
  const Status past = driver_->copy_to_host(buf, *p, 128);  // past the allocation's end
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.message().find("cuMemcpyDtoH failed with CUresult 1 (CUDA_ERROR_INVALID_VALUE)"),
            std::string::npos)
      << past.to_string();
  EXPECT_TRUE(driver_->free(*p).ok());

  const char junk[] = "not a module";
  auto m = driver_->load_module(junk, sizeof(junk), false);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("CUDA_ERROR_INVALID_IMAGE"), std::string::npos) << m.status().to_string();

  FunctionHandle fn = function();
  void* params[1] = {nullptr};
  const int too_big[3] = {2048, 1, 1};
  const Status launch = driver_->launch(fn, 1, too_big, 0, params);
  EXPECT_NE(launch.message().find("cuLaunchKernel failed"), std::string::npos) << launch.to_string();
}

TEST_F(FakeCudaDriver, GraphsRecordLaunchesAndCaptureRefusesCopies) {
  FunctionHandle fn = function();
  void* params[1] = {nullptr};
  const Counts before = counts();
  ASSERT_TRUE(driver_->begin_capture().ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(driver_->launch(fn, 2, kBlock, 0, params).ok());
  auto graph = driver_->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  EXPECT_EQ(counts().launches, before.launches);  // recorded, not run
  ASSERT_TRUE(driver_->launch_graph(*graph).ok());
  ASSERT_TRUE(driver_->launch_graph(*graph).ok());
  EXPECT_EQ(counts().launches, before.launches + 6);
  EXPECT_EQ(counts().graph_launches, before.graph_launches + 2);
  EXPECT_TRUE(driver_->destroy_graph(*graph).ok());

  // A synchronous copy in a capture fails and invalidates it, as on a GPU.
  auto p = driver_->alloc(64);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(driver_->begin_capture().ok());
  char buf[64];
  const Status copy = driver_->copy_to_host(buf, *p, 64);
  EXPECT_NE(copy.message().find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), std::string::npos) << copy.to_string();
  auto broken = driver_->end_capture();
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("cuStreamEndCapture"), std::string::npos);
  EXPECT_TRUE(driver_->free(*p).ok());
}

TEST_F(FakeCudaDriver, ProgrammaticLaunchesAndEvents) {
  ASSERT_TRUE(driver_->has_programmatic_launch());
  FunctionHandle fn = function();
  void* params[1] = {nullptr};
  const Counts before = counts();
  ASSERT_TRUE(driver_->launch_programmatic(fn, 8, kBlock, 0, params).ok());
  EXPECT_EQ(counts().programmatic, before.programmatic + 1);
  EXPECT_EQ(counts().launches, before.launches + 1);

  auto a = driver_->create_event();
  auto b = driver_->create_event();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(driver_->record_event(*a).ok());
  ASSERT_TRUE(driver_->record_event(*b).ok());
  auto ms = driver_->elapsed_ms(*a, *b);
  ASSERT_TRUE(ms.ok()) << ms.status().to_string();
  EXPECT_GE(*ms, 0.0f);
  EXPECT_TRUE(driver_->destroy_event(*a).ok());
  EXPECT_TRUE(driver_->destroy_event(*b).ok());
}

}  // namespace
}  // namespace llmrt::cuda
