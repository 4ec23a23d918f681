// Plan file reader: round trip, version/feature/ABI refusal, semantic checks, corruption.
#include "runtime/plan/plan_file.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "runtime/base/mix.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/plan/synthetic_weights.h"
#include "runtime/quant/quant_format.h"
#include "tests/unit/isa_guard.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

using testing::make_tiny_plan;
using testing::serialize_tiny_plan;
using testing::TinyPlanConfig;

std::string temp_path(const char* tag) {
  return ::testing::TempDir() + "plan_file_test_" + tag + "_" + std::to_string(getpid()) + ".fb";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

/// Writes `flatbuffer` as a complete plan whose weight section is all zeros.
std::vector<uint8_t> plan_bytes_with(std::vector<uint8_t> flatbuffer) {
  const uint64_t weights = fb::GetPlan(flatbuffer.data())->weights_size();
  std::string path = temp_path("mut");
  auto w = PlanFileWriter::create(path, flatbuffer.data(), flatbuffer.size(), weights);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE(w.value()->pad_to(weights).ok());
  EXPECT_TRUE(w.value()->finish().ok());
  std::vector<uint8_t> bytes = read_file(path);
  std::remove(path.c_str());
  return bytes;
}

TEST(Printable, EscapesBytesThatAreNotPrintableUtf8) {
  EXPECT_EQ(printable("tensor 'w.q'"), "tensor 'w.q'");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x96\x81"), "caf\xc3\xa9 \xe2\x96\x81");  // UTF-8 kept
  EXPECT_EQ(printable(std::string("a\x00" "b\n\x7f", 5)), "a\\x00b\\x0a\\x7f");
  EXPECT_EQ(printable("\xff\xc3(\xe2\x96"), "\\xff\\xc3(\\xe2\\x96");  // invalid, truncated
  EXPECT_EQ(printable("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");  // overlong, surrogate
}

TEST(PlanFile, RoundTripKeepsTensorsAndHash) {
  auto spec = make_tiny_plan(TinyPlanConfig{});
  std::string path = temp_path("rt");
  ASSERT_TRUE(testing::write_tiny_plan(spec, path).ok());
  auto plan = Plan::open(path);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ((*plan)->header().weights_offset % kWeightAlignment, 0u);
  EXPECT_TRUE((*plan)->verify_weights_hash().ok());
  for (const auto& t : spec.tensors) {
    int idx = (*plan)->find_tensor(t.name);
    ASSERT_GE(idx, 0) << t.name;
    const float* data = reinterpret_cast<const float*>((*plan)->tensor_data(idx));
    EXPECT_EQ(0, std::memcmp(data, t.data.data(), t.data.size() * sizeof(float))) << t.name;
  }
  EXPECT_EQ((*plan)->find_tensor("no.such.tensor"), -1);
  EXPECT_NE((*plan)->program("forward"), nullptr);
  std::remove(path.c_str());
}

TEST(PlanFile, NewerSchemaMajorIsRefused) {
  auto buf = serialize_tiny_plan(make_tiny_plan(TinyPlanConfig{}));
  ASSERT_TRUE(fb::GetMutablePlan(buf.data())->mutate_schema_major(kSchemaMajor + 1));
  auto bytes = plan_bytes_with(buf);
  auto plan = Plan::from_bytes(bytes.data(), bytes.size());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(plan.status().message().find("schema major version " + std::to_string(kSchemaMajor + 1)),
            std::string::npos)
      << plan.status().message();
}

TEST(PlanFile, OtherKernelAbiIsRefused) {
  auto buf = serialize_tiny_plan(make_tiny_plan(TinyPlanConfig{}));
  ASSERT_TRUE(fb::GetMutablePlan(buf.data())->mutate_cpu_kernel_abi(kCpuKernelAbi + 7));
  auto bytes = plan_bytes_with(buf);
  auto plan = Plan::from_bytes(bytes.data(), bytes.size());
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("kernel ABI"), std::string::npos) << plan.status().message();
}

TEST(PlanFile, UnknownRequiredFeatureIsRefused) {
  for (const char* feature : {"forward_v1", "quantum_weights"}) {
    flatbuffers::FlatBufferBuilder fbb;
    auto feats = fbb.CreateVectorOfStrings(std::vector<std::string>{feature});
    fb::PlanBuilder pb(fbb);
    pb.add_schema_major(kSchemaMajor);
    pb.add_cpu_kernel_abi(kCpuKernelAbi);
    pb.add_required_features(feats);
    fb::FinishPlanBuffer(fbb, pb.Finish());
    auto bytes = plan_bytes_with(std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
    auto plan = Plan::from_bytes(bytes.data(), bytes.size());
    ASSERT_FALSE(plan.ok());  // no programs in either case
    const bool unknown = std::string(feature) == "quantum_weights";
    EXPECT_EQ(plan.status().message().find("requires feature 'quantum_weights'") != std::string::npos, unknown)
        << plan.status().message();
  }
}

TEST(PlanFile, TensorOutsideWeightsIsRefused) {
  auto buf = serialize_tiny_plan(make_tiny_plan(TinyPlanConfig{}));
  // The last tensor: its offset is non-zero, so FlatBuffers stored the field and it can be mutated.
  auto* tensors = fb::GetMutablePlan(buf.data())->mutable_tensors();
  auto* t = tensors->GetMutableObject(tensors->size() - 1);
  ASSERT_TRUE(t->mutate_offset(uint64_t{1} << 40));
  auto bytes = plan_bytes_with(buf);
  auto plan = Plan::from_bytes(bytes.data(), bytes.size());
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("outside the weight section"), std::string::npos)
      << plan.status().message();
}

TEST(PlanFile, KernelReferenceOutOfRangeIsRefused) {
  // A minimal program whose only step names kernel 3 of a plan without kernels (or, with
  // kernel -1, a batched kernel 0 with no main kernel).
  for (int kernel : {-1, 3, -2}) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::Value>> values = {
        fb::CreateValueDirect(fbb, 0, "tokens", fb::RowKind::Tokens, 1, fb::DType::I32, 0)};
    std::vector<int> io = {0};
    std::vector<flatbuffers::Offset<fb::Step>> steps = {
        kernel == -2 ? fb::CreateStepDirect(fbb, fb::OpKind::Add, &io, &io, nullptr, nullptr, -1, "add", 0, 16)
                     : fb::CreateStepDirect(fbb, fb::OpKind::Add, &io, &io, nullptr, nullptr, kernel, "add")};
    std::vector<flatbuffers::Offset<fb::Program>> programs = {
        fb::CreateProgramDirect(fbb, "forward", &values, &steps, 0, 0, 0)};
    auto progs = fbb.CreateVector(programs);
    fb::PlanBuilder pb(fbb);
    pb.add_schema_major(kSchemaMajor);
    pb.add_cpu_kernel_abi(kCpuKernelAbi);
    pb.add_programs(progs);
    fb::FinishPlanBuffer(fbb, pb.Finish());
    auto bytes = plan_bytes_with(std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
    auto plan = Plan::from_bytes(bytes.data(), bytes.size());
    if (kernel == -1) {
      EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    } else {
      ASSERT_FALSE(plan.ok());
      EXPECT_NE(plan.status().message().find(kernel == -2 ? "batched kernel" : "kernel index"), std::string::npos)
          << plan.status().message();
    }
  }
}

TEST(PlanFile, LogitsSummaryAndSamplingKernelsAreCheckedForRangeAndFamily) {
  // A program naming kernel `summary` as its logits summary kernel and `sampling` as its sampling
  // kernel (schema minor 13); the plan's kernel 0 is of family `family`, kernel 1 a sampling one.
  struct Case {
    int summary;
    const char* family;
    const char* error;  // nullptr: accepted
    int sampling = -1;
  };
  for (const Case& c : {Case{0, "logits_summary", nullptr}, Case{2, "logits_summary", "index out of range"},
                        Case{0, "rms_norm", "of family 'rms_norm'"}, Case{0, "logits_summary", nullptr, 1},
                        Case{0, "logits_summary", "sampling kernel index out of range", 2},
                        Case{0, "logits_summary", "its sampling kernel is of family 'logits_summary'", 0},
                        Case{-1, "logits_summary", "a sampling kernel without the logits summary kernel", 1}}) {
    SCOPED_TRACE(std::to_string(c.summary) + " " + std::to_string(c.sampling));
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::Value>> values = {
        fb::CreateValueDirect(fbb, 0, "tokens", fb::RowKind::Tokens, 1, fb::DType::I32, 0)};
    std::vector<int> io = {0};
    std::vector<flatbuffers::Offset<fb::Step>> steps = {
        fb::CreateStepDirect(fbb, fb::OpKind::Add, &io, &io, nullptr, nullptr, -1, "add")};
    std::vector<flatbuffers::Offset<fb::Program>> programs = {
        fb::CreateProgramDirect(fbb, "forward", &values, &steps, 0, 0, 0, c.summary, c.sampling)};
    auto progs = fbb.CreateVector(programs);
    std::vector<int> block = {256, 1, 1};
    std::vector<flatbuffers::Offset<fb::Kernel>> kernels = {
        fb::CreateKernelDirect(fbb, "k", c.family, "", &block, "rows", 0, nullptr),
        fb::CreateKernelDirect(fbb, "s", "sample", "", &block, "rows", 0, nullptr)};
    auto kernelsOff = fbb.CreateVector(kernels);
    fb::PlanBuilder pb(fbb);
    pb.add_schema_major(kSchemaMajor);
    pb.add_cpu_kernel_abi(kCpuKernelAbi);
    pb.add_programs(progs);
    pb.add_kernels(kernelsOff);
    fb::FinishPlanBuffer(fbb, pb.Finish());
    auto bytes = plan_bytes_with(std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
    auto plan = Plan::from_bytes(bytes.data(), bytes.size());
    if (!c.error) {
      EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    } else {
      ASSERT_FALSE(plan.ok());
      EXPECT_NE(plan.status().message().find(c.error), std::string::npos) << plan.status().message();
    }
  }
}

using StepsMaker = std::function<std::vector<flatbuffers::Offset<fb::Step>>(flatbuffers::FlatBufferBuilder&)>;

// A plan of one program "forward" with the steps `make_steps` builds over values 0 (I32, the
// tokens and positions input) and 1-4 (f32), over kernels of the given families, in plan bytes.
StatusOr<std::unique_ptr<Plan>> steps_plan(std::initializer_list<const char*> families, const StepsMaker& make_steps,
                                           uint64_t workspace_bytes = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::Value>> values = {
      fb::CreateValueDirect(fbb, 0, "tokens", fb::RowKind::Tokens, 1, fb::DType::I32, 0)};
  for (int i = 1; i <= 4; ++i)
    values.push_back(fb::CreateValueDirect(fbb, i, ("v" + std::to_string(i)).c_str(), fb::RowKind::Tokens, 4,
                                           fb::DType::F32, 16 * i));
  std::vector<flatbuffers::Offset<fb::Step>> steps = make_steps(fbb);
  std::vector<flatbuffers::Offset<fb::Program>> programs = {
      fb::CreateProgramDirect(fbb, "forward", &values, &steps, 0, 0, 0)};
  auto progs = fbb.CreateVector(programs);
  std::vector<int> block = {128, 1, 1};
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  for (const char* family : families)
    kernels.push_back(
        fb::CreateKernelDirect(fbb, (std::string("k_") + family).c_str(), family, "", &block, "rows", 0, nullptr,
                               workspace_bytes));
  auto kernels_off = fbb.CreateVector(kernels);
  fb::PlanBuilder pb(fbb);
  pb.add_schema_major(kSchemaMajor);
  pb.add_schema_minor(kSchemaMinor);
  pb.add_cpu_kernel_abi(kCpuKernelAbi);
  pb.add_programs(progs);
  pb.add_kernels(kernels_off);
  fb::FinishPlanBuffer(fbb, pb.Finish());
  auto bytes = plan_bytes_with(std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
  return Plan::from_bytes(bytes.data(), bytes.size());
}

// A steps_plan of the one step `make_step` builds (its inputs and outputs: value 0).
StatusOr<std::unique_ptr<Plan>> one_step_plan(
    std::initializer_list<const char*> families,
    const std::function<flatbuffers::Offset<fb::Step>(flatbuffers::FlatBufferBuilder&, const std::vector<int>*)>&
        make_step) {
  const std::vector<int> io = {0};
  return steps_plan(families, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return std::vector<flatbuffers::Offset<fb::Step>>{make_step(fbb, &io)};
  });
}

// The plan reader refused a steps_plan with an invalid-argument error naming `where` (by default
// the one step of a one_step_plan) and `error`.
void expect_step_refused(const StatusOr<std::unique_ptr<Plan>>& plan, const char* error,
                         const char* where = "program 'forward' step 0") {
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().to_string();
  EXPECT_NE(plan.status().message().find(error), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find(where), std::string::npos) << plan.status().message();
}

TEST(PlanFile, GemmLibraryFieldsAreChecked) {
  // A one-step program over a plan with five kernels: 0 and 1 of family linear (the step's
  // kernel and batched kernel), 2 to_bf16, 3 rms_norm, 4 dequant_bf16. The step names a GEMM
  // library (schema minor 5), a library input kernel, a library weight kernel and the rows from
  // which it calls the library (minor 7); each malformed combination is refused naming the step.
  struct Case {
    const char* what;
    fb::OpKind op;
    int batched;
    fb::GemmLibrary library;
    int input;
    const char* error;  // nullptr: accepted
    int weight = -1;    // library_weight_kernel
    int min_rows = 0;   // library_min_rows
  };
  const fb::GemmLibrary lt = fb::GemmLibrary::CublasLt, none = fb::GemmLibrary::None;
  const Case cases[] = {
      {"a bf16 library step", fb::OpKind::Linear, 1, lt, 2, nullptr},
      {"an f32 library step (no input kernel)", fb::OpKind::Linear, 1, lt, -1, nullptr},
      {"no library", fb::OpKind::Linear, 1, none, -1, nullptr},
      {"a library on a logits step", fb::OpKind::Logits, 1, lt, -1, "not a linear with a batched kernel"},
      {"a library on an rms_norm step", fb::OpKind::RmsNorm, 1, lt, -1, "not a linear with a batched kernel"},
      {"a library without a batched kernel", fb::OpKind::Linear, -1, lt, -1, "not a linear with a batched kernel"},
      {"an unknown library", fb::OpKind::Linear, 1, static_cast<fb::GemmLibrary>(2), -1, "unknown GEMM library 2"},
      {"a negative library", fb::OpKind::Linear, 1, static_cast<fb::GemmLibrary>(-3), -1, "unknown GEMM library -3"},
      {"an input kernel past the kernels", fb::OpKind::Linear, 1, lt, 5, "library input kernel index out of range"},
      {"a negative input kernel", fb::OpKind::Linear, 1, lt, -2, "library input kernel index out of range"},
      {"an input kernel of family rms_norm", fb::OpKind::Linear, 1, lt, 3, "library input kernel is of family 'rms_norm'"},
      {"an input kernel of family linear", fb::OpKind::Linear, 1, lt, 0, "library input kernel is of family 'linear'"},
      {"an input kernel without a library", fb::OpKind::Linear, 1, none, 2, "without a library"},
      {"a quantized library step", fb::OpKind::Linear, 1, lt, 2, nullptr, 4, 16},
      {"a weight kernel of family to_bf16", fb::OpKind::Linear, 1, lt, 2, "library weight kernel is of family 'to_bf16'", 2},
      {"a weight kernel without an input kernel", fb::OpKind::Linear, 1, lt, -1, "and its bf16 input kernel", 4},
      {"a weight kernel without a library", fb::OpKind::Linear, 1, none, -1, "library weight kernel index", 4},
      {"a weight kernel past the kernels", fb::OpKind::Linear, 1, lt, 2, "library weight kernel index out of range", 5},
      {"a negative weight kernel", fb::OpKind::Linear, 1, lt, 2, "library weight kernel index out of range", -7},
      {"negative library rows", fb::OpKind::Linear, 1, lt, 2, "library_min_rows -1 is negative", -1, -1},
      {"library rows without a library", fb::OpKind::Linear, 1, none, -1, "library_min_rows 16", -1, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto plan = one_step_plan({"linear", "linear", "to_bf16", "rms_norm", "dequant_bf16"}, [&](auto& fbb, auto* io) {
      return fb::CreateStepDirect(fbb, c.op, io, io, nullptr, nullptr, 0, "step", c.batched, c.batched >= 0 ? 16 : 0,
                                  c.library, c.input, c.weight, c.min_rows);
    });
    if (!c.error) {
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      const fb::Step* st = (*plan)->program("forward")->steps()->Get(0);
      EXPECT_EQ(st->gemm_library(), c.library);
      EXPECT_EQ(st->library_input_kernel(), c.input);
      EXPECT_EQ(st->library_weight_kernel(), c.weight);
      EXPECT_EQ(st->library_min_rows(), c.min_rows);
    } else {
      expect_step_refused(plan, c.error);
    }
  }
}

TEST(PlanFile, RopeKernelIsChecked) {
  // rope_kernel (schema minor 10): on a paged_attention step with a kernel whose q (value 2) is
  // the output of the rope_kv_store step just before it, over the program's positions (value 0),
  // read by no other step; a paged_attention kernel; its outputs' arena rows apart from qkv's
  // (value 1; values 1-4 hold 16 bytes a row each, 16 bytes apart). Anything else is refused
  // naming the problem.
  struct Case {
    const char* what;
    fb::OpKind before;
    std::vector<int> store_in, attention_in;
    fb::OpKind op;
    int rope_kernel;
    bool another_reader;
    const char* error;  // nullptr: accepted
    int out = 4;        // the attention's output value
  };
  const fb::OpKind rkv = fb::OpKind::RopeKvStore, att = fb::OpKind::PagedAttention;
  const char* placement = "not on a paged_attention step with a kernel whose q is the output of the rope_kv_store";
  for (const Case& c : {
           Case{"valid", rkv, {1, 0}, {2}, att, 2, false, nullptr},
           Case{"out of range", rkv, {1, 0}, {2}, att, 3, false, "rope kernel index out of range"},
           Case{"on a linear", rkv, {1, 0}, {2}, fb::OpKind::Linear, 2, false, placement},
           Case{"after a rope", fb::OpKind::Rope, {1, 0}, {2}, att, 2, false, placement},
           Case{"q not the store's", rkv, {1, 0}, {3}, att, 2, false, placement},
           Case{"other positions", rkv, {1, 3}, {2}, att, 2, false, placement},
           Case{"a rope_kv_store kernel", rkv, {1, 0}, {2}, att, 0, false, "its rope kernel is of family 'rope_kv_store'"},
           Case{"q read again", rkv, {1, 0}, {2}, att, 2, true, "is read by 2 steps"},
           Case{"output over qkv", rkv, {1, 0}, {2}, att, 2, false, "(their arena rows overlap)", 1},
       }) {
    SCOPED_TRACE(c.what);
    auto plan = steps_plan({"rope_kv_store", "paged_attention", "paged_attention"}, [&](auto& fbb) {
      const std::vector<int> out2 = {2}, out4 = {c.out}, in3 = {2};
      std::vector<flatbuffers::Offset<fb::Step>> steps = {
          fb::CreateStepDirect(fbb, c.before, &c.store_in, &out2, nullptr, nullptr, 0, "store"),
          fb::CreateStepDirect(fbb, c.op, &c.attention_in, &out4, nullptr, nullptr, 1, "attention", -1, 0,
                               fb::GemmLibrary::None, -1, -1, 0, -1, false, c.rope_kernel)};
      if (c.another_reader)
        steps.push_back(fb::CreateStepDirect(fbb, fb::OpKind::Add, &in3, &out4, nullptr, nullptr, -1, "reader"));
      return steps;
    });
    if (!c.error) {
      EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    } else {
      // (the attention step, or the program for a second reader of q)
      expect_step_refused(plan, c.error, c.another_reader ? "program 'forward': value 2" : "program 'forward' step 1");
    }
  }
}

TEST(PlanFile, SiluKernelIsChecked) {
  // silu_kernel (schema minor 11): on a linear step with a kernel (x value 1, y value 2) whose
  // output is read only by the silu_mul step just after it (its one input); a linear kernel; the
  // silu_mul's output arena rows apart from x's (values 1-4: 16 bytes a row each, 16 bytes
  // apart). Anything else is refused naming the problem.
  struct Case {
    const char* what;
    fb::OpKind op, next;
    int silu_kernel;
    std::vector<int> next_in;
    const char* error;          // nullptr: accepted
    const char* where = "program 'forward' step 0";
    int out = 3;                // the silu_mul's output value
    bool another_reader = false;
    bool last = false;          // the linear is the program's last step
  };
  const fb::OpKind lin = fb::OpKind::Linear, sm = fb::OpKind::SiluMul;
  const char* step1 = "program 'forward' step 1";
  const char* not_silu = "this step is not the silu_mul of that step's output";
  for (const Case& c : {
           Case{"valid", lin, sm, 2, {2}, nullptr},
           Case{"out of range", lin, sm, 3, {2}, "silu kernel index out of range"},
           Case{"on an rms_norm", fb::OpKind::RmsNorm, sm, 2, {2}, "not on a linear step with a kernel"},
           Case{"a silu_mul kernel", lin, sm, 1, {2}, "its silu kernel is of family 'silu_mul'"},
           Case{"before an add", lin, fb::OpKind::Add, 2, {2}, not_silu, step1},
           Case{"before a silu_mul of another value", lin, sm, 2, {3}, not_silu, step1},
           Case{"before a two-input silu_mul", lin, sm, 2, {2, 3}, not_silu, step1},
           Case{"output over x", lin, sm, 2, {2}, "(their arena rows overlap)", step1, 1},
           Case{"y read again", lin, sm, 2, {2}, "is read by 2 steps", "program 'forward': value 2", 3, true},
           Case{"the last step", lin, sm, 2, {2}, "a silu kernel on the last step", "program 'forward' step 0", 3,
                false, true},
       }) {
    SCOPED_TRACE(c.what);
    auto plan = steps_plan({"linear", "silu_mul", "linear"}, [&](auto& fbb) {
      const std::vector<int> x = {1}, y = {2}, h = {c.out}, v4 = {4};
      std::vector<flatbuffers::Offset<fb::Step>> steps = {
          fb::CreateStepDirect(fbb, c.op, &x, &y, nullptr, nullptr, 0, "gate_up", -1, 0, fb::GemmLibrary::None, -1,
                               -1, 0, -1, false, -1, c.silu_kernel)};
      if (!c.last)
        steps.push_back(fb::CreateStepDirect(fbb, c.next, &c.next_in, &h, nullptr, nullptr, 1, "silu"));
      if (c.another_reader)
        steps.push_back(fb::CreateStepDirect(fbb, fb::OpKind::Add, &y, &v4, nullptr, nullptr, -1, "reader"));
      return steps;
    });
    if (!c.error) {
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_EQ((*plan)->program("forward")->steps()->Get(0)->silu_kernel(), 2);
    } else {
      expect_step_refused(plan, c.error, c.where);
    }
  }
}

TEST(PlanFile, NormKernelIsChecked) {
  // norm_kernel (schema minor 12): on a linear step with a kernel (x value 1, y value 2) and no
  // silu kernel, followed by the add_rms_norm step that adds y to another value (its two
  // inputs: y and that value, either order); a linear kernel with a workspace (its counter).
  // Anything else is refused naming the problem.
  struct Case {
    const char* what;
    fb::OpKind op, next;
    int norm_kernel;
    std::vector<int> next_in;
    const char* error;  // nullptr: accepted
    uint64_t workspace = 256;
    int silu_kernel = -1;
    bool last = false;  // the linear is the program's last step
  };
  const fb::OpKind lin = fb::OpKind::Linear, arn = fb::OpKind::AddRmsNorm;
  const char* not_after = "the step after it is not an add_rms_norm of its output and another value";
  const char* placement = "not on a linear step with a kernel";
  for (const Case& c : {
           Case{"valid", lin, arn, 2, {2, 3}, nullptr},
           Case{"valid, y the residual", lin, arn, 2, {3, 2}, nullptr},
           Case{"out of range", lin, arn, 3, {2, 3}, "norm kernel index out of range"},
           Case{"on an rms_norm", fb::OpKind::RmsNorm, arn, 2, {2, 3}, placement},
           Case{"with a silu kernel", lin, arn, 2, {2, 3}, placement, 256, 2},
           Case{"an add_rms_norm kernel", lin, arn, 1, {2, 3}, "its norm kernel is of family 'add_rms_norm'"},
           Case{"without a workspace", lin, arn, 2, {2, 3}, "takes no workspace", 0},
           Case{"before an add", lin, fb::OpKind::Add, 2, {2, 3}, not_after},
           Case{"before an add_rms_norm of other values", lin, arn, 2, {3, 4}, not_after},
           Case{"before an add_rms_norm of y and y", lin, arn, 2, {2, 2}, not_after},
           Case{"the last step", lin, arn, 2, {2, 3}, not_after, 256, -1, true},
       }) {
    SCOPED_TRACE(c.what);
    auto plan = steps_plan(
        {"linear", "add_rms_norm", "linear"},
        [&](auto& fbb) {
          const std::vector<int> x = {1}, y = {2}, outs = {3, 4}, w = {0};
          std::vector<flatbuffers::Offset<fb::Step>> steps = {
              fb::CreateStepDirect(fbb, c.op, &x, &y, nullptr, nullptr, 0, "o_proj", -1, 0, fb::GemmLibrary::None, -1,
                                   -1, 0, -1, false, -1, c.silu_kernel, c.norm_kernel)};
          if (!c.last)
            steps.push_back(fb::CreateStepDirect(fbb, c.next, &c.next_in, &outs, nullptr, nullptr, 1, "norm"));
          return steps;
        },
        c.workspace);
    if (!c.error) {
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_EQ((*plan)->program("forward")->steps()->Get(0)->norm_kernel(), 2);
    } else {
      expect_step_refused(plan, c.error);
    }
  }
}

TEST(PlanFile, QuantizedOutputIsChecked) {
  // quantized_output (schema minor 9): rms_norm, add_rms_norm, silu_mul and permute_columns
  // steps with a kernel only; anything else is refused naming the step.
  struct Case {
    const char* what;
    fb::OpKind op;
    int kernel;
    const char* error;  // nullptr: accepted
  };
  const Case cases[] = {
      {"an rms_norm step", fb::OpKind::RmsNorm, 0, nullptr},
      {"an add_rms_norm step", fb::OpKind::AddRmsNorm, 1, nullptr},
      {"a silu_mul step", fb::OpKind::SiluMul, 2, nullptr},
      {"a permute_columns step", fb::OpKind::PermuteColumns, 4, nullptr},
      {"a linear step", fb::OpKind::Linear, 3, "quantized_output on a step that is not an rms_norm"},
      {"a step without a kernel", fb::OpKind::RmsNorm, -1, "quantized_output on a step that is not an rms_norm"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto plan = one_step_plan({"rms_norm", "add_rms_norm", "silu_mul", "linear", "permute_columns"},
                              [&](auto& fbb, auto* io) {
                                return fb::CreateStepDirect(fbb, c.op, io, io, nullptr, nullptr, c.kernel, "step", -1,
                                                            0, fb::GemmLibrary::None, -1, -1, 0, -1, true);
                              });
    if (!c.error) {
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_TRUE((*plan)->program("forward")->steps()->Get(0)->quantized_output());
    } else {
      expect_step_refused(plan, c.error);
    }
  }
}

TEST(PlanFile, InputQuantKernelIsChecked) {
  // A one-step program over kernels 0 linear, 1 quantize_q8, 2 rms_norm: a linear or logits step
  // with a kernel may name a quantize_q8 kernel for its input (schema minor 8); anything else is
  // refused naming the step.
  struct Case {
    const char* what;
    fb::OpKind op;
    int kernel;
    int quant;
    const char* error;  // nullptr: accepted
  };
  const Case cases[] = {
      {"a linear step", fb::OpKind::Linear, 0, 1, nullptr},
      {"a logits step", fb::OpKind::Logits, 0, 1, nullptr},
      {"none", fb::OpKind::Linear, 0, -1, nullptr},
      {"an rms_norm step", fb::OpKind::RmsNorm, 2, 1, "not a linear or logits with a kernel"},
      {"a step without a kernel", fb::OpKind::Linear, -1, 1, "not a linear or logits with a kernel"},
      {"past the kernels", fb::OpKind::Linear, 0, 3, "input quantization kernel index out of range"},
      {"negative", fb::OpKind::Linear, 0, -2, "input quantization kernel index out of range"},
      {"of family rms_norm", fb::OpKind::Linear, 0, 2, "input quantization kernel is of family 'rms_norm'"},
      {"of family linear", fb::OpKind::Linear, 0, 0, "input quantization kernel is of family 'linear'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto plan = one_step_plan({"linear", "quantize_q8", "rms_norm"}, [&](auto& fbb, auto* io) {
      return fb::CreateStepDirect(fbb, c.op, io, io, nullptr, nullptr, c.kernel, "step", -1, 0, fb::GemmLibrary::None,
                                  -1, -1, 0, c.quant);
    });
    if (!c.error) {
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      EXPECT_EQ((*plan)->program("forward")->steps()->Get(0)->input_quant_kernel(), c.quant);
    } else {
      expect_step_refused(plan, c.error);
    }
  }
}

TEST(PlanFile, TruncationsAndFlipsNeverCrash) {
  auto spec = make_tiny_plan(TinyPlanConfig{});
  std::string path = temp_path("fuzz");
  ASSERT_TRUE(testing::write_tiny_plan(spec, path).ok());
  std::vector<uint8_t> good = read_file(path);
  std::remove(path.c_str());
  ASSERT_TRUE(Plan::from_bytes(good.data(), good.size()).ok());
  // Every truncation inside the header and FlatBuffer, and a sample beyond, is an error.
  const PlanFileHeader* h = reinterpret_cast<const PlanFileHeader*>(good.data());
  for (size_t cut = 0; cut < good.size(); cut += (cut < h->weights_offset ? 7 : 4099)) {
    auto plan = Plan::from_bytes(good.data(), cut);
    EXPECT_FALSE(plan.ok()) << "truncated at " << cut;
  }
  std::mt19937 rng(42);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bad = good;
    size_t pos = rng() % h->weights_offset;
    bad[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
    auto plan = Plan::from_bytes(bad.data(), bad.size());  // must return, ok or not
    refused += !plan.ok();
  }
  EXPECT_GT(refused, 0);
}

TEST(PlanFile, WeightCorruptionFailsHashCheck) {
  auto spec = make_tiny_plan(TinyPlanConfig{});
  std::string path = temp_path("hash");
  ASSERT_TRUE(testing::write_tiny_plan(spec, path).ok());
  std::vector<uint8_t> bytes = read_file(path);
  std::remove(path.c_str());
  bytes[bytes.size() - 3] ^= 0x10;
  auto plan = Plan::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(plan.ok());
  Status s = (*plan)->verify_weights_hash();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hash"), std::string::npos);
}

TEST(PlanFile, NotAPlan) {
  const char text[] = "this is certainly not a plan file, it is just some text padding it out....";
  auto plan = Plan::from_bytes(reinterpret_cast<const uint8_t*>(text), sizeof(text));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("magic"), std::string::npos);
  auto missing = Plan::open("/nonexistent/dir/plan.fb");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/plan.fb"), std::string::npos);
}

}  // namespace
}  // namespace llmrt

namespace llmrt {
namespace {

// Generated weights depend on (seed, tensor, row) only: the same bytes for any thread count; a
// quantized tensor's rows are valid rows of its format (finite scales, zero points in range).
TEST(SyntheticWeights, SameBytesForAnyThreadCountAndValidRows) {
  auto plan = Plan::open(std::string(LLMRT_TEST_SOURCE_DIR) + "/tests/fuzz/corpus/plan/micro_llama_int4.fb");
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const fb::Plan& p = (*plan)->fb();
  const uint64_t size = p.weights_size();
  std::vector<uint8_t> a(size, 0xAB), b(size, 0xCD), c(size, 0);
  ASSERT_TRUE(generate_synthetic_weights(p, 42, a.data(), size, 1).ok());
  ASSERT_TRUE(generate_synthetic_weights(p, 42, b.data(), size, 3).ok());
  ASSERT_TRUE(generate_synthetic_weights(p, 43, c.data(), size, 2).ok());
  int quantized = 0;
  for (const fb::Tensor* t : *p.tensors()) {
    const uint8_t* ta = a.data() + t->offset();
    EXPECT_EQ(std::memcmp(ta, b.data() + t->offset(), t->size()), 0) << t->name()->str();
    EXPECT_NE(std::memcmp(ta, c.data() + t->offset(), t->size()), 0) << t->name()->str() << ": seed ignored";
    if (!t->quant() || t->quant()->size() == 0) continue;
    ++quantized;
    const quant::Format f = *quant::parse_format(t->quant()->str());
    const quant::Layout l = *quant::parse_layout(t->layout()->str());
    const int64_t n = t->shape()->Get(0), k = t->shape()->Get(1), rb = *quant::row_bytes(f, k);
    std::vector<uint8_t> row(rb);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* src = ta + r * rb;
      if (quant::is_tiled(l)) {
        quant::unpack_row(f, l, k, ta + r / 8 * 8 * rb, static_cast<int>(r % 8), row.data());
        src = row.data();
      }
      ASSERT_EQ(quant::check_row(f, src, k), "") << t->name()->str() << " row " << r;
    }
  }
  EXPECT_GT(quantized, 0);
}

// The f32 tensors hold the header's draws, value for value, computed here one at a time with
// scalar floats, at every ISA level of the generator's loops that this CPU runs (baseline, AVX2,
// AVX-512): the vector loops give the scalar floats.
TEST(SyntheticWeights, F32TensorsAreTheDocumentedDraws) {
  auto plan = Plan::open(std::string(LLMRT_TEST_SOURCE_DIR) + "/tests/fuzz/corpus/plan/micro_llama.fb");
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const fb::Plan& p = (*plan)->fb();
  const uint64_t seed = 1234567;
  IsaGuard guard;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (static_cast<int>(isa) > static_cast<int>(detected_isa())) continue;
    set_active_isa(isa);
    std::vector<uint8_t> w(p.weights_size());
    ASSERT_TRUE(generate_synthetic_weights(p, seed, w.data(), w.size(), 2).ok());
    int checked = 0;
    for (const fb::Tensor* t : *p.tensors()) {
      if (t->dtype() != fb::DType::F32 || (t->quant() && t->quant()->size() > 0)) continue;
      const std::string name = t->name()->str();
      const bool matrix = t->shape()->size() == 2, bias = name.find(".bias") != std::string::npos;
      const int64_t n = matrix ? t->shape()->Get(0) : 1, k = t->shape()->Get(t->shape()->size() - 1);
      const uint64_t h = XXH3_64bits(name.data(), name.size());
      const float a = std::sqrt(3.0f / static_cast<float>(k));
      for (int64_t r = 0; r < n; ++r) {
        const uint64_t base = seed ^ mix64(h ^ mix64(static_cast<uint64_t>(r)));
        for (int64_t i = 0; i < k; ++i) {
          const uint64_t bits = mix64(base + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) >> 40;
          auto uniform = [&](float lo, float hi) {  // 24 random bits scaled into [lo, hi)
            return lo + (hi - lo) * static_cast<float>(bits) * (1.0f / 16777216.0f);
          };
          const float want = matrix ? uniform(-a, a) : bias ? uniform(-0.02f, 0.02f) : 1.0f + uniform(-0.1f, 0.1f);
          float got;
          std::memcpy(&got, w.data() + t->offset() + (r * k + i) * 4, 4);
          ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
              << isa_name(isa) << ": " << name << " row " << r << " element " << i;
        }
      }
      ++checked;
    }
    EXPECT_GT(checked, 2);
  }
}

TEST(PlanFile, KvCacheTypesAreNamedByTheCompilerAndKnownToTheRuntime) {
  // Every type the compiler may write: its DType's element size and its feature are the runtime's;
  // a step may also name it by its DType; other names are none.
  size_t n = 0;
  const char* const* features = supported_features(&n);
  for (const char* name : {"f32", "bf16", "f16", "fp8", "int8"}) {
    const KvCacheType* t = kv_cache_type(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_STREQ(t->name, name);
    EXPECT_GT(kv_elem_bytes(t->dtype), 0u) << name;
    EXPECT_EQ(kv_cache_type(fb::EnumNameDType(t->dtype)), t) << name;
    EXPECT_NE(std::find_if(features, features + n, [&](const char* f) { return std::strcmp(f, t->feature) == 0; }),
              features + n)
        << t->feature;
  }
  EXPECT_EQ(kv_cache_type("fp8")->dtype, fb::DType::F8E4M3);
  EXPECT_EQ(kv_elem_bytes(fb::DType::F8E4M3), 1u);
  for (const char* name : {"e5m2", "I4", "int4", "", "F32 "}) EXPECT_EQ(kv_cache_type(name), nullptr) << name;
}

}  // namespace
}  // namespace llmrt
