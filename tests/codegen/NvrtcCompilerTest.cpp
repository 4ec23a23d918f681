// NVRTC driver: PTX + CUBIN per target, validated with ptxas and llvm-readelf.

#include "codegen/KernelFamilies.h"
#include "codegen/NvrtcCompiler.h"

#include "CodegenTestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

namespace {

using llmc::KernelImage;
using llmc::KernelSpec;
using llmc::testing::TempDir;

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// One spec per family (and both silu_mul forms), SmolLM2-135M shapes.
std::vector<KernelSpec> allFamilies() {
  std::vector<KernelSpec> specs;
  auto add = [&](llmrt::StatusOr<KernelSpec> s) {
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok())
      specs.push_back(std::move(s).value());
  };
  add(llmc::emitEmbeddingKernel({49152, 576}));
  add(llmc::emitEmbeddingKernel({49152, 576, "int8-g32-f16-sym"})); // SmolLM2's GGUF Q8_0 table
  add(llmc::emitEmbeddingKernel({128256, 4096, "int4-g128-f16-zp"}));
  add(llmc::emitEmbeddingKernel({128256, 4096, "bf16"}));
  add(llmc::emitRmsNormKernel({576, 576, 1e-5f}));
  add(llmc::emitRmsNormKernel({576, 64, 1e-6f}));
  add(llmc::emitAddRmsNormKernel({576, 576, 1e-5f}));
  llmc::RopeParams rope;
  rope.numHeads = 9;
  rope.headDim = 64;
  rope.theta = 100000.0;
  add(llmc::emitRopeKernel(rope));
  rope.style = "interleaved";
  rope.ropeType = "llama3";
  rope.factor = 8.0;
  add(llmc::emitRopeKernel(rope));
  add(llmc::emitSiluMulKernel({1536, false}));
  add(llmc::emitSiluMulKernel({1536, true}));
  // Llama-3-8B shapes: int4-g128 GPTQ-style, Q4_1, Q8_0, bf16, logits.
  for (const char *weight : {"int4-g128-f16-zp", "int4-g32-f16-min", "int8-g32-f16-sym", "bf16", "f32"})
    add(llmc::emitLinearKernel({4096, 4096, weight, false, false}));
  add(llmc::emitLinearKernel({14336, 4096, "int4-g128-bf16-sym", false, false}));
  add(llmc::emitLinearKernel({576, 576, "f32", true, false}));
  add(llmc::emitLinearKernel({128256, 4096, "bf16", false, true}));
  // Their tensor-core kernels (prefill, large batches).
  for (const char *weight : {"int4-g128-f16-zp", "int4-g32-f16-min", "int8-g32-f16-sym", "bf16"})
    add(llmc::emitLinearKernel({4096, 4096, weight, false, false, true}));
  add(llmc::emitLinearKernel({128256, 4096, "bf16", false, true, true}));
  add(llmc::emitLogitsSummaryKernel(49152));
  add(llmc::emitLogitsSummaryKernel(128256));
  add(llmc::emitLogitsSummaryKernel(llmc::kMaxLogitsSummaryVocab)); // 16 entries a thread, 64 parts
  add(llmc::emitSamplingKernel(128256));
  add(llmc::emitKvStoreKernel({8, 128, 16, "f32"}));
  llmc::AttentionParams attn;
  attn.cache = {8, 128, 16, "f32"};
  attn.numHeads = 32;
  attn.scale = 0.08838834764831845f;
  add(llmc::emitPagedAttentionKernel(attn));
  attn.slidingWindow = 4096;
  add(llmc::emitPagedAttentionKernel(attn));
  add(llmc::emitKvStoreKernel({8, 128, 16, "int8"}));
  // Llama-3's fused rope + KV write, both caches.
  llmc::RopeParams llama3;
  llama3.numHeads = 32;
  llama3.headDim = 128;
  llama3.theta = 500000.0;
  llama3.ropeType = "llama3";
  llama3.factor = 8.0;
  add(llmc::emitRopeKvStoreKernel({llama3, {8, 128, 16, "f32"}}));
  add(llmc::emitRopeKvStoreKernel({llama3, {8, 128, 16, "int8"}}));
  attn.cache.kvDtype = "int8";
  add(llmc::emitPagedAttentionKernel(attn));
  // The tiled prefill kernels (tensor cores): Llama-3 with both caches and a window, SmolLM2's
  // group of 3 (one head per item) at head_dim 64.
  attn.tensorCores = true;
  add(llmc::emitPagedAttentionKernel(attn));
  attn.cache.kvDtype = "f32";
  add(llmc::emitPagedAttentionKernel(attn));
  attn.slidingWindow = 0;
  add(llmc::emitPagedAttentionKernel(attn));
  llmc::AttentionParams smol;
  smol.cache = {3, 64, 16, "f32"};
  smol.numHeads = 9;
  smol.scale = 0.125f;
  smol.tensorCores = true;
  add(llmc::emitPagedAttentionKernel(smol));
  add(llmc::emitAddKernel(4096));
  add(llmc::emitSplitKernel(6144, {4096, 1024, 1024}));
  add(llmc::emitPermuteColumnsKernel(4096));
  // A GEMM library step's conversions: its input to bf16, its quantized weight to bf16 (Llama-3's
  // gate|up in int4-g128, an int8 format with zero points and a short last span).
  add(llmc::emitToBf16Kernel(14336));
  add(llmc::emitDequantBf16Kernel("int4-g128-f16-sym", 28672, 4096));
  add(llmc::emitDequantBf16Kernel("int8-g32-bf16-zp", 4096, 14368));
  // The decode GEMV over int8 activations (dp4a) and its input's quantization: Llama-3-8B's
  // shapes in the bench's int4-g128 with minimums, GPTQ's zero points, Q4_1 and Q8_0 (signed),
  // the down projection (k 14336), a quantized lm_head over gathered rows.
  for (const char *weight : {"int4-g128-f16-min", "int4-g128-f16-zp", "int4-g32-f16-min", "int8-g32-f16-sym"})
    add(llmc::emitLinearKernel({4096, 4096, weight, false, false, false, true}));
  add(llmc::emitLinearKernel({4096, 14336, "int4-g128-f16-min", false, false, false, true}));
  add(llmc::emitLinearKernel({128256, 4096, "int8-g32-f16-sym", false, true, false, true}));
  // GGUF Q4_K_M as held: Q4_K's sub-scales (int4-g256s32-f16-min) and Q6_K's (int8-g256s16,
  // the lm_head over gathered rows), both activations' GEMVs, the tiles, the bf16 conversion and
  // the table read; Q5_K's expansion (int8-g32-f32-min) and groups of 16 with f32 scales.
  for (const bool int8 : {true, false}) {
    add(llmc::emitLinearKernel({4096, 4096, "int4-g256s32-f16-min", false, false, false, int8}));
    add(llmc::emitLinearKernel({4096, 4096, "int8-g256s16-f16-sym", false, false, false, int8}));
    add(llmc::emitLinearKernel({4096, 4096, "int8-g32-f32-min", false, false, false, int8}));
  }
  add(llmc::emitLinearKernel({4096, 14336, "int4-g256s32-f16-min", false, false, false, true}));
  add(llmc::emitLinearKernel({128256, 4096, "int8-g256s16-f16-sym", false, true, false, true}));
  add(llmc::emitLinearKernel({4096, 14336, "int8-g256s16-f16-sym", false, false, true}));
  add(llmc::emitLinearKernel({4096, 14336, "int4-g256s32-f16-min", false, false, true}));
  add(llmc::emitLinearKernel({4096, 4096, "int8-g16-f32-sym", false, false, false, true}));
  add(llmc::emitDequantBf16Kernel("int8-g256s16-f16-sym", 4096, 14336));
  add(llmc::emitDequantBf16Kernel("int4-g256s32-f16-min", 28672, 4096));
  add(llmc::emitEmbeddingKernel({128256, 4096, "int4-g256s32-f16-min"}));
  // GGUF Q5_0 / Q5_1 / Q5_K as held (int5 codes; Q5_K with sub-scales): both activations' GEMVs
  // (the down projection's too), the tiles, the bf16 conversion and the table read.
  for (const bool int8 : {true, false})
    for (const char *weight : {"int5-g32-f16-sym", "int5-g32-f16-min", "int5-g256s32-f16-min"})
      add(llmc::emitLinearKernel({4096, 4096, weight, false, false, false, int8}));
  add(llmc::emitLinearKernel({4096, 14336, "int5-g256s32-f16-min", false, false, false, true}));
  add(llmc::emitLinearKernel({4096, 14336, "int5-g32-f16-sym", false, false, true}));
  add(llmc::emitDequantBf16Kernel("int5-g256s32-f16-min", 4096, 14336));
  add(llmc::emitEmbeddingKernel({128256, 4096, "int5-g32-f16-min"}));
  // GGUF IQ4_XS / IQ4_NL as held (nl codes; IQ4_XS with sub-scales): both activations' GEMVs,
  // the tiles, the bf16 conversion and the table read.
  for (const bool int8 : {true, false})
    add(llmc::emitLinearKernel({4096, 4096, "int4-g256s32-f16-nl", false, false, false, int8}));
  add(llmc::emitLinearKernel({4096, 4096, "int4-g32-f16-nl", false, false, false, true}));
  add(llmc::emitLinearKernel({4096, 14336, "int4-g256s32-f16-nl", false, false, true}));
  add(llmc::emitDequantBf16Kernel("int4-g256s32-f16-nl", 4096, 14336));
  add(llmc::emitEmbeddingKernel({128256, 4096, "int4-g32-f16-nl"}));
  // GGUF Q3_K and Q2_K as held (int4 sub-blocks of 16: a scale per k-step; Q2_K's with a min per
  // k-step too, the int8 GEMV's min steps per lane): both activations' GEMVs (the down
  // projection's too), the tiles, the bf16 conversion and the table read; and min groups of 16
  // (Q2_K's expansion, int8).
  for (const char *weight : {"int4-g256s16-f16-sym", "int4-g256s16-f16-min"}) {
    for (const bool int8 : {true, false})
      add(llmc::emitLinearKernel({4096, 4096, weight, false, false, false, int8}));
    add(llmc::emitLinearKernel({4096, 14336, weight, false, false, false, true}));
    add(llmc::emitLinearKernel({4096, 14336, weight, false, false, true}));
    add(llmc::emitDequantBf16Kernel(weight, 4096, 14336));
    add(llmc::emitEmbeddingKernel({128256, 4096, weight}));
  }
  add(llmc::emitLinearKernel({4096, 4096, "int8-g16-f16-min", false, false, false, true}));
  // Llama-3-8B's decode gate|up with the SiLU-mul epilogue (Step.silu_kernel): int8 and f32
  // activations, Q4_1-like groups of 32.
  for (const bool int8 : {true, false}) {
    llmc::LinearParams gateUp{28672, 4096, "int4-g128-f16-min", false, false, false, int8};
    gateUp.siluInter = 14336;
    add(llmc::emitLinearKernel(gateUp));
  }
  // (bf16: a warp per column of h; int8 codes of GGUF's Q8_0 and Q6_K: a block of 8 warps' stages
  // within the 48 KiB of static shared memory, the Q8_0 one with its scales staged per span)
  for (const char *weight : {"int4-g32-f16-min", "bf16", "int8-g32-f16-sym", "int8-g16-f32-sym", "int4-g256s32-f16-min",
                             "int8-g256s16-f16-sym", "int5-g32-f16-sym", "int4-g256s16-f16-sym",
                             "int4-g256s16-f16-min"}) {
    llmc::LinearParams gateUp{28672, 4096, weight, false, false, false, weight[0] == 'i'};
    gateUp.siluInter = 14336;
    add(llmc::emitLinearKernel(gateUp));
  }
  // Llama-3-8B's o_proj and down projection with the add_rms_norm after them in their last block
  // (Step.norm_kernel): int8 activations writing the next GEMV's int8 rows (8 warps a block), f32
  // activations, and bf16 weights (4 warps).
  for (const auto &[weight, k, int8] : {std::tuple{"int4-g128-f16-min", 4096, true},
                                        std::tuple{"int4-g128-f16-min", 14336, true},
                                        std::tuple{"int4-g32-f16-min", 14336, false}, std::tuple{"bf16", 4096, false}}) {
    llmc::LinearParams proj{4096, k, weight, false, false, false, int8};
    proj.addRmsNorm = llmc::RmsNormParams{4096, 4096, 1e-5f, int8};
    add(llmc::emitLinearKernel(proj));
  }
  add(llmc::emitQuantizeQ8Kernel(4096, false));
  add(llmc::emitQuantizeQ8Kernel(14336, false));
  add(llmc::emitQuantizeQ8Kernel(4096, true));
  // Their producers writing those rows themselves: Llama-3-8B's norms and SiLU*mul (both forms).
  add(llmc::emitRmsNormKernel({4096, 4096, 1e-5f, true}));
  add(llmc::emitAddRmsNormKernel({4096, 4096, 1e-5f, true}));
  add(llmc::emitSiluMulKernel({14336, true, true}));
  add(llmc::emitSiluMulKernel({14336, false, true}));
  add(llmc::emitPermuteColumnsKernel(4096, true));
  attn.tensorCores = false; // Llama-3's decode attention writing o_proj's int8 rows
  attn.quantizedOutput = true;
  add(llmc::emitPagedAttentionKernel(attn));
  // The decode attention with the rope_kv_store before it inside (Step.rope_kernel): Llama-3's,
  // both caches, with and without o_proj's int8 rows, and with a window.
  attn.rope = llama3;
  add(llmc::emitPagedAttentionKernel(attn));
  attn.cache.kvDtype = "int8";
  add(llmc::emitPagedAttentionKernel(attn));
  attn.quantizedOutput = false;
  add(llmc::emitPagedAttentionKernel(attn));
  attn.cache.kvDtype = "f32";
  attn.slidingWindow = 4096;
  add(llmc::emitPagedAttentionKernel(attn));
  // bf16, f16 and fp8 caches (--kv-cache-dtype): Llama-3's store, fused rope + store, decode
  // attention (plain, with the rope inside writing o_proj's int8 rows) and the tiled prefill kernel.
  for (const char *kv : {"bf16", "f16", "fp8"}) {
    add(llmc::emitKvStoreKernel({8, 128, 16, kv}));
    add(llmc::emitRopeKvStoreKernel({llama3, {8, 128, 16, kv}}));
    llmc::AttentionParams half;
    half.cache = {8, 128, 16, kv};
    half.numHeads = 32;
    half.scale = 0.08838834764831845f;
    add(llmc::emitPagedAttentionKernel(half));
    half.tensorCores = true;
    add(llmc::emitPagedAttentionKernel(half));
    half.tensorCores = false;
    half.rope = llama3;
    half.quantizedOutput = true;
    add(llmc::emitPagedAttentionKernel(half));
  }
  return specs;
}

/// Reads the little-endian ELF64 header fields we check.
struct ElfInfo {
  bool isElf64 = false;
  uint16_t machine = 0;
  uint32_t flags = 0;
};
ElfInfo elfInfo(const std::vector<uint8_t> &bytes) {
  ElfInfo info;
  if (bytes.size() < 64 || std::memcmp(bytes.data(), "\x7f" "ELF", 4) != 0)
    return info;
  info.isElf64 = bytes[4] == 2 && bytes[5] == 1;
  std::memcpy(&info.machine, bytes.data() + 18, 2);
  std::memcpy(&info.flags, bytes.data() + 48, 4);
  return info;
}
constexpr uint16_t kEmCuda = 190;
/// CUDA ELF (CUDA 12.8+ ABI): the SM number is in bits 8..15 of e_flags.
unsigned smFromFlags(uint32_t flags) { return (flags >> 8) & 0xff; }

TEST(NvrtcTargets, ValidateTarget) {
  for (const char *t : {"sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90",
                        "sm_90a", "sm_100", "sm_100a", "sm_103", "sm_110",
                        "sm_120", "sm_121", "sm_120f"})
    EXPECT_TRUE(llmc::validateTarget(t).ok()) << t;
  for (const char *t : {"sm_70", "sm_86a", "sm_90f", "compute_90", "sm_",
                        "", "sm_090", "sm_9x", "SM_90", "sm_80 ", "sm_99"}) {
    llmrt::Status st = llmc::validateTarget(t);
    EXPECT_EQ(st.code(), llmrt::StatusCode::kInvalidArgument) << t;
    EXPECT_TRUE(contains(st.message(), "'" + std::string(t) + "'"))
        << st.message();
  }
}

TEST(NvrtcTargets, DefaultTargetsAreValid) {
  std::vector<std::string> targets = llmc::defaultTargets();
  EXPECT_EQ(targets,
            (std::vector<std::string>{"sm_80", "sm_86", "sm_89", "sm_90"}));
  for (const std::string &t : targets)
    EXPECT_TRUE(llmc::validateTarget(t).ok()) << t;
}

TEST(NvrtcCompile, ErrorsBeforeCompiling) {
  KernelSpec spec = llmc::emitSiluMulKernel({64, false}).value();
  auto bad = llmc::compileKernel(spec, {"sm_90", "sm_70"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), llmrt::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "sm_70"));
  auto none = llmc::compileKernel(spec, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), llmrt::StatusCode::kInvalidArgument);
  KernelSpec empty;
  EXPECT_FALSE(llmc::compileKernel(empty, {"sm_90"}).ok());
}

TEST(NvrtcCompile, WithoutNvrtcSaysSo) {
  if (llmc::nvrtcAvailable())
    GTEST_SKIP() << "this build has NVRTC";
  KernelSpec spec = llmc::emitSiluMulKernel({64, false}).value();
  auto r = llmc::compileKernel(spec, {"sm_90"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), llmrt::StatusCode::kUnavailable);
  EXPECT_TRUE(contains(r.status().message(), "NVRTC not available in this build"));
}

class NvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!llmc::nvrtcAvailable())
      GTEST_SKIP() << "built without NVRTC (LLMC_ENABLE_CUDA off)";
    llmc::setKernelCacheDir("off");  // every test here really runs NVRTC, unless it says otherwise
  }
};

std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(NvrtcTest, CompileCacheHitsRepairsAndCanBeOff) {
  TempDir dir;
  llmc::setKernelCacheDir(dir.path());
  KernelSpec spec = llmc::emitSiluMulKernel({192, true}).value();
  const llmc::KernelCacheStats s0 = llmc::kernelCacheStats();
  auto first = llmc::compileKernel(spec, {"sm_80", "sm_90"});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const llmc::KernelCacheStats s1 = llmc::kernelCacheStats();
  EXPECT_EQ(s1.misses - s0.misses, 2);
  EXPECT_EQ(s1.hits - s0.hits, 0);
  std::vector<std::filesystem::path> cubins;
  for (const auto &e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().extension() == ".cubin")
      cubins.push_back(e.path());
  ASSERT_EQ(cubins.size(), 2u);

  auto again = llmc::compileKernel(spec, {"sm_80", "sm_90"});
  ASSERT_TRUE(again.ok());
  const llmc::KernelCacheStats s2 = llmc::kernelCacheStats();
  EXPECT_EQ(s2.hits - s1.hits, 2);
  EXPECT_EQ(s2.misses - s1.misses, 0);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*again)[i].target, (*first)[i].target);
    EXPECT_EQ((*again)[i].ptx, (*first)[i].ptx);
    EXPECT_EQ((*again)[i].cubin, (*first)[i].cubin);
    // ptxas' report comes back from the cache as it was.
    EXPECT_EQ((*again)[i].resources.registers, (*first)[i].resources.registers);
    EXPECT_EQ((*again)[i].resources.sharedBytes, (*first)[i].resources.sharedBytes);
    EXPECT_EQ((*again)[i].resources.stackBytes, (*first)[i].resources.stackBytes);
    EXPECT_EQ((*again)[i].resources.spillBytes, (*first)[i].resources.spillBytes);
  }
  // Another source (other shapes) is another key.
  KernelSpec other = llmc::emitSiluMulKernel({256, true}).value();
  ASSERT_TRUE(llmc::compileKernel(other, {"sm_90"}).ok());
  EXPECT_EQ(llmc::kernelCacheStats().misses - s2.misses, 1);

  // A damaged entry is compiled again and rewritten.
  { std::ofstream(cubins[0], std::ios::binary | std::ios::trunc) << "garbage"; }
  const llmc::KernelCacheStats s3 = llmc::kernelCacheStats();
  auto repaired = llmc::compileKernel(spec, {"sm_80", "sm_90"});
  ASSERT_TRUE(repaired.ok());
  const llmc::KernelCacheStats s4 = llmc::kernelCacheStats();
  EXPECT_EQ(s4.misses - s3.misses, 1);
  EXPECT_EQ(s4.hits - s3.hits, 1);
  EXPECT_EQ(slurp(cubins[0]).compare(0, 4, "\x7f" "ELF"), 0);

  llmc::setKernelCacheDir("off");
  EXPECT_EQ(llmc::kernelCacheDir(), "");
  ASSERT_TRUE(llmc::compileKernel(spec, {"sm_80"}).ok());
  EXPECT_EQ(llmc::kernelCacheStats().misses - s4.misses, 1);
}

TEST(NvrtcCompile, ParsesPtxasReport) {
  // As NVRTC 13.0 logs it for an sm_90 kernel with --ptxas-options=-v.
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
      "ptxas info    : Function properties for k\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem\n"
      "ptxas info    : Compile time = 3.876 ms\n";
  llmc::KernelResources r;
  ASSERT_TRUE(llmc::parsePtxasReport(log, &r));
  EXPECT_EQ(r.registers, 40);
  EXPECT_EQ(r.barriers, 1);
  EXPECT_EQ(r.sharedBytes, 1024u);
  EXPECT_EQ(r.stackBytes, 24u);
  EXPECT_EQ(r.spillBytes, 20u);
  // Without shared memory ptxas leaves the smem part out.
  ASSERT_TRUE(llmc::parsePtxasReport("ptxas info    : Used 8 registers, used 0 barriers\n", &r));
  EXPECT_EQ(r.registers, 8);
  EXPECT_EQ(r.sharedBytes, 0u);
  EXPECT_FALSE(llmc::parsePtxasReport("", &r));
  EXPECT_FALSE(llmc::parsePtxasReport("ptxas info    : 0 bytes gmem\n", &r));
}

TEST_F(NvrtcTest, VersionKnown) {
  EXPECT_FALSE(llmc::nvrtcVersionString().empty());
}

TEST_F(NvrtcTest, CompileErrorCarriesCallCodeAndLog) {
  KernelSpec spec;
  spec.family = "broken";
  spec.entry = "llm_broken";
  spec.source = "extern \"C\" __global__ void llm_broken(float *y) {\n"
                "  y[0] = undefined_name;\n}\n";
  spec.blockDim = {32, 1, 1};
  auto r = llmc::compileKernel(spec, {"sm_90"});
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_EQ(r.status().code(), llmrt::StatusCode::kInternal);
  EXPECT_TRUE(contains(msg, "nvrtcCompileProgram")) << msg;
  EXPECT_TRUE(contains(msg, "NVRTC_ERROR_COMPILATION")) << msg;
  EXPECT_TRUE(contains(msg, "sm_90")) << msg;
  EXPECT_TRUE(contains(msg, "undefined_name")) << msg; // from the log
}

TEST_F(NvrtcTest, MissingEntryIsAnError) {
  KernelSpec spec;
  spec.entry = "llm_expected_name";
  spec.source = "extern \"C\" __global__ void other_name(float *y) { y[0] = 1; }\n";
  auto r = llmc::compileKernel(spec, {"sm_80"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "llm_expected_name"));
}

TEST_F(NvrtcTest, EveryFamilyCompilesForSm80AndSm90) {
  for (const KernelSpec &spec : allFamilies()) {
    SCOPED_TRACE(spec.entry);
    auto images = llmc::compileKernel(spec, {"sm_80", "sm_90"});
    ASSERT_TRUE(images.ok()) << images.status().to_string();
    ASSERT_EQ(images->size(), 2u);
    for (const KernelImage &image : *images) {
      SCOPED_TRACE(image.target);
      unsigned sm = image.target == "sm_80" ? 80 : 90;
      EXPECT_TRUE(contains(image.ptx, ".target " + image.target)) << image.ptx;
      EXPECT_TRUE(contains(image.ptx, ".entry " + spec.entry + "("));
      EXPECT_EQ(image.ptx.find('\0'), std::string::npos);
      ASSERT_FALSE(image.cubin.empty());
      ElfInfo elf = elfInfo(image.cubin);
      EXPECT_TRUE(elf.isElf64);
      EXPECT_EQ(elf.machine, kEmCuda);
      EXPECT_EQ(smFromFlags(elf.flags), sm);
      // The kernel name is in the ELF (string table).
      std::string bytes(image.cubin.begin(), image.cubin.end());
      EXPECT_TRUE(contains(bytes, spec.entry));
      // ptxas' report: a register count within the architecture's 255, no
      // spills, and the static shared memory the source declares.
      EXPECT_GT(image.resources.registers, 0);
      EXPECT_LE(image.resources.registers, 255);
      // The quantized CUDA-core GEMV excepted: ptxas keeps a few loop-invariant words of it in
      // local memory under any register budget, mostly written and read once per work item
      // (nvdisasm of Llama-3-8B's shapes on sm_80 and sm_90, f32 and int8 activations: no local
      // load or store in the 1- to 4-token span loops of g128 kernels; where a warp's scales are
      // staged with each span, g32 over a whole 4096-wide K, one or two per 4 spans), 8 to 104
      // bytes (stores + loads; 104: the SiLU-mul epilogue's int4-g32 gate|up on sm_90) at the 64
      // registers LinearKernel.cpp sets. Groups of 16 (and sub-scales of 16, Q6_K as held: two
      // scales and four dp4a a sub-block) up to 192 (the SiLU-mul epilogue's gate|up: 2 to 5 local
      // accesses per 4-span iteration of 670-1090 instructions, nvdisasm on sm_90; 188 for the
      // sub-scales' on sm_90). int5 codes with sub-scales (Q5_K as held) up to 160 (the down
      // projection on sm_80: 34 local accesses per item, none in its span loops).
      const bool gemv = (spec.family == "linear" || spec.family == "logits") &&
                        contains(spec.entry, "_mma8_") && !contains(spec.entry, "_tc_");
      const bool halves = contains(spec.entry, "_g16_") || contains(spec.entry, "s16_");
      const bool int5Sub = contains(spec.entry, "_int5_") && contains(spec.entry, "s32_");
      EXPECT_LE(image.resources.spillBytes, !gemv ? 0u : halves ? 192u : int5Sub ? 160u : 112u);
      // The int8-activation GEMV multiplies in dp4a: signed codes for sym int8, nl (the grid's
      // values) and sym int4 sub-blocks of 16 (q - 8), else unsigned (min int4 sub-blocks of 16
      // too, their activations' sums a dp4a with ones). Scales of 16 with mins (Q2_K as held)
      // hold a sub-block at a time: no spill.
      const bool sym = contains(spec.entry, "_sym_");
      if (contains(spec.entry, "_q8a_"))
        EXPECT_TRUE(contains(image.ptx, (contains(spec.entry, "int8_") && sym) || contains(spec.entry, "_nl_") ||
                                                (contains(spec.entry, "int4_") && contains(spec.entry, "s16_") && sym)
                                            ? "dp4a.s32.s32"
                                            : "dp4a.u32.s32"));
      if (contains(spec.entry, "_q8a_") && halves && contains(spec.entry, "_min_"))
        EXPECT_EQ(image.resources.spillBytes, 0u);
      if (spec.family == "rms_norm" || spec.family == "add_rms_norm")
        EXPECT_EQ(image.resources.sharedBytes, 4u * spec.blockDim[0]);
      // An f16 cache is written with the conversion instruction (round to nearest even).
      if ((spec.family == "kv_store" || spec.family == "rope_kv_store") && contains(spec.entry, "_f16_"))
        EXPECT_TRUE(contains(image.ptx, "cvt.rn.f16.f32"));
      // An fp8 cache is read through the half conversion (its code moved into a half's place).
      if (spec.family == "paged_attention" && contains(spec.entry, "_fp8"))
        EXPECT_TRUE(contains(image.ptx, "cvt.f32.f16"));
      // Programmatic dependent launch (plan KernelImage.grid_dependency_control): on sm_90 the
      // entry waits on griddepcontrol once, before its first memory access other than its
      // parameters; sm_80 has no such instruction.
      const size_t wait = image.ptx.find("griddepcontrol.wait");
      if (sm == 80) {
        EXPECT_EQ(wait, std::string::npos);
        EXPECT_FALSE(contains(image.ptx, "griddepcontrol"));
        EXPECT_FALSE(contains(image.ptx, "prefetch")); // nothing overlaps: no prefetch before the kernel
        continue;
      }
      ASSERT_NE(wait, std::string::npos) << "no griddepcontrol.wait in the sm_90 PTX";
      EXPECT_EQ(image.ptx.find("griddepcontrol.wait", wait + 1), std::string::npos) << "more than one wait";
      EXPECT_TRUE(contains(image.ptx.substr(wait), "griddepcontrol.launch_dependents"));
      const std::string before = image.ptx.substr(image.ptx.find(".entry "), wait - image.ptx.find(".entry "));
      // The CUDA-core GEMVs ask the L2 for their first weight bytes before the wait (their
      // weights are never written by a kernel), the norms for their weights, the per-row
      // attention for its first cache rows
      // (written by earlier steps; it reads the step's positions and tables for them, which
      // copies before the step's first kernel wrote) when a row is whole 16-byte units; such a
      // prefetch is no access, and only they have it.
      const std::regex prefetch("\\bcp\\.async\\.bulk\\.prefetch\\.L2\\.global\\b");
      const bool decodeGemv = (spec.family == "linear" || spec.family == "logits") && !contains(spec.entry, "_tc_");
      const bool rowAttention = spec.family == "paged_attention" && !contains(spec.entry, "_tc_");
      std::smatch hd;
      const bool wholeRows = std::regex_search(spec.entry, hd, std::regex("_d(\\d+)_")) &&
                             std::stoi(hd[1]) * (contains(spec.entry, "_i8") ? 1 : 4) % 16 == 0;
      const bool norm = spec.family == "rms_norm" || spec.family == "add_rms_norm";
      EXPECT_EQ(std::regex_search(before, prefetch), decodeGemv || (rowAttention && wholeRows) || norm) << before;
      EXPECT_FALSE(std::regex_search(image.ptx.substr(wait), prefetch)) << "a prefetch after the wait";
      if (!rowAttention)
        EXPECT_FALSE(std::regex_search(before, std::regex("\\bld\\.(?!param)"))) << "a load before the wait:\n" << before;
      for (const std::regex access : {std::regex("\\bld\\.(?!param|global)"), std::regex("\\bst\\."),
                                      std::regex("\\bcp\\.async(?!\\.bulk\\.prefetch\\.L2\\.global\\b)"),
                                      std::regex("\\batom\\."),
                                      std::regex("\\bred\\."), std::regex("\\bldmatrix"),
                                      std::regex("\\bbar\\.")})
        EXPECT_FALSE(std::regex_search(before, access)) << "memory accessed before griddepcontrol.wait:\n"
                                                        << before;
    }
  }
}

TEST_F(NvrtcTest, GemvL2PrefetchCanBeOff) {
  // llmc compile --gemv-l2-prefetch 0: the decode GEMVs wait first, like every other kernel.
  for (const char *weight : {"int4-g128-f16-min", "bf16"}) {
    llmc::LinearParams p{4096, 4096, weight};
    p.int8Activations = std::string(weight) != "bf16";
    for (int64_t budget : {int64_t(0), llmc::kDefaultL2PrefetchBytes}) {
      p.l2PrefetchBytes = budget;
      auto spec = llmc::emitLinearKernel(p);
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      auto images = llmc::compileKernel(*spec, {"sm_90"});
      ASSERT_TRUE(images.ok()) << images.status().to_string();
      EXPECT_EQ(contains((*images)[0].ptx, "cp.async.bulk.prefetch.L2"), budget > 0) << weight << " " << budget;
    }
  }
}

TEST_F(NvrtcTest, QuantizedTensorCoreTilesDoNotSpillOnAnySku) {
  // Each quantized format the tiles dequantize differently (offsets zp / min / sym, int4 / int8,
  // f16 / bf16 scales, groups and whole rows), at Llama-3-8B's q/k/v and down projections: no
  // image spills on any default SKU (a 64-register choice of ptxas spilled 16-48 bytes on
  // sm_86/89/90 before the tiles asked for 96). int5 codes with sub-scales (Q5_K as held) spill 32
  // bytes on sm_90 / sm_90a: 4 loads and 2 stores per item (of 32 or 112 spans), none in its span
  // loops (nvdisasm).
  for (const char *weight : {"int4-g128-f16-zp", "int4-g128-f16-sym", "int4-g32-f16-min", "int8-g128-f16-sym",
                             "int8-g128-bf16-zp", "int8-row-f32-sym", "int8-g16-f32-sym", "int4-g32-f32-min",
                             "int4-g32-f32-nl", "int4-g256s32-f16-min", "int8-g256s16-f16-sym", "int4-g256s32-f16-nl",
                             "int5-g32-f16-sym", "int5-g256s32-f16-min", "int4-g256s16-f16-sym",
                             "int4-g256s16-f16-min", "int8-g16-f16-min"})
    for (int64_t k : {4096, 14336}) {
      auto spec = llmc::emitLinearKernel({k == 4096 ? 6144 : 4096, k, weight, false, false, true});
      ASSERT_TRUE(spec.ok()) << spec.status().to_string();
      SCOPED_TRACE(spec->entry);
      auto images = llmc::compileKernel(*spec, {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"});
      ASSERT_TRUE(images.ok()) << images.status().to_string();
      const bool int5Sub = std::string(weight).rfind("int5", 0) == 0 && std::string(weight).find("s32") != std::string::npos;
      for (const KernelImage &image : *images) {
        EXPECT_LE(image.resources.spillBytes, int5Sub ? 32u : 0u) << image.target;
        EXPECT_LE(image.resources.registers, 96) << image.target;
      }
    }
}

TEST_F(NvrtcTest, PtxassemblesWithPtxasAndCubinReadsWithReadelf) {
  if (!llmc::testing::isExecutable(LLMC_PTXAS) ||
      !llmc::testing::isExecutable(LLMC_READELF))
    GTEST_SKIP() << "ptxas (" << LLMC_PTXAS << ") or llvm-readelf ("
                 << LLMC_READELF << ") not found";
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::regex flagsRe("Flags:\\s+0x([0-9A-Fa-f]+)");
  for (const KernelSpec &spec : allFamilies()) {
    SCOPED_TRACE(spec.entry);
    auto images = llmc::compileKernel(spec, {"sm_80", "sm_90"});
    ASSERT_TRUE(images.ok()) << images.status().to_string();
    for (const KernelImage &image : *images) {
      SCOPED_TRACE(image.target);
      const unsigned sm = image.target == "sm_80" ? 80 : 90;
      const std::string base = dir.file(spec.entry + "." + image.target);
      ASSERT_TRUE(llmc::testing::writeFile(base + ".ptx", image.ptx.data(),
                                           image.ptx.size()));
      ASSERT_TRUE(llmc::testing::writeFile(base + ".nvrtc.cubin",
                                           image.cubin.data(),
                                           image.cubin.size()));
      // Our PTX assembles with the toolkit's ptxas for the same SM.
      auto ptxas = llmc::testing::runCommand(
          std::string("'") + LLMC_PTXAS + "' -arch=" + image.target + " '" +
              base + ".ptx' -o '" + base + ".ptxas.cubin'",
          base + ".ptxas.log");
      ASSERT_EQ(ptxas.exitCode, 0) << ptxas.output;

      for (const char *which : {".nvrtc.cubin", ".ptxas.cubin"}) {
        SCOPED_TRACE(which);
        auto readelf = llmc::testing::runCommand(
            std::string("'") + LLMC_READELF + "' -h -s '" + base + which + "'",
            base + which + ".log");
        ASSERT_EQ(readelf.exitCode, 0) << readelf.output;
        EXPECT_TRUE(contains(readelf.output, "Machine:"));
        EXPECT_TRUE(contains(readelf.output, "NVIDIA CUDA")) << readelf.output;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(readelf.output, m, flagsRe))
            << readelf.output;
        EXPECT_EQ(smFromFlags(std::stoul(m[1].str(), nullptr, 16)), sm)
            << "flags 0x" << m[1].str();
        // The entry is a global function symbol.
        std::regex symRe("FUNC\\s+GLOBAL.*\\s" + spec.entry + "\\s*\\n");
        EXPECT_TRUE(std::regex_search(readelf.output, symRe))
            << readelf.output;
      }
    }
  }
}

TEST_F(NvrtcTest, NewerTargetsCompile) {
  KernelSpec spec = llmc::emitRmsNormKernel({576, 576, 1e-5f}).value();
  auto images = llmc::compileKernel(spec, {"sm_75", "sm_90a", "sm_120"});
  ASSERT_TRUE(images.ok()) << images.status().to_string();
  ASSERT_EQ(images->size(), 3u);
  EXPECT_EQ((*images)[1].target, "sm_90a");
  EXPECT_EQ(smFromFlags(elfInfo((*images)[2].cubin).flags), 120u);
  EXPECT_EQ(smFromFlags(elfInfo((*images)[0].cubin).flags), 75u);
}

} // namespace
