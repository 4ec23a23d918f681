// Emission of specialized kernel source from generic `llm` IR.

#include "codegen/KernelEmitter.h"
#include "codegen/KernelFamilies.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using llmc::KernelSpec;

/// Parses `body` (generic-form ops using %x, %y, %z ... defined by
/// `args`) inside a func and collects the llm.* ops.
class EmitterTest : public ::testing::Test {
protected:
  EmitterTest() {
    ctx.allowUnregisteredDialects(true);
    ctx.loadDialect<mlir::func::FuncDialect>();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &ctx, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
  }

  /// The llm ops of `func.func @f(args) { body; return }`.
  std::vector<mlir::Operation *> parse(const std::string &args,
                                       const std::string &body) {
    std::string text = "func.func @f(" + args + ") {\n" + body +
                       "\n  return\n}\n";
    module = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
    std::vector<mlir::Operation *> ops;
    if (!module) {
      ADD_FAILURE() << "parse failed:\n" << text << "\n" << diagnostics;
      return ops;
    }
    module->walk([&](mlir::Operation *op) {
      if (op->getName().getStringRef().starts_with("llm."))
        ops.push_back(op);
    });
    return ops;
  }

  KernelSpec emitOne(const std::string &args, const std::string &body) {
    auto ops = parse(args, body);
    if (ops.size() != 1) {
      ADD_FAILURE() << "expected one llm op";
      return {};
    }
    EXPECT_TRUE(llmc::hasKernel(ops[0]));
    auto spec = llmc::emitKernel(ops[0]);
    if (mlir::failed(spec)) {
      ADD_FAILURE() << "emitKernel failed: " << diagnostics;
      return {};
    }
    return *spec;
  }

  /// Expects emitKernel to fail on the single op with a diagnostic that
  /// contains `needle`.
  void expectFailure(const std::string &args, const std::string &body,
                     const std::string &needle) {
    auto ops = parse(args, body);
    ASSERT_EQ(ops.size(), 1u);
    diagnostics.clear();
    EXPECT_TRUE(mlir::failed(llmc::emitKernel(ops[0])));
    EXPECT_NE(diagnostics.find(needle), std::string::npos)
        << "diagnostics: " << diagnostics;
  }

  mlir::MLIRContext ctx;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::string diagnostics;
};

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// The kernel symbol really is the entry (and appears exactly as defined).
void expectEntryDefined(const KernelSpec &spec) {
  EXPECT_TRUE(contains(spec.source, "extern \"C\" __global__"));
  EXPECT_TRUE(contains(spec.source, "\n" + spec.entry + "("))
      << spec.source;
  EXPECT_FALSE(contains(spec.source, "${")) << spec.source;
  ASSERT_EQ(spec.blockDim.size(), 3u);
  EXPECT_EQ(spec.blockDim[1], 1);
  EXPECT_EQ(spec.blockDim[2], 1);
  EXPECT_TRUE(contains(spec.source, "constexpr int kBlock = " +
                                        std::to_string(spec.blockDim[0]) +
                                        ";"));
}

const char *kRmsArgs = "%x: tensor<?x576xf32>, %w: tensor<576xf32>";
const char *kRmsBody =
    "  %0 = \"llm.rms_norm\"(%x, %w) {eps = 1.0e-05 : f32} : "
    "(tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>";

TEST_F(EmitterTest, RmsNormSpecializesWidthGroupAndEps) {
  KernelSpec spec = emitOne(kRmsArgs, kRmsBody);
  EXPECT_EQ(spec.family, "rms_norm");
  EXPECT_EQ(spec.entry.rfind("llm_rms_norm_d576_g576_e3727c5ac_", 0), 0u)
      << spec.entry;
  EXPECT_TRUE(contains(spec.source, "constexpr int kD = 576;"));
  EXPECT_TRUE(contains(spec.source, "constexpr int kG = 576;"));
  // 1e-5 as the nearest float, written so it reads back to the same bits.
  EXPECT_TRUE(contains(spec.source, "constexpr float kEps = 9.99999975e-06f;"))
      << spec.source;
  EXPECT_EQ(spec.gridRule, "rows");
  EXPECT_EQ(spec.blockDim[0], 256);
  EXPECT_EQ(spec.sharedMemBytes, 0u);
  expectEntryDefined(spec);
}

TEST_F(EmitterTest, RmsNormPerHeadGroups) {
  KernelSpec spec = emitOne(
      "%q: tensor<?x576xf32>, %w: tensor<64xf32>",
      "  %0 = \"llm.rms_norm\"(%q, %w) {eps = 1.0e-06 : f64} : "
      "(tensor<?x576xf32>, tensor<64xf32>) -> tensor<?x576xf32>");
  EXPECT_TRUE(contains(spec.source, "constexpr int kD = 576;"));
  EXPECT_TRUE(contains(spec.source, "constexpr int kG = 64;"));
  EXPECT_TRUE(contains(spec.source, "constexpr float kEps = 9.99999997e-07f;"))
      << spec.source;
  EXPECT_EQ(spec.gridRule, "rows*9");
  EXPECT_EQ(spec.blockDim[0], 32);
  expectEntryDefined(spec);
}

TEST_F(EmitterTest, AddRmsNorm) {
  KernelSpec spec = emitOne(
      "%x: tensor<?x960xf32>, %r: tensor<?x960xf32>, %w: tensor<960xf32>",
      "  %n, %s = \"llm.add_rms_norm\"(%x, %r, %w) {eps = 1.0e-05 : f32} : "
      "(tensor<?x960xf32>, tensor<?x960xf32>, tensor<960xf32>) -> "
      "(tensor<?x960xf32>, tensor<?x960xf32>)");
  EXPECT_EQ(spec.family, "add_rms_norm");
  EXPECT_EQ(spec.entry.rfind("llm_add_rms_norm_d960_", 0), 0u) << spec.entry;
  EXPECT_TRUE(contains(spec.source, "constexpr int kD = 960;"));
  EXPECT_TRUE(contains(spec.source, "float *__restrict__ normed, float *sum"));
  EXPECT_EQ(spec.gridRule, "rows");
  expectEntryDefined(spec);
}

TEST_F(EmitterTest, Embedding) {
  KernelSpec spec = emitOne(
      "%t: tensor<?xi32>, %table: tensor<49152x576xf32>",
      "  %0 = \"llm.embedding\"(%t, %table) : (tensor<?xi32>, "
      "tensor<49152x576xf32>) -> tensor<?x576xf32>");
  EXPECT_EQ(spec.family, "embedding");
  EXPECT_EQ(spec.entry.rfind("llm_embedding_v49152_d576_", 0), 0u);
  EXPECT_TRUE(contains(spec.source, "constexpr long long kVocab = 49152LL;"));
  EXPECT_TRUE(contains(spec.source, "constexpr int kD = 576;"));
  EXPECT_EQ(spec.gridRule, "rows");
  expectEntryDefined(spec);
}

TEST_F(EmitterTest, SiluMulBothForms) {
  KernelSpec split = emitOne(
      "%g: tensor<?x1536xf32>, %u: tensor<?x1536xf32>",
      "  %0 = \"llm.silu_mul\"(%g, %u) : (tensor<?x1536xf32>, "
      "tensor<?x1536xf32>) -> tensor<?x1536xf32>");
  KernelSpec fused = emitOne(
      "%gu: tensor<?x3072xf32>",
      "  %0 = \"llm.silu_mul\"(%gu) : (tensor<?x3072xf32>) -> "
      "tensor<?x1536xf32>");
  EXPECT_EQ(split.family, "silu_mul");
  EXPECT_EQ(fused.family, "silu_mul");
  EXPECT_TRUE(contains(split.source, "constexpr int kI = 1536;"));
  EXPECT_TRUE(contains(fused.source, "constexpr int kI = 1536;"));
  EXPECT_TRUE(contains(split.source, "const float *gate, const float *up"));
  EXPECT_TRUE(contains(fused.source, "const float *__restrict__ gate_up"));
  EXPECT_NE(split.entry, fused.entry);
  expectEntryDefined(split);
  expectEntryDefined(fused);
}

std::string ropeOp(const std::string &attrs, int width = 576) {
  std::string t = "tensor<?x" + std::to_string(width) + "xf32>";
  return "  %0 = \"llm.rope\"(%x, %p) {" + attrs + "} : (" + t +
         ", tensor<?xi32>) -> " + t;
}
const char *kRopeArgs = "%x: tensor<?x576xf32>, %p: tensor<?xi32>";

TEST_F(EmitterTest, RopeDefaultNeox) {
  KernelSpec spec = emitOne(
      kRopeArgs, ropeOp("num_heads = 9 : i64, head_dim = 64 : i64, "
                        "theta = 1.0e+04 : f64, style = \"neox\", "
                        "rope_type = \"default\""));
  EXPECT_EQ(spec.family, "rope");
  EXPECT_EQ(spec.entry.rfind("llm_rope_neox_h9_d64_", 0), 0u) << spec.entry;
  EXPECT_TRUE(contains(spec.source, "constexpr int kHeads = 9;"));
  EXPECT_TRUE(contains(spec.source, "constexpr int kHd = 64;"));
  EXPECT_TRUE(contains(spec.source, "constexpr bool kNeox = true;"));
  // inv_freq[0] = 1, inv_freq[1] = 10000^(-2/64), inv_freq[31] = 10000^(-62/64)
  EXPECT_TRUE(contains(spec.source, "{\n    1.00000000e+00f, "))
      << spec.source;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.8ef",
                double(float(std::pow(10000.0, -2.0 / 64.0))));
  EXPECT_TRUE(contains(spec.source, buf)) << buf;
  std::snprintf(buf, sizeof(buf), "%.8ef",
                double(float(std::pow(10000.0, -62.0 / 64.0))));
  EXPECT_TRUE(contains(spec.source, buf)) << buf;
  EXPECT_EQ(spec.gridRule, "rows");
  expectEntryDefined(spec);
}

TEST_F(EmitterTest, RopeLlama3Interleaved) {
  std::string llama3 = "num_heads = 9 : i64, head_dim = 64 : i64, theta = "
                       "5.0e+05 : f64, style = \"interleaved\", rope_type = "
                       "\"llama3\", factor = 8.0 : f64, low_freq_factor = "
                       "1.0 : f64, high_freq_factor = 4.0 : f64, "
                       "original_max_position = 8192 : i64";
  KernelSpec spec = emitOne(kRopeArgs, ropeOp(llama3));
  EXPECT_EQ(spec.entry.rfind("llm_rope_interleaved_h9_d64_", 0), 0u);
  EXPECT_TRUE(contains(spec.source, "constexpr bool kNeox = false;"));
  EXPECT_TRUE(contains(spec.source, "type=llama3"));
  // The lowest frequency (wavelength far above 8192) is divided by factor 8.
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.8ef",
                double(float(std::pow(500000.0, -62.0 / 64.0) / 8.0)));
  EXPECT_TRUE(contains(spec.source, buf)) << buf << "\n" << spec.source;
  // Same op without scaling: different table, different entry.
  KernelSpec plain = emitOne(
      kRopeArgs, ropeOp("num_heads = 9 : i64, head_dim = 64 : i64, theta = "
                        "5.0e+05 : f64, style = \"interleaved\""));
  EXPECT_NE(spec.entry, plain.entry);
  EXPECT_FALSE(contains(plain.source, buf));
}

TEST_F(EmitterTest, DeterministicAndDeduplicable) {
  auto ops = parse(
      "%x: tensor<?x576xf32>, %w: tensor<576xf32>, %w2: tensor<576xf32>",
      "  %0 = \"llm.rms_norm\"(%x, %w) {eps = 1.0e-05 : f32} : "
      "(tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>\n"
      "  %1 = \"llm.rms_norm\"(%0, %w2) {eps = 1.0e-05 : f32} : "
      "(tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>\n"
      "  %2 = \"llm.rms_norm\"(%1, %w2) {eps = 1.0e-06 : f32} : "
      "(tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>");
  ASSERT_EQ(ops.size(), 3u);
  auto a = llmc::emitKernel(ops[0]);
  auto a2 = llmc::emitKernel(ops[0]);
  auto b = llmc::emitKernel(ops[1]);
  auto c = llmc::emitKernel(ops[2]);
  ASSERT_TRUE(mlir::succeeded(a) && mlir::succeeded(a2) &&
              mlir::succeeded(b) && mlir::succeeded(c));
  EXPECT_EQ(a->source, a2->source);
  EXPECT_EQ(a->entry, b->entry); // same specialization: one kernel
  EXPECT_EQ(a->source, b->source);
  EXPECT_NE(a->entry, c->entry); // eps differs
  EXPECT_NE(a->source, c->source);
}

TEST_F(EmitterTest, OpWithoutKernelFails) {
  auto ops = parse("%x: tensor<?x576xf32>",
                   "  %0 = \"llm.frobnicate\"(%x) : (tensor<?x576xf32>) -> tensor<?x576xf32>");
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_FALSE(llmc::hasKernel(ops[0]));
  diagnostics.clear();
  EXPECT_TRUE(mlir::failed(llmc::emitKernel(ops[0])));
  EXPECT_TRUE(contains(diagnostics, "has no GPU kernel")) << diagnostics;
  EXPECT_TRUE(contains(diagnostics, "llm.linear")) << diagnostics; // the list of supported ops
}

// Linear: dense weights always have a kernel; quantized ones only in the
// cuda_mma_n8 layout (the module's llm.weight_layout), with the format in
// the kernel.
TEST_F(EmitterTest, LinearFollowsTheWeightStorage) {
  const std::string body =
      "  %w = \"llm.weight\"() {name = \"w\"QUANT} : () -> tensor<1536x576xf32>\n"
      "  %0 = \"llm.linear\"(%x, %w) : (tensor<?x576xf32>, tensor<1536x576xf32>) -> tensor<?x1536xf32>";
  auto with = [&](const std::string &quant) {
    std::string b = body;
    b.replace(b.find("QUANT"), 5, quant);
    return b;
  };
  auto denseOps = parse("%x: tensor<?x576xf32>", with(""));
  ASSERT_EQ(denseOps.size(), 2u);
  EXPECT_TRUE(llmc::hasKernel(denseOps[1]));
  auto dense = llmc::emitKernel(denseOps[1]);
  ASSERT_TRUE(mlir::succeeded(dense)) << diagnostics;
  EXPECT_EQ(dense->family, "linear");
  EXPECT_TRUE(contains(dense->source, "weight=f32")) << dense->source;
  EXPECT_EQ(llmc::batchedMinRows(denseOps[1]), 16);

  auto ops = parse("%x: tensor<?x576xf32>", with(", quant = \"int4-g32-f16-min\""));
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_FALSE(llmc::hasKernel(ops[1])); // CPU layout: no GPU kernel reads it
  (*module)->setAttr("llm.weight_layout", mlir::StringAttr::get(&ctx, "cuda_mma_n8"));
  EXPECT_TRUE(llmc::hasKernel(ops[1]));
  auto spec = llmc::emitKernel(ops[1]);
  ASSERT_TRUE(mlir::succeeded(spec)) << diagnostics;
  EXPECT_TRUE(contains(spec->source, "weight=int4-g32-f16-min")) << spec->source;
  // 1536 rows = 192 tiles, a block each whose warps split K's 5 spans of 128 (one warp each).
  EXPECT_EQ(spec->gridRule, "rows/4*192");
  EXPECT_EQ(spec->blockDim[0], 5 * 32);
  // Tensor cores from 33 rows for quantized weights (kQuantTensorCoreMinRows), 16 for dense ones.
  EXPECT_EQ(llmc::batchedMinRows(ops[1]), 33);
  // The tensor-core kernel for steps of 16+ rows, unless the module turns it off.
  auto batched = llmc::emitBatchedKernel(ops[1]);
  ASSERT_TRUE(mlir::succeeded(batched) && batched->has_value()) << diagnostics;
  EXPECT_NE((*batched)->entry.find("_tc_"), std::string::npos) << (*batched)->entry;
  EXPECT_EQ((*batched)->family, "linear");
  (*module)->setAttr("llm.gpu_tensor_cores", mlir::BoolAttr::get(&ctx, false));
  batched = llmc::emitBatchedKernel(ops[1]);
  ASSERT_TRUE(mlir::succeeded(batched));
  EXPECT_FALSE(batched->has_value());
  batched = llmc::emitBatchedKernel(ops[0]); // the weight op: no kernels at all
  ASSERT_TRUE(mlir::succeeded(batched));
  EXPECT_FALSE(batched->has_value());
}

TEST_F(EmitterTest, EmbeddingFollowsTheTableStorage) {
  // GGUF's Q8_0 token table: a GPU kernel only in the cuda_mma_n8 layout.
  auto ops = parse("%t: tensor<?xi32>",
                   "  %w = \"llm.weight\"() {name = \"e\", quant = \"int8-g32-f16-sym\"} : () -> tensor<49152x576xf32>\n"
                   "  %0 = \"llm.embedding\"(%t, %w) : (tensor<?xi32>, tensor<49152x576xf32>) -> tensor<?x576xf32>");
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_FALSE(llmc::hasKernel(ops[1]));
  EXPECT_TRUE(mlir::failed(llmc::emitKernel(ops[1])));
  EXPECT_TRUE(contains(diagnostics, "--weight-layout cuda-mma")) << diagnostics;
  (*module)->setAttr("llm.weight_layout", mlir::StringAttr::get(&ctx, "cuda_mma_n8"));
  EXPECT_TRUE(llmc::hasKernel(ops[1]));
  auto spec = llmc::emitKernel(ops[1]);
  ASSERT_TRUE(mlir::succeeded(spec)) << diagnostics;
  EXPECT_EQ(spec->family, "embedding");
  EXPECT_TRUE(contains(spec->source, "table=int8-g32-f16-sym")) << spec->source;
}

TEST_F(EmitterTest, InvalidShapesAndAttributesFail) {
  expectFailure("%x: tensor<?x?xf32>, %w: tensor<576xf32>",
                "  %0 = \"llm.rms_norm\"(%x, %w) {eps = 1.0e-05 : f32} : "
                "(tensor<?x?xf32>, tensor<576xf32>) -> tensor<?x?xf32>",
                "must be static");
  expectFailure("%x: tensor<?x576xf32>, %w: tensor<100xf32>",
                "  %0 = \"llm.rms_norm\"(%x, %w) {eps = 1.0e-05 : f32} : "
                "(tensor<?x576xf32>, tensor<100xf32>) -> tensor<?x576xf32>",
                "does not divide");
  expectFailure(kRmsArgs,
                "  %0 = \"llm.rms_norm\"(%x, %w) : (tensor<?x576xf32>, "
                "tensor<576xf32>) -> tensor<?x576xf32>",
                "missing attribute 'eps'");
  expectFailure("%x: tensor<?x576xf16>, %w: tensor<576xf16>",
                "  %0 = \"llm.rms_norm\"(%x, %w) {eps = 1.0e-05 : f32} : "
                "(tensor<?x576xf16>, tensor<576xf16>) -> tensor<?x576xf16>",
                "element type f32");
  expectFailure(kRopeArgs,
                ropeOp("num_heads = 8 : i64, head_dim = 64 : i64, theta = "
                       "1.0e+04 : f64"),
                "!= num_heads");
  expectFailure(kRopeArgs,
                ropeOp("num_heads = 9 : i64, head_dim = 64 : i64, theta = "
                       "1.0e+04 : f64, rope_type = \"yarn\""),
                "rope_type 'yarn'");
  expectFailure(kRopeArgs,
                ropeOp("num_heads = 9 : i64, head_dim = 64 : i64, theta = "
                       "1.0e+04 : f64, style = \"sideways\""),
                "style 'sideways'");
  expectFailure(kRopeArgs,
                ropeOp("num_heads = 9 : i64, head_dim = 64 : i64, theta = "
                       "1.0e+04 : f64, rope_type = \"llama3\", factor = 8.0"),
                "missing attribute 'low_freq_factor'");
  expectFailure("%gu: tensor<?x3071xf32>",
                "  %0 = \"llm.silu_mul\"(%gu) : (tensor<?x3071xf32>) -> "
                "tensor<?x1535xf32>",
                "is odd");
  expectFailure("%t: tensor<?xi64>, %table: tensor<100x8xf32>",
                "  %0 = \"llm.embedding\"(%t, %table) : (tensor<?xi64>, "
                "tensor<100x8xf32>) -> tensor<?x8xf32>",
                "element type i32");
}

TEST(KernelFamilies, PlainParameterErrors) {
  EXPECT_FALSE(llmc::emitRmsNormKernel({576, 576, -1.0f}).ok());
  EXPECT_FALSE(llmc::emitRmsNormKernel({0, 0, 1e-5f}).ok());
  EXPECT_FALSE(llmc::emitEmbeddingKernel({0, 8}).ok());
  EXPECT_FALSE(llmc::emitSiluMulKernel({int64_t(1) << 30, false}).ok());
  llmc::RopeParams odd;
  odd.numHeads = 2;
  odd.headDim = 7;
  auto st = llmc::emitRopeKernel(odd);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("head_dim 7"), std::string::npos);
}

} // namespace
