// Host-side CUDA logic without a GPU: which kernel image a device loads (runtime/cuda/
// module_select.h) and the run-time driver loader's behaviour on this machine.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <string>
#include <vector>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/module_select.h"

namespace llmrt::cuda {
namespace {

struct Img {
  std::string target;
  bool ptx = true, cubin = true;
};

// A plan FlatBuffer with one kernel per image list (only what module selection reads).
std::vector<uint8_t> plan_with(const std::vector<std::vector<Img>>& kernels, int min_driver = 13000) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Kernel>> ks;
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<flatbuffers::Offset<fb::KernelImage>> ims;
    for (const Img& im : kernels[k]) {
      std::vector<uint8_t> ptx, cubin;
      if (im.ptx) ptx = {'.', 'v'};
      if (im.cubin) cubin = {0x7f, 'E', 'L', 'F'};
      ims.push_back(fb::CreateKernelImageDirect(b, im.target.c_str(), &ptx, &cubin));
    }
    const std::vector<int> block = {128, 1, 1};
    ks.push_back(fb::CreateKernelDirect(b, ("k" + std::to_string(k)).c_str(), "f", "", &block, "rows", 0, &ims));
  }
  auto kv = b.CreateVector(ks);
  fb::PlanBuilder pb(b);
  pb.add_kernels(kv);
  pb.add_cuda_min_driver_version(min_driver);
  b.Finish(pb.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

const fb::Plan& as_plan(const std::vector<uint8_t>& bytes) { return *flatbuffers::GetRoot<fb::Plan>(bytes.data()); }

DeviceInfo dev(int major, int minor) { return {0, "Test GPU", major, minor, uint64_t{80} << 30}; }

const std::vector<Img> kDefault = {{"sm_80"}, {"sm_86"}, {"sm_89"}, {"sm_90"}};

TEST(CudaTargets, Parse) {
  Target t;
  ASSERT_TRUE(parse_target("sm_90", &t));
  EXPECT_EQ(t.major, 9);
  EXPECT_EQ(t.minor, 0);
  EXPECT_EQ(t.suffix, 0);
  ASSERT_TRUE(parse_target("sm_90a", &t));
  EXPECT_EQ(t.suffix, 'a');
  ASSERT_TRUE(parse_target("sm_121", &t));
  EXPECT_EQ(t.major, 12);
  EXPECT_EQ(t.minor, 1);
  ASSERT_TRUE(parse_target("sm_100f", &t));
  EXPECT_EQ(t.suffix, 'f');
  for (const char* bad : {"", "sm_", "sm_9", "compute_90", "sm_90b", "sm_90aa", "gfx90a"})
    EXPECT_FALSE(parse_target(bad, &t)) << bad;
}

TEST(CudaModuleSelect, ExactCubinFirst) {
  const auto bytes = plan_with({kDefault});
  const fb::Kernel& k = *as_plan(bytes).kernels()->Get(0);
  for (auto [major, minor, want] : std::vector<std::tuple<int, int, std::string>>{
           {8, 0, "sm_80"}, {8, 6, "sm_86"}, {8, 9, "sm_89"}, {9, 0, "sm_90"}}) {
    auto c = choose_image(k, dev(major, minor));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->target, want);
    EXPECT_FALSE(c->jit);
    EXPECT_FALSE(c->compatible);
  }
}

TEST(CudaModuleSelect, CompatibleCubinThenPtxJitThenError) {
  const auto bytes = plan_with({kDefault});
  const fb::Kernel& k = *as_plan(bytes).kernels()->Get(0);
  auto orin = choose_image(k, dev(8, 7));  // same major, lower minor: binary compatible
  ASSERT_TRUE(orin.ok());
  EXPECT_EQ(orin->target, "sm_86");
  EXPECT_TRUE(orin->compatible);
  auto blackwell = choose_image(k, dev(12, 0));  // newer major: the highest PTX, JIT
  ASSERT_TRUE(blackwell.ok());
  EXPECT_EQ(blackwell->target, "sm_90");
  EXPECT_TRUE(blackwell->jit);
  auto turing = choose_image(k, dev(7, 5));
  ASSERT_FALSE(turing.ok());
  const std::string m(turing.status().message());
  EXPECT_NE(m.find("sm_80, sm_86, sm_89, sm_90"), std::string::npos) << m;
  EXPECT_NE(m.find("sm_75"), std::string::npos) << m;
  EXPECT_NE(m.find("--target sm_75"), std::string::npos) << m;
}

TEST(CudaModuleSelect, ArchSpecificImagesOnlyOnTheirArch) {
  const auto bytes = plan_with({{{"sm_90"}, {"sm_90a"}}, {{"sm_90a"}}});
  const fb::Plan& p = as_plan(bytes);
  auto hopper = choose_image(*p.kernels()->Get(0), dev(9, 0));
  ASSERT_TRUE(hopper.ok());
  EXPECT_EQ(hopper->target, "sm_90a");
  auto later = choose_image(*p.kernels()->Get(1), dev(10, 0));  // sm_90a PTX is not forward compatible
  EXPECT_FALSE(later.ok());
  auto later_generic = choose_image(*p.kernels()->Get(0), dev(10, 0));
  ASSERT_TRUE(later_generic.ok());
  EXPECT_EQ(later_generic->target, "sm_90");
  EXPECT_TRUE(later_generic->jit);
}

TEST(CudaModuleSelect, PtxOnlyOrCubinOnlyImages) {
  const auto bytes = plan_with({{{"sm_80", /*ptx=*/true, /*cubin=*/false}}, {{"sm_80", false, true}}});
  const fb::Plan& p = as_plan(bytes);
  auto ptx = choose_image(*p.kernels()->Get(0), dev(8, 0));
  ASSERT_TRUE(ptx.ok());
  EXPECT_TRUE(ptx->jit);
  EXPECT_FALSE(choose_image(*p.kernels()->Get(1), dev(9, 0)).ok()) << "a CUBIN never runs on another major";
}

TEST(CudaModuleSelect, PlanChecks) {
  const auto good = plan_with({kDefault, kDefault});
  auto ok = check_plan(as_plan(good), dev(9, 0), 13000);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->choices.size(), 2u);
  EXPECT_TRUE(ok->warnings.empty());
  auto jit = check_plan(as_plan(good), dev(12, 0), 13000);
  ASSERT_TRUE(jit.ok());
  ASSERT_EQ(jit->warnings.size(), 1u);  // one note per target, not per kernel
  EXPECT_NE(jit->warnings[0].find("JIT"), std::string::npos);

  auto old_driver = check_plan(as_plan(good), dev(9, 0), 12080);
  ASSERT_FALSE(old_driver.ok());
  EXPECT_NE(old_driver.status().message().find("CUDA 13.0 or newer; this driver supports CUDA 12.8"),
            std::string::npos)
      << old_driver.status().to_string();

  const auto none = plan_with({{}, {}});
  auto empty = check_plan(as_plan(none), dev(9, 0), 13000);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no GPU kernel images"), std::string::npos);
}

TEST(CudaDriver, LoadsAtRunTimeOrSaysWhyNot) {
  EXPECT_EQ(driver_version_name(13000), "13.0");
  EXPECT_EQ(driver_version_name(12080), "12.8");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto d = load_driver();
  if (!lib) {
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(d.status().message().find("no CUDA driver"), std::string::npos);
    GTEST_SKIP() << "no libcuda.so.1 on this machine: the driver path itself is checked on a GPU machine";
  }
  dlclose(lib);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto v = (*d)->version();
  ASSERT_TRUE(v.ok());
  EXPECT_GE(*v, 1000);
  EXPECT_TRUE((*d)->devices().ok());
}

}  // namespace
}  // namespace llmrt::cuda
