// Host-side planning of the CUDA backend (runtime/cuda/launch_plan.h), no GPU needed: grid
// rules and launch sizes, the CUDA-graph batch buckets, the device memory plan, and the launch
// checks check_plan adds to module selection.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/cuda/launch_plan.h"
#include "runtime/cuda/module_select.h"

namespace llmrt::cuda {
namespace {

TEST(CudaLaunch, GridRules) {
  auto rows = parse_grid_rule("rows");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->per, 1);
  EXPECT_EQ(rows->times, 1);
  auto heads = parse_grid_rule("rows*32");
  ASSERT_TRUE(heads.ok());
  EXPECT_EQ(heads->times, 32);
  auto chunks = parse_grid_rule("rows/4*1024");
  ASSERT_TRUE(chunks.ok());
  EXPECT_EQ(chunks->per, 4);
  EXPECT_EQ(chunks->times, 1024);
  auto split = parse_grid_rule("rows*8 x32 when rows<=32");
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_EQ(split->times, 8);
  EXPECT_EQ(split->small_times, 32);
  EXPECT_EQ(split->small_rows, 32);
  EXPECT_EQ(grid_size(*split, 1, 1 << 20), 256);     // small steps: 32 x the blocks
  EXPECT_EQ(grid_size(*split, 32, 1 << 20), 8192);
  EXPECT_EQ(grid_size(*split, 33, 1 << 20), 264);    // larger ones: rows*8
  EXPECT_EQ(grid_size(*split, 32, 1000), 1000);
  for (const char* bad : {"", "row", "rows*", "rows*0", "rows/4", "rows/0*3", "rows*3x", "rows**3",
                          "rows*-1", "rows*2147483648", "cols*2", "rows/4*2*3", "rows*8 x32",
                          "rows*8 x0 when rows<=32", "rows*8 x32 when rows<=", "rows*8 x32 when rows<=4 ",
                          "rows*8 x32 when cols<=4"}) {
    auto r = parse_grid_rule(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("grid rule"), std::string::npos);
  }
  // ceil(T / per) * times, capped, 0 for no rows.
  EXPECT_EQ(grid_size(*rows, 7, 1 << 20), 7);
  EXPECT_EQ(grid_size(*heads, 3, 1 << 20), 96);
  EXPECT_EQ(grid_size(*chunks, 1, 1 << 20), 1024);
  EXPECT_EQ(grid_size(*chunks, 5, 1 << 20), 2048);
  EXPECT_EQ(grid_size(*chunks, 8, 1 << 20), 2048);
  EXPECT_EQ(grid_size(*chunks, 9, 1500), 1500);
  EXPECT_EQ(grid_size(*heads, 0, 100), 0);
  // Plus a number of blocks per sequence (the tiled attention's query tiles of one sequence).
  auto tiles = parse_grid_rule("rows/16*8 + seqs*8");
  ASSERT_TRUE(tiles.ok()) << tiles.status().to_string();
  EXPECT_EQ(tiles->per, 16);
  EXPECT_EQ(tiles->times, 8);
  EXPECT_EQ(tiles->seq_times, 8);
  EXPECT_EQ(grid_size(*tiles, 100, 1 << 20, 3), (7 + 3) * 8);
  EXPECT_EQ(grid_size(*tiles, 100, 1 << 20), 7 * 8);  // without sequences: the rows' part
  EXPECT_EQ(grid_size(*tiles, 100, 70, 3), 70);
  EXPECT_EQ(grid_size(*tiles, 0, 100, 3), 0);
  EXPECT_EQ(grid_size(*tiles, 1, (int64_t{1} << 31) - 1, int64_t{1} << 40), (int64_t{1} << 31) - 1);  // no overflow
  EXPECT_EQ(grid_size(*split, 1, 1 << 20, 5), 256);  // rules without the term ignore S
  auto both = parse_grid_rule("rows/16*8 + seqs*8 x2 when rows<=4");
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  EXPECT_EQ(grid_size(*both, 4, 1 << 20, 4), 8 * 2 + 4 * 8);
  for (const char* bad : {"rows/16*8 + seqs", "rows/16*8 + seqs*", "rows/16*8 + seqs*0", "rows/16*8 +seqs*8",
                          "rows/16*8 + rows*8", "rows/16*8 x2 when rows<=4 + seqs*8"})
    EXPECT_FALSE(parse_grid_rule(bad).ok()) << bad;
  const GridRule huge{1, (int64_t{1} << 31) - 1};
  EXPECT_EQ(grid_size(huge, int64_t{1} << 40, (int64_t{1} << 31) - 1), (int64_t{1} << 31) - 1);  // no overflow
}

TEST(CudaLaunch, GraphBuckets) {
  EXPECT_EQ(graph_batch_sizes(1), (std::vector<int>{1}));
  EXPECT_EQ(graph_batch_sizes(3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(graph_batch_sizes(32), (std::vector<int>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(graph_batch_sizes(20), (std::vector<int>{1, 2, 4, 8, 16, 20}));
  EXPECT_TRUE(graph_batch_sizes(0).empty());
  const std::vector<int> sizes = graph_batch_sizes(32);
  EXPECT_EQ(graph_bucket(sizes, 1), 1);
  EXPECT_EQ(graph_bucket(sizes, 3), 4);
  EXPECT_EQ(graph_bucket(sizes, 9), 16);
  EXPECT_EQ(graph_bucket(sizes, 32), 32);
  EXPECT_EQ(graph_bucket(sizes, 33), -1);  // larger batches run without a graph
  // Every batch size up to the cap has a bucket no more than 8 above it.
  for (int n = 1; n <= 32; ++n) {
    const int b = graph_bucket(sizes, n);
    EXPECT_GE(b, n);
    EXPECT_LT(b - n, 8);
  }
}

// A plan with a Llama-3-8B-like KV spec and memory plan, weights as one tensor of `weights` bytes.
std::vector<uint8_t> memory_plan(uint64_t weights) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<int64_t> shape = {1};
  std::vector<flatbuffers::Offset<fb::Tensor>> ts = {
      fb::CreateTensorDirect(b, "w", fb::DType::F32, &shape, 0, weights)};
  auto tensors = b.CreateVector(ts);
  auto kv = fb::CreateKvSpecDirect(b, 32, 8, 128, 16, fb::DType::F32, "block_head_slot_dim");
  auto mem = fb::CreateMemoryPlan(b, /*arena per token*/ 200000, /*per seq*/ 1000, /*fixed*/ 4096, 0,
                                  /*max tokens*/ 2048, /*max seqs*/ 64, /*max len*/ 8192);
  fb::ModelInfoBuilder mb(b);
  mb.add_vocab_size(128256);
  auto model = mb.Finish();
  fb::PlanBuilder pb(b);
  pb.add_tensors(tensors);
  pb.add_kv(kv);
  pb.add_memory(mem);
  pb.add_model(model);
  b.Finish(pb.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

TEST(CudaLaunch, DeviceMemoryPlan) {
  const DeviceInfo h200{0, "NVIDIA H200", 9, 0, uint64_t{141} << 30};
  auto bytes = memory_plan(uint64_t{16} << 30);
  const fb::Plan& plan = *flatbuffers::GetRoot<fb::Plan>(bytes.data());
  auto m = plan_device_memory(plan, h200, 0.9, 512, 32);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->weights, uint64_t{16} << 30);
  EXPECT_EQ(m->activations, 200000ull * 512 + 1000 * 32 + 4096);
  // 32 layers x K,V x 8 heads x 16 slots x 128 dims x 4 bytes.
  EXPECT_EQ(m->kv_block_bytes, 32ull * 2 * 8 * 16 * 128 * 4);
  EXPECT_GT(m->batch, 512ull * 128256 * 4);  // the logits dominate
  EXPECT_LE(m->total(), m->budget);
  EXPECT_GT(m->total() + m->kv_block_bytes, m->budget);  // the KV cache takes all that is left
  EXPECT_EQ(m->budget, static_cast<uint64_t>(0.9 * static_cast<double>(h200.total_memory)));

  // A lower utilization: fewer blocks; the same fixed parts.
  auto half = plan_device_memory(plan, h200, 0.5, 512, 32);
  ASSERT_TRUE(half.ok());
  EXPECT_LT(half->kv_blocks, m->kv_blocks);
  EXPECT_EQ(half->weights + half->activations + half->batch, m->weights + m->activations + m->batch);

  // Too small a device: the error names every part.
  const DeviceInfo small{0, "Small GPU", 8, 6, uint64_t{16} << 30};
  auto no = plan_device_memory(plan, small, 0.9, 512, 32);
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"Small GPU", "weights", "activations", "KV cache", "8192 tokens", "16.00 GiB",
                           "--memory-utilization 0.9:"})
    EXPECT_NE(no.status().message().find(part), std::string::npos) << part << ": " << no.status().message();
  // Sizes in the largest unit not above them, so a small plan's parts do not all read 0.00 GiB.
  EXPECT_EQ(format_bytes(uint64_t{3} << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes((uint64_t{1} << 30) - 1), "1024.00 MiB");
  EXPECT_EQ(format_bytes(uint64_t{13} << 18), "3.25 MiB");
  EXPECT_EQ(format_bytes(512), "0.50 KiB");
  EXPECT_EQ(format_bytes(0), "0.00 KiB");

  EXPECT_FALSE(plan_device_memory(plan, h200, 0.0, 512, 32).ok());
  EXPECT_FALSE(plan_device_memory(plan, h200, 1.5, 512, 32).ok());
  EXPECT_FALSE(plan_device_memory(plan, h200, 0.9, 4096, 32).ok());  // above the plan's cap
  EXPECT_FALSE(plan_device_memory(plan, h200, 0.9, 512, 0).ok());
}

// A plan of one "forward" program over `values` and `steps`.
std::vector<uint8_t> forward_plan(flatbuffers::FlatBufferBuilder& b,
                                  const std::vector<flatbuffers::Offset<fb::Value>>& values,
                                  const std::vector<flatbuffers::Offset<fb::Step>>& steps) {
  std::vector<flatbuffers::Offset<fb::Program>> programs = {
      fb::CreateProgramDirect(b, "forward", &values, &steps, 0, 0, 0)};
  auto progs = b.CreateVector(programs);
  fb::PlanBuilder pb(b);
  pb.add_programs(progs);
  b.Finish(pb.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

// The GEMM library's share of device memory: its workspace plus one bf16 copy of the widest
// input a to_bf16 kernel converts, for max_tokens rows; it comes off the KV cache's budget.
std::vector<uint8_t> library_plan(bool with_library) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Value>> values;
  const int64_t widths[] = {1, 4096, 14336, 99999, 50000};
  for (int i = 0; i < 5; ++i)
    values.push_back(fb::CreateValueDirect(b, static_cast<uint32_t>(i), "v", fb::RowKind::Tokens, widths[i],
                                           fb::DType::F32, 0));
  const fb::GemmLibrary lt = with_library ? fb::GemmLibrary::CublasLt : fb::GemmLibrary::None;
  auto step = [&](int in, fb::GemmLibrary library, int input_kernel) {
    std::vector<int> ins = {in}, outs = {0};
    return fb::CreateStepDirect(b, fb::OpKind::Linear, &ins, &outs, nullptr, nullptr, 0, "linear", 1, 16, library,
                                input_kernel);
  };
  std::vector<flatbuffers::Offset<fb::Step>> steps = {
      step(1, lt, 2),                        // bf16: converts 4096 wide
      step(2, lt, 2),                        // bf16: converts 14336 wide (the widest)
      step(3, fb::GemmLibrary::None, -1),    // the generated kernels: no copy
      step(4, lt, -1)};                      // f32 (TF32): read in place, no copy
  return forward_plan(b, values, steps);
}

// Quantized library steps add the bf16 copy of their largest weight (one buffer, rewritten by
// each step's dequant_bf16 kernel before its call).
TEST(CudaLaunch, GemmLibraryMemoryHoldsTheLargestDequantizedWeight) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Value>> values = {
      fb::CreateValueDirect(b, 0, "x", fb::RowKind::Tokens, 4096, fb::DType::F32, 0)};
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  const std::pair<int64_t, int64_t> shapes[] = {{6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  for (const auto& [n, k] : shapes) {
    std::vector<int64_t> shape = {n, k};
    tensors.push_back(fb::CreateTensorDirect(b, "w", fb::DType::I4, &shape, 0, 0, "int4-g128-f16-sym", "cuda_mma_n8"));
  }
  auto step = [&](int weight, int weight_kernel) {
    std::vector<int> ins = {0}, outs = {0}, ws = {weight};
    return fb::CreateStepDirect(b, fb::OpKind::Linear, &ins, &outs, &ws, nullptr, 0, "linear", 1, 33,
                                fb::GemmLibrary::CublasLt, 2, weight_kernel, 16);
  };
  // Weights 0..2 dequantized (gate|up, 28672 x 4096, the largest); 3 without a weight kernel.
  std::vector<flatbuffers::Offset<fb::Step>> steps = {step(0, 3), step(1, 3), step(2, 3), step(3, -1)};
  auto tensors_off = b.CreateVector(tensors);
  std::vector<flatbuffers::Offset<fb::Program>> programs = {
      fb::CreateProgramDirect(b, "forward", &values, &steps, 0, 0, 0)};
  auto progs = b.CreateVector(programs);
  fb::PlanBuilder pb(b);
  pb.add_programs(progs);
  pb.add_tensors(tensors_off);
  b.Finish(pb.Finish());
  const fb::Plan& plan = *flatbuffers::GetRoot<fb::Plan>(b.GetBufferPointer());
  const uint64_t weight = 28672ull * 4096 * 2;
  EXPECT_EQ(gemm_library_weight_bytes(plan), weight);
  EXPECT_EQ(gemm_library_bytes(plan, 256, 1024), 1024 + 4096ull * 256 * 2 + weight);
}

// The int8 activations of quantized GEMVs: one buffer of max_tokens rows of the widest input a
// quantize_q8 kernel writes, 160 bytes per 128 values (the last 128 padded), 256-aligned.
TEST(CudaLaunch, Int8ActivationMemoryHoldsTheWidestInput) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Value>> values;
  const int64_t widths[] = {1, 4096, 14336, 99968, 96};
  for (int i = 0; i < 5; ++i)
    values.push_back(fb::CreateValueDirect(b, static_cast<uint32_t>(i), "v", fb::RowKind::Tokens, widths[i],
                                           fb::DType::F32, 0));
  auto step = [&](int in, int quant) {
    std::vector<int> ins = {in}, outs = {0};
    return fb::CreateStepDirect(b, fb::OpKind::Linear, &ins, &outs, nullptr, nullptr, 0, "linear", -1, 0,
                                fb::GemmLibrary::None, -1, -1, 0, quant);
  };
  // 4096 and 14336 (the widest quantized) wide; 99968 without a quantize kernel.
  std::vector<flatbuffers::Offset<fb::Step>> steps = {step(1, 1), step(2, 1), step(3, -1)};
  const std::vector<uint8_t> with = forward_plan(b, values, steps);
  const fb::Plan& plan = *flatbuffers::GetRoot<fb::Plan>(with.data());
  EXPECT_EQ(quant_input_bytes(plan, 512), 14336ull / 128 * 160 * 512);
  EXPECT_EQ(quant_input_bytes(plan, 3), (14336ull / 128 * 160 * 3 + 255) / 256 * 256);
  flatbuffers::FlatBufferBuilder b2;
  std::vector<flatbuffers::Offset<fb::Value>> v2 = {
      fb::CreateValueDirect(b2, 0, "x", fb::RowKind::Tokens, 96, fb::DType::F32, 0)};
  std::vector<int> io = {0};
  std::vector<flatbuffers::Offset<fb::Step>> s2 = {fb::CreateStepDirect(
      b2, fb::OpKind::Linear, &io, &io, nullptr, nullptr, 0, "linear", -1, 0, fb::GemmLibrary::None, -1, -1, 0, 1)};
  const std::vector<uint8_t> small = forward_plan(b2, v2, s2);
  EXPECT_EQ(quant_input_bytes(*flatbuffers::GetRoot<fb::Plan>(small.data()), 1), 256u);  // 160 -> 256
  const std::vector<uint8_t> none = library_plan(false);
  EXPECT_EQ(quant_input_bytes(*flatbuffers::GetRoot<fb::Plan>(none.data()), 512), 0u);
  // A step writing int8 rows of its output (quantized_output) counts that output's width: here
  // a silu_mul step writing 99968 wide rows next to the 14336 wide GEMV inputs.
  flatbuffers::FlatBufferBuilder b3;
  std::vector<flatbuffers::Offset<fb::Value>> v3;
  for (int i = 0; i < 5; ++i)
    v3.push_back(fb::CreateValueDirect(b3, static_cast<uint32_t>(i), "v", fb::RowKind::Tokens, widths[i],
                                       fb::DType::F32, 0));
  std::vector<int> ins = {2}, outs = {3};
  std::vector<flatbuffers::Offset<fb::Step>> s3 = {
      fb::CreateStepDirect(b3, fb::OpKind::SiluMul, &ins, &outs, nullptr, nullptr, 0, "silu_mul", -1, 0,
                           fb::GemmLibrary::None, -1, -1, 0, -1, true),
      fb::CreateStepDirect(b3, fb::OpKind::Linear, &ins, &outs, nullptr, nullptr, 0, "linear", -1, 0,
                           fb::GemmLibrary::None, -1, -1, 0, 1)};
  const std::vector<uint8_t> producer = forward_plan(b3, v3, s3);
  EXPECT_EQ(quant_input_bytes(*flatbuffers::GetRoot<fb::Plan>(producer.data()), 2),
            ((99968ull + 127) / 128 * 160 * 2 + 255) / 256 * 256);
  // A linear step with a silu kernel (Step.silu_kernel) writes the silu_mul's rows after its own
  // input's: room for two rows of the widest each, and 256 bytes of alignment between them.
  flatbuffers::FlatBufferBuilder b4;
  std::vector<flatbuffers::Offset<fb::Value>> v4;
  for (int i = 0; i < 5; ++i)
    v4.push_back(fb::CreateValueDirect(b4, static_cast<uint32_t>(i), "v", fb::RowKind::Tokens, widths[i],
                                       fb::DType::F32, 0));
  std::vector<int> x = {1}, y = {2}, h = {4};
  std::vector<flatbuffers::Offset<fb::Step>> s4 = {
      fb::CreateStepDirect(b4, fb::OpKind::Linear, &x, &y, nullptr, nullptr, 0, "gate_up", -1, 0,
                           fb::GemmLibrary::None, -1, -1, 0, 1, false, -1, 0),
      fb::CreateStepDirect(b4, fb::OpKind::SiluMul, &y, &h, nullptr, nullptr, 0, "silu_mul", -1, 0,
                           fb::GemmLibrary::None, -1, -1, 0, -1, true)};
  const std::vector<uint8_t> silu = forward_plan(b4, v4, s4);
  EXPECT_EQ(quant_input_bytes(*flatbuffers::GetRoot<fb::Plan>(silu.data()), 3),
            (4096ull / 128 * 160 * 2 * 3 + 255) / 256 * 256 + 256);
}

TEST(CudaLaunch, GemmLibraryMemory) {
  const uint64_t workspace = uint64_t{32} << 20;
  auto with = library_plan(true);
  const fb::Plan& plan = *flatbuffers::GetRoot<fb::Plan>(with.data());
  EXPECT_EQ(gemm_library_bytes(plan, 512, workspace), workspace + 14336ull * 512 * 2);
  EXPECT_EQ(gemm_library_bytes(plan, 3, workspace), workspace + (14336ull * 3 * 2 + 255) / 256 * 256);
  auto without = library_plan(false);
  EXPECT_EQ(gemm_library_bytes(*flatbuffers::GetRoot<fb::Plan>(without.data()), 512, workspace), 0u);
  // Library steps that convert nothing (f32 weights) need the workspace only.
  {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Value>> values = {
        fb::CreateValueDirect(b, 0, "x", fb::RowKind::Tokens, 4096, fb::DType::F32, 0)};
    std::vector<int> io = {0};
    std::vector<flatbuffers::Offset<fb::Step>> steps = {fb::CreateStepDirect(
        b, fb::OpKind::Linear, &io, &io, nullptr, nullptr, 0, "linear", 1, 16, fb::GemmLibrary::CublasLt, -1)};
    auto f32 = forward_plan(b, values, steps);
    EXPECT_EQ(gemm_library_bytes(*flatbuffers::GetRoot<fb::Plan>(f32.data()), 512, workspace), workspace);
  }

  // In the device memory plan it is a fixed part next to the weights: fewer KV blocks.
  const DeviceInfo h200{0, "NVIDIA H200", 9, 0, uint64_t{141} << 30};
  auto bytes = memory_plan(uint64_t{16} << 30);
  const fb::Plan& mp = *flatbuffers::GetRoot<fb::Plan>(bytes.data());
  auto plain = plan_device_memory(mp, h200, 0.9, 512, 32);
  const uint64_t library = uint64_t{3} << 30;  // large enough to cost blocks
  auto lib = plan_device_memory(mp, h200, 0.9, 512, 32, library);
  ASSERT_TRUE(plain.ok() && lib.ok());
  EXPECT_EQ(plain->library, 0u);
  EXPECT_EQ(lib->library, library);
  EXPECT_EQ(lib->kv_blocks,
            static_cast<int64_t>((lib->budget - lib->weights - lib->activations - lib->batch - library) /
                                 lib->kv_block_bytes));
  EXPECT_LT(lib->kv_blocks, plain->kv_blocks);
  EXPECT_EQ(lib->total(), lib->weights + lib->activations + lib->batch + library + lib->kv);
  EXPECT_LE(lib->total(), lib->budget);
  // A device it no longer fits: the error names the library's part too.
  const DeviceInfo small{0, "Small GPU", 8, 6, uint64_t{24} << 30};
  ASSERT_TRUE(plan_device_memory(mp, small, 0.9, 512, 32).ok());
  auto no = plan_device_memory(mp, small, 0.9, 512, 32, uint64_t{8} << 30);
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(no.status().message().find("GEMM library 8.00 GiB"), std::string::npos) << no.status().message();
}

// check_plan refuses kernels whose launch the runtime could not compute.
std::vector<uint8_t> kernel_plan(const std::string& rule, std::vector<int> block) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<uint8_t> ptx = {'.', 'v'}, cubin = {0x7f, 'E', 'L', 'F'};
  std::vector<flatbuffers::Offset<fb::KernelImage>> ims = {fb::CreateKernelImageDirect(b, "sm_90", &ptx, &cubin)};
  std::vector<flatbuffers::Offset<fb::Kernel>> ks = {
      fb::CreateKernelDirect(b, "llm_k", "linear", "", &block, rule.c_str(), 0, &ims)};
  auto kv = b.CreateVector(ks);
  fb::PlanBuilder pb(b);
  pb.add_kernels(kv);
  pb.add_cuda_min_driver_version(13000);
  b.Finish(pb.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

TEST(CudaLaunch, CheckPlanValidatesLaunchGeometry) {
  const DeviceInfo h200{0, "NVIDIA H200", 9, 0, uint64_t{141} << 30};
  auto check = [&](const std::string& rule, std::vector<int> block) {
    auto bytes = kernel_plan(rule, std::move(block));
    return check_plan(*flatbuffers::GetRoot<fb::Plan>(bytes.data()), h200, 13000);
  };
  EXPECT_TRUE(check("rows/4*1024", {128, 1, 1}).ok());
  auto bad_rule = check("tiles", {128, 1, 1});
  ASSERT_FALSE(bad_rule.ok());
  EXPECT_NE(bad_rule.status().message().find("llm_k"), std::string::npos) << bad_rule.status().message();
  EXPECT_FALSE(check("rows", {2048, 1, 1}).ok());
  EXPECT_FALSE(check("rows", {128, 1}).ok());
  EXPECT_FALSE(check("rows", {0, 1, 1}).ok());
  EXPECT_FALSE(check("rows", {64, 32, 1}).ok());  // 2048 threads
}

}  // namespace
}  // namespace llmrt::cuda
