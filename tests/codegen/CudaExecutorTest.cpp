// The CUDA executor (runtime/cuda/cuda_executor.h) end to end without a GPU: plans compiled by
// llmc with kernel images run through a cuda::Driver that emulates the device on the host.
// Device memory is host memory; loading a module finds the plan kernel whose image it is and
// builds that kernel's CUDA C++ source with the host compiler against HostEmulation.h; a launch
// runs it with the executor's exact parameter block. So everything but the GPU itself is real:
// module selection, the memory plan, weight upload, argument marshalling, launch geometry, the
// batch upload and the KV cache. Logits must match the CPU executor on the same plan. The
// emulation is EmulatedExecutor.h; the GEMM library's tests are CudaExecutorGemmLibraryTest.cpp.

#include "EmulatedExecutor.h"

#include "runtime/engine/make_executor.h"
#include "runtime/generate/generator.h"
#include "runtime/serve/engine.h"

namespace {

using namespace llmc::testing::emulated;

/// Prefill of two sequences (one spanning blocks), then a decode step of both, on both
/// executors (the CPU under `cpuKernels`); logits compared at every row. `int8Gemv`: whether
/// the plan's quantized GEMVs read int8 activations (each after its input's quantize_q8).
void runBothAndCompare(const std::string &planPath, double tol, bool tensorCores = false,
                       const char *cpuKernels = "reference", bool int8Gemv = false, bool fusedQkv = true) {
  auto plan = llmrt::Plan::open(planPath);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 32, 4, 16, true, true, {}, cpuKernels);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  auto &cpu = ex->cpu;
  const int V = ex->V, bs = ex->bs;
  const int mb = 16 / 4;
  EXPECT_GE(gpu->memory().kv_block_bytes, 1u);
  for (const Step &st : {makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1),    // prefill
                         makeStep({bs + 4, 6}, {1, 1}, bs, mb, V, 2)})      // decode
    ex->compare(st, tol);
  // The decode step launches each layer's rope_kv_store inside its attention kernel (where q, k
  // and v are one projection: fuse-rope-kv-store's input).
  EXPECT_EQ(gpu->rope_in_attention_steps(), fusedQkv ? gpu->num_layers() : 0);
  EXPECT_EQ(driver.launches(), 2 * gpu->launches_per_step(2) + gpu->rope_in_attention_steps());
  EXPECT_EQ(driver.int8GemvLaunches() > 0, int8Gemv) << driver.int8GemvLaunches();
  // (their inputs quantized by a quantize_q8 kernel or by the step writing them)
  EXPECT_LE(driver.quantizeLaunches(), driver.int8GemvLaunches());
  if (!int8Gemv)
    EXPECT_EQ(driver.quantizeLaunches(), 0);
  std::printf("[ measured ] vs the CPU's %s contract%s: max |logit error| / max(1, max |logit|) = %.2e\n",
              cpuKernels, int8Gemv ? " (int8-activation GEMVs)" : "", ex->worst);
  // The prefill (24 rows) runs the tensor-core kernels when the plan has them; decode never.
  EXPECT_EQ(driver.tensorCoreLaunches() > 0, tensorCores) << driver.tensorCoreLaunches();
  // Copy-on-write of a KV block (sequence 0's first, positions 0..bs-1, into the unused block
  // 15), then decode sequence 0 reading the copy: the device's copy must hold what the CPU's does
  // (the emulated device fills fresh memory with 0xCD bytes, so a missing copy shows).
  ASSERT_TRUE(gpu->copy_kv_block(mb - 1, 15).ok());
  ASSERT_TRUE(cpu->copy_kv_block(mb - 1, 15).ok());
  EXPECT_FALSE(gpu->copy_kv_block(0, 16).ok());
  Step fork = makeStep({bs + 5}, {1}, bs, mb, V, 4);
  ASSERT_EQ(fork.tables[0], mb - 1);
  fork.tables[0] = 15;  // the decode row (position bs + 4) lies in table entry 1: its slot stays
  std::vector<float> lg(fork.idx.size() * V, NAN), lc(lg.size(), NAN);
  ASSERT_TRUE(gpu->forward(fork.input(), lg.data()).ok());
  ASSERT_TRUE(cpu->forward(fork.input(), lc.data()).ok());
  expectLogitsClose(lg, lc, tol);
  // A bad batch is refused before anything runs.
  Step bad = makeStep({3}, {3}, bs, mb, V, 3);
  bad.tokens[0] = V + 5;
  std::vector<float> lb(bad.idx.size() * V);
  EXPECT_FALSE(gpu->forward(bad.input(), lb.data()).ok());
}

TEST(CudaExecutor, F32PlanMatchesTheCpuExecutor) {
  TempDir dir;
  const std::string plan =
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                  "--target sm_80,sm_90 --no-tensor-cores");
  runBothAndCompare(plan, 1e-4);
}

/// GPU plans whose quantized GEMVs read int8 activations against the CPU's fast contract: both
/// quantize every 32 inputs alike (bit for bit, QuantizeQ8Kernel) and sum the same integer
/// blocks (LinearKernel.Int8ActivationGemvComputesTheFastContract, within 1e-5), but the inputs
/// themselves differ by summation order upstream, and where one lies within that of a rounding
/// boundary its code differs by one: d = max|block| / 127 moved, which these tiny random models
/// carry to the logits at a few 1e-3 (measured: GPTQ 8-bit and AWQ 4-bit agree to 4e-7; the
/// GPTQ 4-bit prefill of two prompts agrees to 5e-6 in rows 0-14 and 19-23 and differs by up to
/// 6.5e-3 in rows 15-18: one code at row 15, seen by that sequence's later rows through
/// attention; the reference contract differs from the fast one by 1e-2 - 2e-2 here).
constexpr double kInt8ActivationTol = 1e-2;

TEST(CudaExecutor, GptqDescActInTheMmaLayoutMatchesTheCpuExecutor) {
  // The GEMV over int8 activations (the default) computes the CPU's fast contract; over f32
  // activations (--quant-gemv f32) the reference contract. Without tensor cores every linear
  // step of every size runs the GEMV.
  TempDir dir;
  const std::string plan =
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/quant/gptq_4bit_desc_act",
                  "--target sm_90 --weight-layout cuda-mma --no-tensor-cores");
  runBothAndCompare(plan, kInt8ActivationTol, false, "fast", true);
  TempDir dir2;
  const std::string f32 =
      compilePlan(dir2, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/quant/gptq_4bit_desc_act",
                  "--target sm_90 --weight-layout cuda-mma --no-tensor-cores --quant-gemv f32");
  runBothAndCompare(f32, 1e-4);
}

TEST(CudaExecutor, Int8ActivationGemvOfSignedCodesMatchesTheFastContract) {
  // GPTQ 8-bit (sym: signed codes, no offset) on the int8-activation GEMV against the CPU's fast
  // contract (AWQ 4-bit, with zero points: StepsBeforeInt8GemvsWriteTheirInputRows).
  TempDir dir;
  runBothAndCompare(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/quant/gptq_8bit_sym",
                                "--target sm_90 --weight-layout cuda-mma --no-tensor-cores"),
                    kInt8ActivationTol, false, "fast", true);
}

TEST(CudaExecutor, StepsBeforeInt8GemvsWriteTheirInputRows) {
  // The steps before a GEMV over int8 activations write its rows (plan Step.quantized_output):
  // the input norm, the post-attention norm and SiLU*mul of every layer, the per-row attention
  // for o_proj where head_dim is a multiple of 32 (AWQ fixture: 32; GPTQ: 16, o_proj's input is
  // quantized by its own kernel) and, with GPTQ act-order, the column permutation before each
  // GEMV. The logits equal, bit for bit, those of the same executor told to quantize in every
  // GEMV's own kernel (--no-fused-quantize): both write the same rows. Last, a plan with tensor
  // cores whose linear steps stay on the GEMV (--no-tensor-core-linear): a 45-row prefill runs
  // the tiled attention, which writes no int8 rows, so o_proj quantizes its input itself. (Its
  // TF32 products move the attention's outputs by ~1e-3, enough to move many int8 codes a step:
  // 1.6e-2 from the CPU's fast contract measured there, 2.9e-7 with the per-row attention.)
  struct Case {
    const char *model, *flags;
    bool tensorCoreLinear;
    int marked;                  // steps writing int8 rows, per layer
    std::vector<int> rows;       // prefill rows of the two sequences
    int prefillQuant, decodeQuant; // quantize_q8 launches per forward, per layer
    double tol;
  };
  const char *noTc = "--target sm_90 --weight-layout cuda-mma --no-tensor-cores";
  for (const Case &c :
       {Case{"awq_4bit_gemm", noTc, true, 4, {19, 5}, 0, 0, kInt8ActivationTol},
        Case{"gptq_4bit_sym", noTc, true, 3, {19, 5}, 1, 1, kInt8ActivationTol},
        Case{"gptq_4bit_desc_act", noTc, true, 4, {19, 5}, 0, 0, kInt8ActivationTol},
        Case{"awq_4bit_gemm", "--target sm_90 --weight-layout cuda-mma", false, 4, {40, 5}, 1, 0, 3e-2}}) {
    SCOPED_TRACE(std::string(c.model) + " " + c.flags);
    TempDir dir;
    auto plan =
        llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/quant/" + c.model, c.flags));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const auto *steps = (*plan)->program("forward")->steps();
    int layers = 0, marked = 0, gemvs = 0, logitsQuant = 0;
    for (flatbuffers::uoffset_t i = 0; i < steps->size(); ++i) {
      const llmrt::fb::Step *st = steps->Get(i);
      layers += st->op() == llmrt::fb::OpKind::PagedAttention;
      gemvs += st->input_quant_kernel() >= 0;
      logitsQuant += st->op() == llmrt::fb::OpKind::Logits && st->input_quant_kernel() >= 0;
      if (!st->quantized_output())
        continue;
      ++marked;
      SCOPED_TRACE(st->name()->str());
      ASSERT_LT(i + 1, steps->size());
      const llmrt::fb::Step *next = steps->Get(i + 1);
      EXPECT_EQ(next->op(), llmrt::fb::OpKind::Linear);
      EXPECT_GE(next->input_quant_kernel(), 0);
      EXPECT_EQ(next->inputs()->Get(0), st->outputs()->Get(0));
      EXPECT_NE(
          (*plan)->fb().kernels()->Get(static_cast<flatbuffers::uoffset_t>(st->kernel()))->name()->str().find("_q8_"),
          std::string::npos);
    }
    ASSERT_EQ(layers, 2);
    EXPECT_EQ(marked, c.marked * layers);
    EXPECT_EQ(gemvs, 4 * layers + logitsQuant);

    std::vector<std::vector<float>> logits(2);
    std::vector<int> quantizes(2), int8Gemvs(2);
    for (const bool fused : {true, false}) {
      SCOPED_TRACE(fused ? "fused" : "--no-fused-quantize");
      EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
      auto ex = makeExecutors(**plan, driver, 64, 4, 16, true, true,
                              [&](cuda::CudaExecutorOptions &o) {
                                o.fused_quantize = fused;
                                o.tensor_core_linear = c.tensorCoreLinear;
                              },
                              "fast");
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      const int V = ex->V, bs = ex->bs, mb = 4;
      for (const Step &st : {makeStep({c.rows[0], c.rows[1]}, {c.rows[0], c.rows[1]}, bs, mb, V, 1),  // prefill
                             makeStep({c.rows[0] + 1, c.rows[1] + 1}, {1, 1}, bs, mb, V, 2)}) {       // decode
        std::vector<float> lg(st.idx.size() * V, NAN);
        ASSERT_TRUE(ex->gpu->forward(st.input(), lg.data()).ok());
        logits[fused].insert(logits[fused].end(), lg.begin(), lg.end());
        ex->compare(st, c.tol); // (runs the step again on both)
      }
      quantizes[fused] = driver.quantizeLaunches();
      int8Gemvs[fused] = driver.int8GemvLaunches();
      if (c.tensorCoreLinear) // (launches_per_step counts a decode step's; a prefill's has the rope_kv_stores)
        EXPECT_EQ(driver.launches(), 4 * ex->gpu->launches_per_step(2) + 2 * ex->gpu->rope_in_attention_steps());
    }
    // Two forwards of each step (forward, then compare).
    EXPECT_EQ(quantizes[true], 2 * layers * (c.prefillQuant + c.decodeQuant) + 4 * logitsQuant);
    EXPECT_EQ(quantizes[false], 4 * gemvs);
    EXPECT_EQ(int8Gemvs[true], int8Gemvs[false]);
    EXPECT_EQ(int8Gemvs[true], 4 * gemvs);
    ASSERT_EQ(logits[true].size(), logits[false].size());
    EXPECT_EQ(std::memcmp(logits[true].data(), logits[false].data(), logits[true].size() * sizeof(float)), 0);
  }
}

TEST(CudaExecutor, TensorCorePlansMatchWithinTf32Rounding) {
  // The prefill (24 rows) takes the tensor-core path of every linear step: TF32 operands (10
  // mantissa bits) move the logits by ~1e-3 of their largest magnitude (measured 8e-4 here);
  // decode rows inherit it through the KV cache.
  TempDir dir;
  const std::string plan =
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/quant/gptq_4bit_desc_act",
                  "--target sm_90 --weight-layout cuda-mma --quant-gemv f32");
  runBothAndCompare(plan, 3e-3, /*tensorCores=*/true);
}

TEST(CudaExecutor, LargeStepsRunTiledAttentionOnTensorCores) {
  // Steps of 33 rows or more run the tiled prefill attention (tensor cores) instead of the
  // per-row kernel: a prefill of two prompts (50 rows), a mixed step (a decode row, its own
  // query tile, next to a 35-row chunk after 10 cached positions), a small decode step (the
  // per-row kernel), then 33 sequences decoding at once, replayed as the graph of batch 40 with
  // 7 padding rows (the tiled kernel again). Logits within TF32 rounding of the CPU's.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  const int mb = 4, seqs = 33;
  auto ex = makeExecutors(**plan, driver, 128, 40, seqs * mb);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const int V = ex->V, bs = ex->bs;
  ASSERT_GE(bs * mb, 46);
  const double tol = 3e-3;
  auto tiled = [&](const Step &st) {
    const int before = driver.tiledAttentionLaunches();
    ex->compare(st, tol);
    return driver.tiledAttentionLaunches() - before;
  };
  const int layers = 2;
  EXPECT_EQ(tiled(makeStep({40, 10}, {40, 10}, bs, mb, V, 1)), layers);
  EXPECT_EQ(tiled(makeStep({41, 45}, {1, 35}, bs, mb, V, 2)), layers);
  EXPECT_EQ(tiled(makeStep({42, 46}, {1, 1}, bs, mb, V, 3)), 0);
  std::vector<int> ctx(seqs), rows(seqs);
  for (int s = 0; s < seqs; ++s)
    ctx[s] = rows[s] = 2 + s % 3; // 99 rows
  EXPECT_EQ(tiled(makeStep(ctx, rows, bs, mb, V, 4)), layers); // 33 prompts in one step
  for (int &c : ctx)
    ++c;
  const int graphs = driver.graphLaunches();
  EXPECT_EQ(tiled(makeStep(ctx, std::vector<int>(seqs, 1), bs, mb, V, 5)), layers);
  EXPECT_EQ(driver.graphLaunches() - graphs, 1);

  // tiled_attention = false (llmrt --no-tiled-attention): the same large step on the per-row
  // kernel, still within TF32 rounding of the CPU (the linear steps keep their tensor cores).
  EmulatedDriver perRow((*plan)->fb(), uint64_t{1} << 30);
  auto ex2 = makeExecutors(**plan, perRow, 128, 40, seqs * mb, true, /*tiledAttention=*/false);
  ASSERT_TRUE(ex2.ok()) << ex2.status().to_string();
  ex2->compare(makeStep({40, 10}, {40, 10}, bs, mb, V, 1), tol);
  EXPECT_EQ(perRow.tiledAttentionLaunches(), 0);
  EXPECT_GT(perRow.tensorCoreLaunches(), 0);
}

TEST(CudaExecutor, ProfilesEveryKernelWithEvents) {
  // A prefill then a decode step with a profiler attached: every step and the summary kernel
  // timed by events, the decode launched kernel by kernel (no graph); detached, decode replays
  // its graph again. A driver without events: forward() says so.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 64, 4, 16);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  const int V = ex->V, bs = ex->bs, mb = 4;
  llmrt::Profiler profiler;
  gpu->set_profiler(&profiler);
  const int steps = static_cast<int>((*plan)->program("forward")->steps()->size());
  ASSERT_EQ(profiler.num_steps(), size_t(steps) + 1); // + the logits summary
  Step prefill = makeStep({40, 5}, {40, 5}, bs, mb, V, 1); // 45 rows: tensor-core kernels
  ex->compare(prefill, 3e-3);                                // whole logits rows
  // Decode, summarized on the device (the CPU keeps its cache in step).
  const Step decode = makeStep({41, 6}, {1, 1}, bs, mb, V, 2);
  std::vector<llmrt::LogitsSummary> sums(2);
  std::vector<float> cpuLogits(2 * size_t(V));
  ASSERT_TRUE(gpu->forward_summary(decode.input(), sums.data()).ok());
  ASSERT_TRUE(ex->cpu->forward(decode.input(), cpuLogits.data()).ok());
  for (int r = 0; r < 2; ++r) { // each row's largest logit, within TF32 rounding of the CPU's
    const float cpuMax = *std::max_element(cpuLogits.begin() + r * V, cpuLogits.begin() + (r + 1) * V);
    EXPECT_NEAR(sums[r].max, cpuMax, 3e-3 * std::max(1.0f, std::fabs(cpuMax))) << r;
  }
  EXPECT_EQ(driver.graphLaunches(), 0);
  EXPECT_EQ(driver.eventRecords(), 2 * (steps + 2));
  const llmrt::ProfileTable t = profiler.table();
  EXPECT_EQ(t.forwards, 2);
  EXPECT_EQ(t.rows, 47);
  int64_t steps_ns = 0;
  std::map<std::string, int64_t> calls;
  for (const llmrt::ProfileRow &r : t.by_op) {
    calls[r.name] = r.calls;
    steps_ns += r.total_ns;
  }
  EXPECT_EQ(calls["LogitsSummary"], 2);
  EXPECT_EQ(calls["PagedAttention"], 2 * 2); // 2 layers, 2 forwards
  EXPECT_EQ(calls["Linear"], 2 * 2 * 4);     // qkv, o, gate_up, down per layer
  EXPECT_GT(steps_ns, 0);
  EXPECT_LE(steps_ns, t.forward_ns);
  // Kernels are named by shape and storage, the tensor-core one with its threshold.
  const std::string table = profiler.format_table();
  EXPECT_NE(table.find("PagedAttention h4_kv2_d16_b16 (tc from 33 rows)"), std::string::npos) << table;
  EXPECT_NE(table.find("Linear n64_k64_f32 (tc from 16 rows)"), std::string::npos) << table;
  EXPECT_NE(table.find("LogitsSummary on the device"), std::string::npos) << table;
  EXPECT_NE(table.find("weights GB/s"), std::string::npos) << table;
  // The weight bandwidth counts each linear step's tensors once per call.
  for (const llmrt::ProfileRow &r : t.by_op)
    if (r.name == "Linear" || r.name == "Logits")
      EXPECT_GT(r.weight_bytes, 0u) << r.name;
  // Detached: the next decode replays a graph.
  gpu->set_profiler(nullptr);
  ex->compare(makeStep({42, 7}, {1, 1}, bs, mb, V, 3), 3e-3);
  EXPECT_EQ(driver.graphLaunches(), 1);

  EmulatedDriver plain((*plan)->fb(), uint64_t{1} << 30, /*graphs=*/true, /*events=*/false);
  auto ex2 = makeExecutors(**plan, plain, 64, 4, 16);
  ASSERT_TRUE(ex2.ok()) << ex2.status().to_string();
  llmrt::Profiler p2;
  ex2->gpu->set_profiler(&p2);
  auto st = ex2->gpu->forward_summary(prefill.input(), sums.data());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), llmrt::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("CUDA events"), std::string::npos) << st.to_string();
}

TEST(CudaExecutor, DecodeStepsReplayGraphsWithNewInputs) {
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // With graphs, without (the option), and on a driver that has no graph API.
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode == 0 ? "graphs" : mode == 1 ? "cuda_graphs = false" : "driver without graphs");
    EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30, /*graphs=*/mode != 2);
    auto ex = makeExecutors(**plan, driver, 32, 4, 16, /*graphs=*/mode != 1);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    auto &gpu = ex->gpu;
    const int V = ex->V, bs = ex->bs, mb = 4;
    auto both = [&](const Step &st) { ex->compare(st, 1e-4); };
    both(makeStep({bs + 2, 5, 9}, {bs + 2, 5, 9}, bs, mb, V, 1)); // prefill: launched step by step
    const int eager = driver.launches();
    // Decode: 3 sequences (padded to 4), the same size again at new positions (a replay of the
    // same graph), 2, then 1 (graphs of 2 and of 1).
    both(makeStep({bs + 3, 6, 10}, {1, 1, 1}, bs, mb, V, 2));
    both(makeStep({bs + 4, 7, 11}, {1, 1, 1}, bs, mb, V, 3));
    both(makeStep({bs + 5, 8}, {1, 1}, bs, mb, V, 4));
    both(makeStep({bs + 6}, {1}, bs, mb, V, 5));
    EXPECT_EQ(driver.launches() - eager, 2 * gpu->launches_per_step(3) + gpu->launches_per_step(2) +
                                             gpu->launches_per_step(1)); // every step ran once
    if (mode == 0) {
      EXPECT_TRUE(gpu->graphs_enabled());
      EXPECT_EQ(driver.graphsCaptured(), 3);
      EXPECT_EQ(gpu->graphs_captured(), 3);
      EXPECT_EQ(driver.graphLaunches(), 4);
    } else {
      EXPECT_FALSE(gpu->graphs_enabled());
      EXPECT_EQ(driver.graphsCaptured(), 0);
      EXPECT_EQ(driver.graphLaunches(), 0);
      EXPECT_EQ(gpu->warnings().empty(), mode == 1);
    }
  }
}

// Programmatic dependent launch: on compute capability 9.0+ under a CUDA 12.3+ driver with
// cuLaunchKernelEx, every step's kernel that follows another of the plan's kernels is launched
// overlapped with it (its sm_90 image waits on griddepcontrol, the plan says so); the first
// kernel of a forward (after the input copies) and every kernel of a profiled forward are not.
// The emulated driver refuses an overlapped launch that breaks these rules.
TEST(CudaExecutor, KernelsAfterKernelsLaunchOverlappedOnSm90) {
  TempDir dir;
  const std::string path = compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                       "--target sm_80,sm_90 --no-tensor-cores");
  auto plan = llmrt::Plan::open(path);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // The same plan as if an older toolkit (12.2) had built it, so that a 12.2 driver may run it
  // but not capture programmatic launches in a graph (which needs 12.3).
  const std::string bytes = llmc::testing::readFile(path);
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  const auto *header = reinterpret_cast<const llmrt::PlanFileHeader *>(copy.data());
  ASSERT_TRUE(llmrt::fb::GetMutablePlan(copy.data() + header->flatbuffer_offset)->mutate_cuda_min_driver_version(12020));
  auto oldPlan = llmrt::Plan::from_bytes(copy.data(), copy.size());
  ASSERT_TRUE(oldPlan.ok()) << oldPlan.status().to_string();
  for (const llmrt::fb::Kernel *k : *(*plan)->fb().kernels())
    for (const llmrt::fb::KernelImage *im : *k->images())
      EXPECT_EQ(im->grid_dependency_control(), im->target()->str() == "sm_90")
          << k->name()->str() << " " << im->target()->str();
  enum Mode { kOn, kOff, kNoDriverSupport, kAmpere, kOldDriver, kProfiled };
  for (Mode mode : {kOn, kOff, kNoDriverSupport, kAmpere, kOldDriver, kProfiled}) {
    SCOPED_TRACE(mode);
    const llmrt::Plan &pl = mode == kOldDriver ? **oldPlan : **plan;
    EmulatedDriver driver(pl.fb(), uint64_t{1} << 30);
    if (mode == kNoDriverSupport)
      driver.setProgrammaticLaunch(false);
    if (mode == kAmpere)
      driver.setDevice(8, 6); // loads the sm_80 CUBIN, which has no griddepcontrol
    if (mode == kOldDriver)
      driver.setVersion(12020); // graphs cannot capture programmatic launches before 12.3
    auto ex = makeExecutors(pl, driver, 32, 4, 16, true, true,
                            [&](cuda::CudaExecutorOptions &o) { o.programmatic_launch = mode != kOff; });
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    auto &gpu = ex->gpu;
    const bool on = mode == kOn || mode == kProfiled;
    EXPECT_EQ(gpu->programmatic_launch(), on);
    const int steps = static_cast<int>(pl.program("forward")->steps()->size());
    EXPECT_EQ(gpu->overlapped_kernels(), on ? steps : 0);
    // A prefill launches every step's kernel but the silu_mul's (inside the gate|up GEMV: these
    // GEMVs run at every row count), a decode step one fewer per layer again (its rope_kv_store
    // inside the attention kernel, also overlapped).
    const int prefill = gpu->launches_per_step(2) + gpu->rope_in_attention_steps();
    EXPECT_EQ(gpu->silu_in_gemv_steps(), gpu->num_layers());
    ASSERT_EQ(prefill, steps - gpu->silu_in_gemv_steps());
    llmrt::Profiler profiler;
    if (mode == kProfiled)
      gpu->set_profiler(&profiler);
    const int V = ex->V, bs = ex->bs, mb = 4;
    ex->compare(makeStep({bs + 2, 5}, {bs + 2, 5}, bs, mb, V, 1), 1e-4); // prefill
    if (!on) { // (emulation is slow: the modes that launch plainly run one step)
      EXPECT_EQ(driver.launches(), prefill);
      EXPECT_EQ(driver.overlappedLaunches(), 0);
      continue;
    }
    ex->compare(makeStep({bs + 3, 6}, {1, 1}, bs, mb, V, 2), 1e-4); // decode (a graph unless profiled)
    ex->compare(makeStep({bs + 4, 7}, {1, 1}, bs, mb, V, 3), 1e-4); // its replay
    EXPECT_EQ(driver.launches(), prefill + 2 * gpu->launches_per_step(2));
    // All but the first kernel of the prefill and of the captured decode (the replay reruns the
    // capture's launches without launching anew); profiled steps launch plainly, to time each kernel.
    const int overlapped = prefill - 1 + gpu->launches_per_step(2) - 1;
    EXPECT_EQ(driver.overlappedLaunches(), mode == kOn ? overlapped : 0);
  }
}

TEST(CudaExecutor, SummarizesLogitsOnTheDeviceAndReadsRowsOnDemand) {
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_GE((*plan)->program("forward")->logits_summary_kernel(), 0);
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 32, 4, 16);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  auto &cpu = ex->cpu;
  EXPECT_TRUE(gpu->summarizes_on_device());
  const int V = ex->V, bs = ex->bs, mb = 4;
  auto check = [&](const Step &st, int wantLaunches) {
    const int L = static_cast<int>(st.idx.size());
    const int before = driver.launches();
    ex->compareSummaries(st); // (reading rows back and the CPU forward launch nothing)
    EXPECT_EQ(driver.launches() - before, wantLaunches);
    std::vector<float> one(V);
    EXPECT_TRUE(gpu->read_logits(L - 1, 1, one.data()).ok());
    EXPECT_FALSE(gpu->read_logits(L, 1, one.data()).ok()); // past the step's rows
  };
  // A prefill step launched kernel by kernel, then a decode step replayed as a graph (the
  // summary kernel runs after the graph): every step once, plus one summary launch.
  check(makeStep({bs + 2, 5, 9}, {bs + 2, 5, 9}, bs, mb, V, 1),
        gpu->launches_per_step(3) + gpu->rope_in_attention_steps() + 1);
  check(makeStep({bs + 3, 6, 10}, {1, 1, 1}, bs, mb, V, 2), gpu->launches_per_step(3) + 1);
  EXPECT_EQ(driver.graphLaunches(), 1);
}

TEST(CudaExecutor, DrawsAtATemperatureOnTheDevice) {
  // The plan's sampling kernel over the step's rows: each draw (temperatures, top-k, top-p,
  // min-p, steps) is the host sampler's on the device's own row (read back), with its logprob;
  // one launch per call; greedy and penalized draws are not the device's; rows past the step are
  // errors; with device sampling off the executor draws nothing.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_GE((*plan)->program("forward")->sampling_kernel(), 0);
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 32, 4, 16);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  const int V = ex->V, bs = ex->bs, mb = 4;
  EXPECT_FALSE(gpu->samples_on_device()); // no step yet
  const Step st = makeStep({bs + 2, 5, 9}, {bs + 2, 5, 9}, bs, mb, V, 1);
  const int L = static_cast<int>(st.idx.size());
  std::vector<llmrt::LogitsSummary> sums(L);
  ASSERT_TRUE(gpu->forward_summary(st.input(), sums.data()).ok());
  ASSERT_TRUE(gpu->samples_on_device());
  std::vector<float> rows(size_t(L) * V);
  ASSERT_TRUE(gpu->read_logits(0, L, rows.data()).ok());
  llmrt::Sampler host(V);
  int draws = 0;
  for (float t : {0.7f, 1.0f, 1.5f})
    for (int top_k : {0, 20})
      for (float top_p : {1.0f, 0.8f}) {
        llmrt::SamplingParams p;
        p.temperature = t;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = t > 1.0f ? 0.05f : 0.0f;
        p.seed = 5;
        for (int row : {L - 1, 3})
          for (uint64_t step = 0; step < 2; ++step) {
            llmrt::SamplingContext c;
            c.params = &p;
            c.request_id = uint64_t(row);
            c.step = step;
            const std::span<const float> logits(rows.data() + size_t(row) * V, size_t(V));
            auto want = host.sample(c, logits, {}, &sums[size_t(row)]);
            ASSERT_TRUE(want.ok()) << want.status().to_string();
            const int before = driver.launches();
            auto got = llmrt::draws_on_device(*gpu, std::span<const llmrt::SamplingContext>(&c, 1),
                                              std::span<const int32_t>(&row, 1), sums);
            ASSERT_TRUE(got.ok()) << got.status().to_string();
            ASSERT_EQ(got->size(), 1u);
            ASSERT_TRUE((*got)[0].has_value());
            EXPECT_EQ(driver.launches() - before, 1);
            EXPECT_EQ((*got)[0]->token, want->token) << "t " << t << " top_k " << top_k << " top_p " << top_p;
            EXPECT_EQ((*got)[0]->logprob, want->logprob);
            ++draws;
          }
      }
  EXPECT_EQ(draws, 48);
  // Several draws in one launch.
  llmrt::SamplingParams p;
  p.seed = 8;
  std::vector<llmrt::DeviceDraw> many;
  for (int row = 0; row < L; ++row) {
    llmrt::SamplingContext c;
    c.params = &p;
    c.request_id = 40;
    c.step = uint64_t(row);
    many.push_back(*llmrt::Sampler::device_draw(c, row));
  }
  std::vector<int32_t> tokens(many.size());
  std::vector<float> logits(many.size());
  const int before = driver.launches();
  ASSERT_TRUE(gpu->sample_on_device(many, tokens.data(), logits.data()).ok());
  EXPECT_EQ(driver.launches() - before, 1);
  for (int row = 0; row < L; ++row) {
    llmrt::SamplingContext c;
    c.params = &p;
    c.request_id = 40;
    c.step = uint64_t(row);
    auto want = host.sample(c, std::span<const float>(rows.data() + size_t(row) * V, size_t(V)));
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(tokens[size_t(row)], want->token) << row;
    EXPECT_EQ(logits[size_t(row)], rows[size_t(row) * V + size_t(want->token)]) << row;
  }
  // Not the device's: greedy, penalties; and rows outside the step.
  llmrt::SamplingParams greedy;
  greedy.temperature = 0.0f;
  llmrt::SamplingParams penalized;
  penalized.repetition_penalty = 1.1f;
  {
    std::vector<llmrt::SamplingContext> cs(2);
    cs[0].params = &greedy;
    cs[1].params = &penalized;
    const std::vector<int32_t> zero = {0, 0};
    const int launched = driver.launches();
    auto none = llmrt::draws_on_device(*gpu, cs, zero, sums);
    ASSERT_TRUE(none.ok());
    ASSERT_EQ(none->size(), 2u);
    EXPECT_FALSE((*none)[0].has_value());
    EXPECT_FALSE((*none)[1].has_value());
    EXPECT_EQ(driver.launches(), launched); // nothing for the device: no launch
  }
  many[0].row = L;
  EXPECT_FALSE(gpu->sample_on_device(std::span<const llmrt::DeviceDraw>(many.data(), 1), tokens.data(), logits.data()).ok());
  // --no-device-sampling: the executor draws nothing (its rows go to the host sampler).
  auto off = makeExecutors(**plan, driver, 32, 4, 16, true, true,
                           [](cuda::CudaExecutorOptions &o) { o.device_sampling = false; });
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  ASSERT_TRUE(off->gpu->forward_summary(st.input(), sums.data()).ok());
  EXPECT_FALSE(off->gpu->samples_on_device());
}

TEST(CudaExecutor, GeneratorDrawsAStepsRowsInOneSamplingLaunch) {
  // Three requests at a temperature (one with top-p) through the Generator on the emulated
  // device: each step's draws, which the summaries cannot decide, go to the sampling kernel in
  // one launch; the tokens and logprobs are those of the same generation with the rows drawn on
  // the host (--no-device-sampling).
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<llmrt::GenerationRequest> reqs(3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = {1, int32_t(5 + i), 9, 33};
    reqs[i].max_tokens = 4;
    reqs[i].ignore_eos = true;
    reqs[i].sampling.temperature = 1.0f;
    reqs[i].sampling.top_p = i == 1 ? 0.9f : 1.0f;
    reqs[i].sampling.seed = 21;
  }
  std::vector<llmrt::GenerationOutput> outs[2];
  int launches[2] = {0, 0};
  for (int device = 0; device < 2; ++device) {
    EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
    auto ex = makeExecutors(**plan, driver, 32, 4, 16, true, true,
                            [&](cuda::CudaExecutorOptions &o) { o.device_sampling = device == 1; });
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    auto gen = llmrt::Generator::over(std::move(ex->gpu), **plan);
    auto out = gen->generate(reqs);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    outs[device] = std::move(*out);
    launches[device] = driver.samplingLaunches();
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(outs[1][i].tokens, outs[0][i].tokens) << i;
    EXPECT_EQ(outs[1][i].logprobs, outs[0][i].logprobs) << i;
    EXPECT_EQ(outs[1][i].tokens.size(), 4u);
  }
  // The prompts prefill in one step, then 3 decode steps: 4 steps of 3 draws, 4 launches.
  EXPECT_EQ(launches[0], 0);
  EXPECT_EQ(launches[1], 4);
}

TEST(CudaExecutor, EngineDrawsAStepsRowsTogetherOnTheDevice) {
  // The serving engine on the emulated device: a request of 2 choices at temperature 1 (they
  // fork after the first draw) and one at 0.7 with top-p: the tokens and logprobs of
  // --no-device-sampling, in fewer sampling launches than draws (a step's draws go in one).
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<llmrt::EngineRequest> reqs(2);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = {1, int32_t(7 + i), 9};
    reqs[i].max_tokens = 3;
    reqs[i].ignore_eos = true;
    reqs[i].has_seed = true;
    reqs[i].sampling.seed = 9;
    reqs[i].sampling.temperature = i == 0 ? 1.0f : 0.7f;
    reqs[i].sampling.top_p = i == 0 ? 1.0f : 0.9f;
    reqs[i].n = i == 0 ? 2 : 1;
  }
  std::map<std::pair<size_t, int>, std::vector<int32_t>> tokens[2];
  std::map<std::pair<size_t, int>, std::vector<float>> logprobs[2];
  int launches[2] = {0, 0};
  for (int device = 0; device < 2; ++device) {
    EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
    llmrt::EngineOptions eo;
    eo.device = "cuda";
    eo.device_sampling = device == 1;
    eo.kv_cache_bytes = 1 << 20;
    eo.make_executor = [&](const llmrt::ExecutorOptions &xo) -> llmrt::StatusOr<std::unique_ptr<llmrt::Executor>> {
      cuda::CudaExecutorOptions o = xo.cuda;
      o.load_gemm_library = noGemmLibrary;
      ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaExecutor> ex, cuda::CudaExecutor::create(**plan, &driver, o));
      return std::unique_ptr<llmrt::Executor>(std::move(ex));
    };
    auto engine = llmrt::Engine::create(**plan, eo);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    std::vector<std::shared_ptr<llmrt::RequestHandle>> handles;
    for (const llmrt::EngineRequest &r : reqs) {
      auto h = (*engine)->submit(r);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      handles.push_back(*h);
    }
    for (size_t i = 0; i < handles.size(); ++i)
      for (bool finished = false; !finished;) {
        auto e = handles[i]->next(std::chrono::milliseconds(300000));
        ASSERT_TRUE(e.has_value()) << "timed out";
        ASSERT_TRUE(e->error.ok()) << e->error.to_string();
        for (const llmrt::ChoiceDelta &d : e->choices)
          for (const llmrt::TokenLogprob &t : d.tokens) {
            tokens[device][{i, d.index}].push_back(t.token);
            logprobs[device][{i, d.index}].push_back(t.logprob);
          }
        finished = e->finished;
      }
    engine->reset(); // (stops the engine thread before the driver goes)
    launches[device] = driver.samplingLaunches();
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(logprobs[1], logprobs[0]);
  ASSERT_EQ(tokens[1].size(), 3u);
  for (const auto &[choice, t] : tokens[1])
    EXPECT_EQ(t.size(), 3u);
  // 9 draws (3 choices x 3 tokens): on the device, and the 2 choices' first draws (their
  // request's one row) in one launch at least.
  EXPECT_EQ(launches[0], 0);
  EXPECT_GT(launches[1], 0);
  EXPECT_LT(launches[1], 9);
}

TEST(CudaExecutor, LongContextsSplitAttentionAndMatchTheCpuExecutor) {
  // One layer, one 32-wide head (emulating attention costs a fiber switch per thread and barrier,
  // so the model is as small as a split needs), generated weights: a prefill step of 270 rows
  // (more than 32: attention unsplit), then decode steps at 271 and 272 positions, whose attention
  // splits into 2 chunks combined by the item's last block (flash-decoding), replayed as graphs.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, writeSmallConfig(dir, 64, 512), "--synthetic-weights 5 --target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 512, 2, 512 / 16 + 1);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ASSERT_EQ(ex->bs, 16);
  const int V = ex->V, bs = 16, mb = 512 / bs;
  auto both = [&](const Step &st) { ex->compare(st, 1e-4); };
  Step prefill = makeStep({270}, {270}, bs, mb, V, 1);
  prefill.idx = {269};
  both(prefill);
  both(makeStep({271}, {1}, bs, mb, V, 2));
  both(makeStep({272}, {1}, bs, mb, V, 3));
  EXPECT_EQ(driver.graphLaunches(), 2);
}

TEST(CudaExecutor, WideVocabularySummariesSplitRowsOverBlocks) {
  // A vocabulary of 4096: steps of up to 32 logits rows summarize each row in 2 parts (a block
  // each, merged by the row's last part through the workspace), larger steps a block per row.
  // Either way the summary is the host's summary of the device's own rows.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, writeSmallConfig(dir, 4096, 128), "--synthetic-weights 6 --target sm_90 --no-tensor-cores"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const int k = (*plan)->program("forward")->logits_summary_kernel();
  ASSERT_GE(k, 0);
  EXPECT_EQ((*plan)->fb().kernels()->Get(k)->grid_rule()->str(), "rows x2 when rows<=32");
  EXPECT_GT((*plan)->fb().kernels()->Get(k)->workspace_bytes(), 0u);
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = makeExecutors(**plan, driver, 64, 40, 40 * 4);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const int V = ex->V, bs = ex->bs, mb = 4;
  ASSERT_EQ(V, 4096);
  auto check = [&](const Step &st) {
    SCOPED_TRACE(std::to_string(st.idx.size()) + " logits rows");
    ex->compareSummaries(st);
  };
  // Two prompts, logits for each of their 5 rows (10 rows: split), then 33 one-token
  // sequences' rows (unsplit).
  check(makeStep({5, 5}, {5, 5}, bs, mb, V, 1));
  std::vector<int> ones(33, 1);
  check(makeStep(ones, ones, bs, mb, V, 2));
}

TEST(CudaExecutor, QuantizedEmbeddingTablesMatchTheCpuExecutor) {
  // Round-to-nearest int8 (GGUF Q8_0-like, as SmolLM2's token table) and int4 with a min
  // (Q4_1-like): every weight quantized, the embedding table and the logits too.
  for (const char *format : {"int8", "int4-g32-f16-min"}) {
    SCOPED_TRACE(format);
    TempDir dir;
    const std::string plan =
        compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                    std::string("--target sm_90 --weight-layout cuda-mma --no-tensor-cores --quantize ") + format);
    auto opened = llmrt::Plan::open(plan);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    bool quantizedTable = false;
    for (const auto *t : *(*opened)->fb().tensors())
      if (t->name()->str().find("embed") != std::string::npos && t->quant() && t->quant()->size() > 0)
        quantizedTable = true;
    EXPECT_TRUE(quantizedTable) << "the plan's embedding table is not quantized";
    runBothAndCompare(plan, kInt8ActivationTol, false, "fast", true);
  }
}

TEST(CudaExecutor, GgufKQuantPlansMatchTheCpuExecutor) {
  // llama.cpp's Q4_K_M, Q5_K_M, Q5_1, IQ4_XS, Q3_K_M and Q2_K mixes (tests/fixtures/kquant), held as the
  // CPU holds them: Q4_K as int4-g256s32-f16-min and Q6_K as int8-g256s16-f16-sym (sub-scales; the
  // Q6_K lm_head, and attn_v / ffn_down), Q5_K as int5-g256s32-f16-min and Q5_1 as int5-g32-f16-min
  // (int5 codes; Q5_K_M's token table too), IQ4_XS as int4-g256s32-f16-nl (grid values by byte
  // permutes), Q3_K as int4-g256s16-f16-sym (a scale per k-step), Q2_K as int4-g256s16-f16-min
  // (a scale and a min per k-step; its token table too), on the int8-activation GEMVs and the
  // per-element table reads; the reference GEMVs too. Q4_K_M's, Q5_K_M's, Q3_K_M's and Q2_K's q
  // and k and v (another type) are three projections, so their decode attention does no
  // rope_kv_store inside.
  for (auto [file, fusedQkv] : {std::pair{"tiny_q4_k_m.gguf", false}, std::pair{"tiny_q5_k_m.gguf", false},
                                std::pair{"tiny_q5_1.gguf", true}, std::pair{"tiny_iq4_xs.gguf", true},
                                std::pair{"tiny_q3_k_m.gguf", false}, std::pair{"tiny_q2_k.gguf", false}}) {
    SCOPED_TRACE(file);
    const std::string gguf = std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/kquant/" + file;
    TempDir dir;
    runBothAndCompare(compilePlan(dir, gguf, "--target sm_90 --weight-layout cuda-mma --no-tensor-cores"),
                      kInt8ActivationTol, false, "fast", true, fusedQkv);
    TempDir dir2;
    runBothAndCompare(compilePlan(dir2, gguf, "--target sm_90 --weight-layout cuda-mma --no-tensor-cores "
                                              "--cpu-kernels reference --quant-gemv f32"),
                      1e-4, false, "reference", false, fusedQkv);
  }
}

TEST(CudaExecutor, DenseHalfPlansMatchTheCpuExecutor) {
  // --weight-dtype: bf16 with q/k/v biases (qwen2), f16 with the table tied to the logits.
  for (auto [model, dtype] : {std::pair{"qwen2", "bf16"}, std::pair{"llama_tied", "f16"}}) {
    SCOPED_TRACE(std::string(model) + " " + dtype);
    TempDir dir;
    const std::string plan =
        compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/" + model,
                    std::string("--target sm_90 --no-tensor-cores --weight-dtype ") + dtype);
    runBothAndCompare(plan, 1e-4);
  }
}

TEST(CudaExecutor, Int8KvCacheMatchesTheCpuExecutor) {
  // Both backends store the same codes and scales (kv_store's kernel test), so the logits differ
  // only by summation order; the KV block copy moves the scales too.
  TempDir dir;
  const std::string plan = compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                       "--target sm_90 --no-tensor-cores --kv-cache-dtype int8");
  runBothAndCompare(plan, 1e-4);
}

TEST(CudaExecutor, SixteenBitAndFp8KvCachesMatchTheCpuExecutor) {
  // bf16, f16 and fp8 caches (--kv-cache-dtype): both backends store the same rounded elements
  // (kv_store's kernel tests), so the logits differ only by summation order; a KV block is half
  // (a quarter for fp8) of an f32 cache's bytes; the block copy moves them.
  uint64_t f32Block = 0;
  for (const char *kv : {"f32", "bf16", "f16", "fp8"}) {
    SCOPED_TRACE(kv);
    TempDir dir;
    const std::string plan = compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                         std::string("--target sm_90 --no-tensor-cores --kv-cache-dtype ") + kv);
    auto opened = llmrt::Plan::open(plan);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    EmulatedDriver driver((*opened)->fb(), uint64_t{1} << 30);
    auto ex = makeExecutors(**opened, driver, 32, 4, 16, true, true);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    const uint64_t block = ex->gpu->memory().kv_block_bytes;
    if (f32Block == 0)
      f32Block = block;
    else
      EXPECT_EQ((std::string(kv) == "fp8" ? 4 : 2) * block, f32Block);
    runBothAndCompare(plan, 1e-4);
  }
}

TEST(CudaExecutor, DecodeAttentionDoesTheRopeKvStoreOfItsLayer) {
  // Plan Step.rope_kernel: a step in which every sequence has one row (decode, replayed as a
  // graph or launched step by step) runs each layer's rope_kv_store inside its attention kernel;
  // a prefill, or a step with a sequence of several rows, launches both. The logits of a prefill
  // and 3 decode steps, then a mixed step, are those of the same executor told not to
  // (--no-rope-in-attention), bit for bit, and close to the CPU's; f32 and int8 caches (decode
  // step by step, without graphs: f32 only, emulation being slow).
  for (const char *kv : {"f32", "int8"}) {
    SCOPED_TRACE(kv);
    TempDir dir;
    auto plan = llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                              std::string("--target sm_90 --no-tensor-cores --kv-cache-dtype ") + kv));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::vector<std::vector<float>> logits(2);
    for (const bool graphs : {true, false})
      for (const bool rope : {true, false}) {
        if (!graphs && (!rope || std::string(kv) == "int8"))
          continue;
        SCOPED_TRACE(std::string(graphs ? "graphs" : "no graphs") + (rope ? "" : ", --no-rope-in-attention"));
        EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
        auto ex = makeExecutors(**plan, driver, 32, 4, 16, graphs, true,
                                [&](cuda::CudaExecutorOptions &o) { o.rope_in_attention = rope; });
        ASSERT_TRUE(ex.ok()) << ex.status().to_string();
        const int layers = ex->gpu->num_layers();
        EXPECT_EQ(ex->gpu->rope_in_attention_steps(), rope ? layers : 0);
        const int V = ex->V, bs = ex->bs, mb = 4;
        std::vector<float> all;
        auto step = [&](const Step &st, int ropeKvStores, int ropeAttentions) {
          const int stores = driver.ropeKvStoreLaunches(), fused = driver.ropeAttentionLaunches();
          std::vector<float> lg(st.idx.size() * V, NAN);
          ASSERT_TRUE(ex->gpu->forward(st.input(), lg.data()).ok());
          all.insert(all.end(), lg.begin(), lg.end());
          EXPECT_EQ(driver.ropeKvStoreLaunches() - stores, ropeKvStores);
          EXPECT_EQ(driver.ropeAttentionLaunches() - fused, ropeAttentions);
          std::vector<float> lc(lg.size(), NAN);
          ASSERT_TRUE(ex->cpu->forward(st.input(), lc.data()).ok());
          expectLogitsClose(lg, lc, 1e-4);
        };
        step(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1), layers, 0); // prefill
        for (int i = 0; i < 3; ++i) // decode: captured, then replayed (a replay counts its launches)
          step(makeStep({bs + 4 + i, 6 + i}, {1, 1}, bs, mb, V, 2 + i), rope ? 0 : layers, rope ? layers : 0);
        step(makeStep({bs + 7, 11}, {1, 3}, bs, mb, V, 6), layers, 0); // a decode row and a chunk of 3
        if (!graphs)
          continue;
        logits[rope] = all;
      }
    ASSERT_EQ(logits[true].size(), logits[false].size());
    EXPECT_EQ(std::memcmp(logits[true].data(), logits[false].data(), logits[true].size() * sizeof(float)), 0);
  }
}

// The plans of the decode fusion tests (a GEMV doing the step after it too), by `gemv`: "int8" or
// "f32" (quantized activations or not): a 2-layer model of hidden size 32 whose int4-g32 gate|up
// has 2 x 8224 rows (2056 tiles: one warp per tile); "bf16": the tiny Llama in bf16, without tensor
// cores (so that its prefills run the GEMVs as well).
llmrt::StatusOr<std::unique_ptr<llmrt::Plan>> fusionPlan(const TempDir &dir, const std::string &gemv) {
  if (gemv == "bf16")
    return llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                         "--target sm_90 --weight-dtype bf16 --no-tensor-cores"));
  return llmrt::Plan::open(compilePlan(dir, writeSmallConfig(dir, 64, 512, 8224, 2),
                                       "--synthetic-weights 7 --target sm_90 --weight-layout cuda-mma --quantize "
                                       "int4-g32 --quant-gemv " + gemv));
}

TEST(CudaExecutor, GateUpGemvDoesTheSiluMulOfItsLayer) {
  // Plan Step.silu_kernel: a step whose gate|up linear runs its GEMV (decode, and this 24-row
  // prefill: quantized weights take the tensor cores from 33 rows) launches it with the silu_mul
  // after it inside, which then launches nothing; with int8 activations that kernel also writes
  // the int8 rows the down projection reads (no quantize_q8 for them). The logits of a prefill and
  // 3 decode steps are those of the same executor told not to (--no-silu-in-gemv), bit for bit
  // (the plan has that kernel only where the plain GEMV has one warp per tile too: here a gate|up
  // of 2 x 8224 rows, 2056 tiles, over a hidden size of 32, one short span), and close to the
  // CPU's (int8 activations: its fast contract; f32: its reference one). Dense bf16 weights too,
  // the tiny Llama (a warp per column of h, any shape; no tensor cores, so that the prefill runs
  // the GEMV as well).
  for (const char *gemv : {"int8", "f32", "bf16"}) {
    SCOPED_TRACE(gemv);
    const bool int8 = std::string(gemv) == "int8"; // (f32 activations: the CPU's reference contract)
    TempDir dir;
    auto plan = fusionPlan(dir, gemv);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::vector<std::vector<float>> logits(2);
    std::vector<int> quantizes(2);
    for (const bool silu : {true, false}) {
      SCOPED_TRACE(silu ? "silu in the GEMV" : "--no-silu-in-gemv");
      EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
      auto ex = makeExecutors(**plan, driver, 32, 4, 16, true, true,
                              [&](cuda::CudaExecutorOptions &o) { o.silu_in_gemv = silu; }, int8 ? "fast" : "reference");
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      const int layers = ex->gpu->num_layers();
      EXPECT_EQ(ex->gpu->silu_in_gemv_steps(), silu ? layers : 0);
      const int V = ex->V, bs = ex->bs, mb = 4;
      auto step = [&](const Step &st) {
        const int mul = driver.siluMulLaunches(), fused = driver.siluGemvLaunches(), all = driver.launches();
        std::vector<float> lg(st.idx.size() * V, NAN);
        ASSERT_TRUE(ex->gpu->forward(st.input(), lg.data()).ok());
        logits[silu].insert(logits[silu].end(), lg.begin(), lg.end());
        EXPECT_EQ(driver.siluMulLaunches() - mul, silu ? 0 : layers);
        EXPECT_EQ(driver.siluGemvLaunches() - fused, silu ? layers : 0);
        if (st.idx.size() == 2 && st.tokens.size() == 2) // decode: as launches_per_step counts
          EXPECT_EQ(driver.launches() - all, ex->gpu->launches_per_step(2));
        std::vector<float> lc(lg.size(), NAN);
        ASSERT_TRUE(ex->cpu->forward(st.input(), lc.data()).ok());
        expectLogitsClose(lg, lc, int8 ? kInt8ActivationTol : 1e-4);
      };
      step(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1)); // prefill
      for (int i = 0; i < 3; ++i) // decode: captured, then replayed (a replay counts its launches)
        step(makeStep({bs + 4 + i, 6 + i}, {1, 1}, bs, mb, V, 2 + i));
      quantizes[silu] = driver.quantizeLaunches();
    }
    EXPECT_EQ(quantizes[true], quantizes[false]); // (the silu_mul's int8 rows: written either way)
    ASSERT_EQ(logits[true].size(), logits[false].size());
    EXPECT_EQ(std::memcmp(logits[true].data(), logits[false].data(), logits[true].size() * sizeof(float)), 0);
  }
}

TEST(CudaExecutor, GemvDoesTheAddRmsNormAfterItAtOneRow) {
  // Plan Step.norm_kernel: every o_proj and down projection (each followed by an add_rms_norm of
  // its output and the residual) has a GEMV whose last block does that add_rms_norm too. A step
  // of one row whose linear runs its GEMV launches it in place of both: no add_rms_norm launch
  // (with int8 activations its last block also writes the int8 rows of the GEMV after it; here
  // the down projection reads the silu kernel's int8 rows, which sit after its own input's). The
  // logits of 3 one-row decode steps (captured, then replayed) are those of the same executor told
  // not to (--no-norm-in-gemv), bit for bit, and close to the CPU's; a prefill and a decode step
  // of two rows launch every add_rms_norm (one row only: a row's norm is the last block's alone).
  // Quantized weights (int8 and f32 activations) and the tiny Llama in bf16.
  for (const char *gemv : {"int8", "f32", "bf16"}) {
    SCOPED_TRACE(gemv);
    const bool int8 = std::string(gemv) == "int8";
    TempDir dir;
    auto plan = fusionPlan(dir, gemv);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    std::vector<std::vector<float>> logits(2);
    for (const bool norm : {true, false}) {
      SCOPED_TRACE(norm ? "norm in the GEMV" : "--no-norm-in-gemv");
      EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
      auto ex = makeExecutors(**plan, driver, 32, 4, 16, true, true,
                              [&](cuda::CudaExecutorOptions &o) { o.norm_in_gemv = norm; }, int8 ? "fast" : "reference");
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      const int layers = ex->gpu->num_layers();
      EXPECT_EQ(ex->gpu->norm_in_gemv_steps(), norm ? 2 * layers : 0);
      EXPECT_EQ(ex->gpu->launches_per_step(1), ex->gpu->launches_per_step(2) - (norm ? 2 * layers : 0));
      const int V = ex->V, bs = ex->bs, mb = 4;
      auto step = [&](const Step &st, bool fused) {
        const int separate = driver.addRmsNormLaunches(), inside = driver.normGemvLaunches(), all = driver.launches();
        std::vector<float> lg(st.idx.size() * V, NAN);
        ASSERT_TRUE(ex->gpu->forward(st.input(), lg.data()).ok());
        logits[norm].insert(logits[norm].end(), lg.begin(), lg.end());
        EXPECT_EQ(driver.addRmsNormLaunches() - separate, fused ? 0 : 2 * layers);
        EXPECT_EQ(driver.normGemvLaunches() - inside, fused ? 2 * layers : 0);
        if (st.tokens.size() == st.ctx.size()) // decode (a row per sequence): as launches_per_step counts
          EXPECT_EQ(driver.launches() - all, ex->gpu->launches_per_step(static_cast<int>(st.tokens.size())));
        std::vector<float> lc(lg.size(), NAN);
        ASSERT_TRUE(ex->cpu->forward(st.input(), lc.data()).ok());
        expectLogitsClose(lg, lc, int8 ? kInt8ActivationTol : 1e-4);
      };
      step(makeStep({bs + 3}, {bs + 3}, bs, mb, V, 1), false); // prefill
      for (int i = 0; i < 3; ++i)
        step(makeStep({bs + 4 + i}, {1}, bs, mb, V, 2 + i), norm);
      step(makeStep({bs + 7, 5}, {1, 5}, bs, mb, V, 5), false); // a prompt's rows, another's prefill
      step(makeStep({bs + 8, 6}, {1, 1}, bs, mb, V, 6), false); // two rows
    }
    ASSERT_EQ(logits[true].size(), logits[false].size());
    EXPECT_EQ(std::memcmp(logits[true].data(), logits[false].data(), logits[true].size() * sizeof(float)), 0);
  }
}

TEST(CudaExecutor, RefusesPlansItCannotRun) {
  const std::string model = std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama";
  struct Case {
    const char *args;
    const char *needle;
  };
  for (const Case &c : {Case{"--target none", "no GPU kernel images"}, Case{"--target sm_100", "sm_100"}}) {
    SCOPED_TRACE(c.args);
    TempDir dir;
    auto plan = llmrt::Plan::open(compilePlan(dir, model, c.args));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
    auto ex = cuda::CudaExecutor::create(**plan, &driver, hermeticOptions());
    ASSERT_FALSE(ex.ok());
    EXPECT_NE(ex.status().message().find(c.needle), std::string::npos) << ex.status().message();
  }
  // A device too small for the plan: the memory plan says so before allocating.
  TempDir dir;
  auto plan = llmrt::Plan::open(compilePlan(dir, model, "--target sm_90"));
  ASSERT_TRUE(plan.ok());
  EmulatedDriver tiny((*plan)->fb(), 64 << 10);
  auto ex = cuda::CudaExecutor::create(**plan, &tiny, hermeticOptions());
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), llmrt::StatusCode::kResourceExhausted) << ex.status().to_string();
}

TEST(CudaExecutor, RefusesArenaValuesOffTheKernelsAlignment) {
  // The kernels read activations in 16-byte loads (codegen/KernelSpec.h). One activation moved to
  // a 4-byte aligned place past the arena's end: the CPU backend runs such a plan, the CUDA
  // executor names the value instead of faulting on the device.
  llmrt::testing::TinyPlanConfig cfg;
  llmrt::testing::TinyPlanSpec spec = llmrt::testing::make_tiny_plan(cfg);
  const int v = spec.steps[1].outputs[0];
  spec.values[v].offset_per_row = spec.arena_bytes_per_token + 4;
  spec.arena_bytes_per_token += 4 * spec.values[v].width + 64;
  auto plan = llmrt::testing::open_tiny_plan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  llmrt::CpuExecutorOptions cpu;
  cpu.threads = 1;
  ASSERT_TRUE(llmrt::CpuExecutor::create(**plan, cpu).ok());
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  auto ex = cuda::CudaExecutor::create(**plan, &driver, hermeticOptions());
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("value " + std::to_string(v)), std::string::npos) << ex.status().message();
  EXPECT_NE(ex.status().message().find("multiple of 16"), std::string::npos) << ex.status().message();
}

// --- A dense GEMM library (runtime/cuda/gemm_library.h) ---------------------------------------
} // namespace
