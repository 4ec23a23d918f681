// The CUDA executor with a dense GEMM library (cuBLASLt's place, runtime/cuda/gemm_library.h),
// emulated as the device is (EmulatedExecutor.h): it multiplies what lies in the emulated device
// memory, on the driver's emulated stream. Logits must match the CPU executor on the same plan.

#include "EmulatedExecutor.h"

namespace {

using namespace llmc::testing::emulated;


/// One library GEMM: (n, k, bf16 operands (else f32 on TF32), bias).
using GemmKey = std::tuple<int64_t, int64_t, bool, bool>;

/// What the emulated GEMM library was asked and what it did.
struct GemmLog {
  int loads = 0;         // load_gemm_library calls
  int calls = 0;         // matmul() calls
  int capturedCalls = 0; // of those, made while the driver captured a graph
  int executed = 0;      // products computed (enqueued work that ran, graph replays included)
  int refused = 0;       // calls answered Unimplemented
  std::multiset<GemmKey> shapes; // of the accepted calls
  std::set<int64_t> rows;        // row counts of the accepted calls
};

/// cuBLASLt's part played on the host: y = x w^T (+ bias) over the emulated device memory, the
/// operands read as GemmShape::input says (bf16 bit patterns or f32), products exact and summed in
/// double. The work is enqueued on the driver's emulated stream, so a graph capture records it.
/// Every pointer must lie inside a live allocation of the size the shape needs (catches a bf16
/// input buffer the memory plan made too small, or a missing workspace).
class EmulatedGemmLibrary : public cuda::GemmLibrary {
public:
  static constexpr uint64_t kWorkspaceBytes = 4096;

  EmulatedGemmLibrary(EmulatedDriver &driver, GemmLog &log, std::function<bool(const cuda::GemmShape &)> refuse)
      : driver_(driver), log_(log), refuse_(std::move(refuse)) {}

  std::string name() const override { return "Emulated GEMM 1.0 (host)"; }
  uint64_t workspace_bytes() const override { return kWorkspaceBytes; }

  llmrt::Status matmul(const cuda::GemmShape &g, int64_t rows, cuda::DevicePtr w, cuda::DevicePtr x,
                       cuda::DevicePtr bias, cuda::DevicePtr y, cuda::DevicePtr workspace) override {
    ++log_.calls;
    log_.capturedCalls += driver_.capturing();
    if (refuse_ && refuse_(g)) {
      ++log_.refused;
      return llmrt::unimplemented("emulated GEMM has no algorithm for n " + std::to_string(g.n) + ", k " +
                                  std::to_string(g.k));
    }
    if (rows < 1 || g.n < 1 || g.k < 1)
      return llmrt::invalid_argument("emulated GEMM: an empty product");
    const bool bf16 = g.input == cuda::GemmInput::kBf16;
    const uint64_t n = uint64_t(g.n), k = uint64_t(g.k), r = uint64_t(rows), elem = bf16 ? 2 : 4;
    struct Operand {
      cuda::DevicePtr p;
      uint64_t bytes;
      const char *what;
    };
    for (const Operand &o : {Operand{w, n * k * elem, "w"}, Operand{x, r * k * elem, "x"},
                             Operand{y, r * n * 4, "y"}, Operand{workspace, kWorkspaceBytes, "workspace"}})
      if (!driver_.holds(o.p, o.bytes))
        return llmrt::invalid_argument(std::string("emulated GEMM: ") + o.what + " (" + std::to_string(o.bytes) +
                                       " bytes) is not inside device memory");
    if (g.bias ? !driver_.holds(bias, n * 4) : bias != 0)
      return llmrt::invalid_argument("emulated GEMM: the bias pointer does not match the shape");
    log_.shapes.insert({g.n, g.k, bf16, g.bias});
    log_.rows.insert(rows);
    GemmLog &log = log_;
    const bool withBias = g.bias;
    driver_.enqueue([=, &log] {
      ++log.executed;
      auto at = [&](cuda::DevicePtr base, uint64_t i) -> double {
        return bf16 ? double(llmrt::quant::bf16_to_float(reinterpret_cast<const uint16_t *>(base)[i]))
                    : double(reinterpret_cast<const float *>(base)[i]);
      };
      const float *b = reinterpret_cast<const float *>(bias);
      float *out = reinterpret_cast<float *>(y);
      for (uint64_t t = 0; t < r; ++t)
        for (uint64_t j = 0; j < n; ++j) {
          double sum = withBias ? double(b[j]) : 0.0;
          for (uint64_t l = 0; l < k; ++l)
            sum += at(x, t * k + l) * at(w, j * k + l);
          out[t * n + j] = float(sum);
        }
    });
    return llmrt::ok_status();
  }

private:
  EmulatedDriver &driver_;
  GemmLog &log_;
  std::function<bool(const cuda::GemmShape &)> refuse_;
};

using GemmLibraryLoader = std::function<llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>>(cuda::Driver *)>;

/// CudaExecutorOptions::load_gemm_library giving an EmulatedGemmLibrary over `driver` that logs
/// into `log` and answers Unimplemented for the shapes `refuse` picks.
GemmLibraryLoader emulatedGemmLibrary(EmulatedDriver &driver, GemmLog &log,
                                      std::function<bool(const cuda::GemmShape &)> refuse = {}) {
  return [&driver, &log, refuse](cuda::Driver *d) -> llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>> {
    ++log.loads;
    if (d != &driver)
      return llmrt::internal_error("load_gemm_library was given another driver");
    return std::unique_ptr<cuda::GemmLibrary>(std::make_unique<EmulatedGemmLibrary>(driver, log, refuse));
  };
}

/// The GEMMs of the steps `plan` gives to a GEMM library, one per step.
std::multiset<GemmKey> libraryGemms(const llmrt::Plan &plan) {
  std::multiset<GemmKey> out;
  for (const llmrt::fb::Step *st : *plan.program("forward")->steps()) {
    if (st->gemm_library() == llmrt::fb::GemmLibrary::None)
      continue;
    const llmrt::fb::Tensor *w = plan.fb().tensors()->Get(static_cast<flatbuffers::uoffset_t>(st->weights()->Get(0)));
    const bool bias = st->weights()->size() > 1 && st->weights()->Get(1) >= 0;
    out.insert({w->shape()->Get(0), w->shape()->Get(1), w->dtype() == llmrt::fb::DType::BF16, bias});
  }
  return out;
}

int linearSteps(const llmrt::Plan &plan) {
  int n = 0;
  for (const llmrt::fb::Step *st : *plan.program("forward")->steps())
    n += st->op() == llmrt::fb::OpKind::Linear;
  return n;
}

/// to_bf16 launches of a forward whose library steps all call the library: one per step with
/// an input kernel, except that a library step reading the value the library step before it
/// converted uses that copy (the executor's contract, cuda_executor.h).
int expectedConversions(const llmrt::Plan &plan) {
  int n = 0, converted = -1;
  for (const llmrt::fb::Step *st : *plan.program("forward")->steps()) {
    if (st->gemm_library() == llmrt::fb::GemmLibrary::None) {
      converted = -1;
      continue;
    }
    if (st->library_input_kernel() < 0)
      continue;
    const int in = st->inputs()->Get(0);
    n += in != converted;
    converted = in;
  }
  return n;
}

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &l : lines)
    out += l + "\n";
  return out;
}

uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

// Tolerances of the logits against the CPU executor's, relative to max(1, max |logit|):
// - bf16 library steps: each linear input is rounded to bf16 (8 significant bits, relative error
//   up to 2^-8, against TF32's 2^-11) while the CPU multiplies the f32 activations with the same
//   bf16 weights; the emulated library then multiplies exactly. Measured on the tiny qwen2 (two
//   layers): 7.0e-3 with its fused projections, 3.8e-3 unfused (TF32 gives ~8e-4, see
//   TensorCorePlansMatchWithinTf32Rounding). Bound: 2e-2, ~3x the worst measured; the tests print
//   what they measure.
// - generated tensor-core kernels (TF32, linear and logits steps of 16 rows or more): 3e-3 (the
//   emulated library multiplies f32 operands exactly, so f32 plans stay within it too).
constexpr double kBf16Tol = 2e-2;
constexpr double kTf32Tol = 3e-3;

/// The tiny qwen2 (q/k/v biases) with bf16 weights for sm_90: dense linear steps on the library.
/// Its KV cache stays f32 (not the bf16 of --kv-cache-dtype auto): the tolerances above measure
/// the GEMMs; with a bf16 cache a TF32 difference in a k or v value can also move that element
/// one bf16 step (measured 3.6e-3 on the generated kernels' test, over its 3e-3).
std::unique_ptr<llmrt::Plan> bf16Plan(const TempDir &dir, const std::string &extra = "") {
  auto plan = llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/qwen2",
                                            "--target sm_90 --weight-dtype bf16 --kv-cache-dtype f32 " + extra));
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  return plan.ok() ? std::move(*plan) : nullptr;
}

TEST(CudaExecutor, GemmLibraryRunsTheDenseLinearStepsOfBigSteps) {
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir);
  ASSERT_TRUE(plan);
  // The plan gives every dense linear step to cuBLASLt (2 layers: q|k|v with its bias, o,
  // gate|up, down), each with a to_bf16 kernel of its input's width.
  const std::multiset<GemmKey> gemms = libraryGemms(*plan);
  const int marked = static_cast<int>(gemms.size());
  EXPECT_EQ(marked, linearSteps(*plan));
  EXPECT_EQ(marked, 8);
  EXPECT_EQ(std::count_if(gemms.begin(), gemms.end(), [](const GemmKey &g) { return std::get<3>(g); }), 2);
  for (const llmrt::fb::Step *st : *plan->program("forward")->steps()) {
    if (st->gemm_library() == llmrt::fb::GemmLibrary::None)
      continue;
    EXPECT_EQ(st->gemm_library(), llmrt::fb::GemmLibrary::CublasLt);
    EXPECT_GE(st->batched_kernel(), 0);
    ASSERT_GE(st->library_input_kernel(), 0);
    const llmrt::fb::Kernel *k =
        plan->fb().kernels()->Get(static_cast<flatbuffers::uoffset_t>(st->library_input_kernel()));
    EXPECT_EQ(k->family()->str(), "to_bf16");
    const int64_t width = plan->program("forward")->values()->Get(st->inputs()->Get(0))->width();
    EXPECT_EQ(k->name()->str().rfind("llm_to_bf16_k" + std::to_string(width) + "_", 0), 0u) << k->name()->str();
  }

  EmulatedDriver driver(plan->fb(), uint64_t{1} << 30);
  GemmLog log;
  const int tokens = 64, seqs = 16, mb = 4;
  auto ex = makeExecutors(*plan, driver, tokens, seqs, seqs * mb, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  const int V = ex->V, bs = ex->bs;
  ASSERT_EQ(bs, 16);
  EXPECT_EQ(log.loads, 1);
  EXPECT_EQ(gpu->gemm_library_name(), "Emulated GEMM 1.0 (host)");
  EXPECT_EQ(gpu->gemm_library_steps(), marked);
  EXPECT_TRUE(gpu->warnings().empty()) << joined(gpu->warnings());
  // The memory plan holds the library's workspace and the bf16 copy of the widest converted
  // input (the down projection's 128 = intermediate_size) for a step of `tokens` rows.
  EXPECT_EQ(gpu->memory().library, EmulatedGemmLibrary::kWorkspaceBytes + align256(128 * tokens * 2));
  EXPECT_EQ(gpu->workspace_bytes(), gpu->memory().activations + gpu->memory().batch + gpu->memory().library);
  const int conversions = expectedConversions(*plan);
  EXPECT_EQ(conversions, marked); // no two library steps in a row read one value here

  // A prefill of 24 rows: every marked step calls the library once, with its shape, after its
  // to_bf16 kernel; no linear step runs its generated tensor-core kernel.
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(log.executed, marked);
  EXPECT_EQ(log.shapes, gemms);
  EXPECT_EQ(log.rows, std::set<int64_t>{bs + 8});
  EXPECT_EQ(driver.toBf16Launches(), conversions);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
  // A decode step of 2 rows (fewer than batched_min_rows): the generated kernels only.
  ex->compare(makeStep({bs + 4, 6}, {1, 1}, bs, mb, V, 2), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(driver.toBf16Launches(), conversions);
  // 16 prompts of 3 tokens (48 rows): the library again.
  std::vector<int> ctx(seqs, 3);
  ex->compare(makeStep(ctx, ctx, bs, mb, V, 3), kBf16Tol);
  EXPECT_EQ(log.calls, 2 * marked);
  EXPECT_EQ(log.executed, 2 * marked);
  EXPECT_EQ(log.capturedCalls, 0);
  // The 16 sequences decoding: the graph of batch 16, on its first use made after one forward
  // outside the capture (cuBLASLt chooses its algorithm and loads its kernels on a shape's first
  // call, which a capture must not contain); the capture records each call, the replay runs it.
  for (int &c : ctx)
    ++c;
  const int graphs = driver.graphLaunches();
  ex->compare(makeStep(ctx, std::vector<int>(seqs, 1), bs, mb, V, 4), kBf16Tol);
  EXPECT_EQ(driver.graphLaunches() - graphs, 1);
  EXPECT_EQ(log.calls, 4 * marked);
  EXPECT_EQ(log.capturedCalls, marked);
  EXPECT_EQ(log.executed, 4 * marked);
  // The next decode step replays the graph: the library's recorded work runs, no new call.
  for (int &c : ctx)
    ++c;
  ex->compare(makeStep(ctx, std::vector<int>(seqs, 1), bs, mb, V, 5), kBf16Tol);
  EXPECT_EQ(driver.graphLaunches() - graphs, 2);
  EXPECT_EQ(log.calls, 4 * marked);
  EXPECT_EQ(log.executed, 5 * marked);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
  EXPECT_EQ(log.rows, (std::set<int64_t>{bs + 8, 3 * seqs, seqs}));
  EXPECT_TRUE(gpu->warnings().empty()) << joined(gpu->warnings());
  // Profiles name the library as the steps' kernel from batched_min_rows rows.
  llmrt::Profiler profiler;
  gpu->set_profiler(&profiler);
  for (int &c : ctx)
    ++c;
  ex->compare(makeStep(ctx, std::vector<int>(seqs, 1), bs, mb, V, 6), kBf16Tol);
  EXPECT_EQ(log.calls, 5 * marked);
  const std::string table = profiler.format_table();
  EXPECT_NE(table.find("Linear n128_k64_bf16_bias (Emulated from 16 rows)"), std::string::npos) << table;
  std::printf("[ measured ] bf16 GEMM library vs CPU: max |logit error| / max(1, max |logit|) = %.2e\n", ex->worst);
}

TEST(CudaExecutor, ConsecutiveGemmLibraryStepsConvertTheirInputOnce) {
  // Without the q|k|v and gate|up fusions q, k and v (and gate and up) are library steps in a
  // row reading one value: its bf16 copy is made once for them.
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir, "--disable-pass fuse-qkv --disable-pass fuse-gate-up");
  ASSERT_TRUE(plan);
  const int marked = static_cast<int>(libraryGemms(*plan).size());
  EXPECT_EQ(marked, linearSteps(*plan));
  const int conversions = expectedConversions(*plan);
  EXPECT_EQ(conversions, 8);  // per layer: q|k|v's input, o's, gate|up's, down's
  EXPECT_EQ(marked, 14);
  EmulatedDriver driver(plan->fb(), uint64_t{1} << 30);
  GemmLog log;
  auto ex = makeExecutors(*plan, driver, 32, 4, 16, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const int V = ex->V, bs = ex->bs;
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, 4, V, 1), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(driver.toBf16Launches(), conversions);
  ex->compare(makeStep({bs + 9, 8}, {6, 3}, bs, 4, V, 2), kBf16Tol); // 9 rows: no library
  ex->compare(makeStep({bs + 19, 16}, {10, 8}, bs, 4, V, 3), kBf16Tol);
  EXPECT_EQ(log.calls, 2 * marked);
  EXPECT_EQ(driver.toBf16Launches(), 2 * conversions);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
  std::printf("[ measured ] bf16 GEMM library (unfused) vs CPU: max |logit error| / max(1, max |logit|) = %.2e\n",
              ex->worst);
}

TEST(CudaExecutor, GemmLibraryOffRunsTheGeneratedKernels) {
  // CudaExecutorOptions::gemm_library = false (llmrt --no-gemm-library): the library is not
  // even loaded; the marked steps run their generated kernels, with a warning saying so.
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir);
  ASSERT_TRUE(plan);
  const int marked = static_cast<int>(libraryGemms(*plan).size());
  ASSERT_GT(marked, 0);
  EmulatedDriver driver(plan->fb(), uint64_t{1} << 30);
  GemmLog log;
  auto ex = makeExecutors(*plan, driver, 32, 4, 16, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.gemm_library = false;
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  EXPECT_EQ(log.loads, 0);
  EXPECT_EQ(gpu->gemm_library_steps(), 0);
  EXPECT_EQ(gpu->gemm_library_name(), "");
  EXPECT_EQ(gpu->memory().library, 0u);
  ASSERT_EQ(gpu->warnings().size(), 1u) << joined(gpu->warnings());
  EXPECT_NE(gpu->warnings()[0].find(std::to_string(marked) + " linear steps"), std::string::npos)
      << gpu->warnings()[0];
  EXPECT_NE(gpu->warnings()[0].find("(as asked)"), std::string::npos) << gpu->warnings()[0];
  const int V = ex->V, bs = ex->bs;
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, 4, V, 1), kTf32Tol);
  EXPECT_EQ(log.calls, 0);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), marked);
  EXPECT_EQ(driver.toBf16Launches(), 0);
  ex->compare(makeStep({bs + 4, 6}, {1, 1}, bs, 4, V, 2), kTf32Tol);
}

TEST(CudaExecutor, GemmLibraryThatDoesNotLoadLeavesTheGeneratedKernels) {
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir);
  ASSERT_TRUE(plan);
  const int marked = static_cast<int>(libraryGemms(*plan).size());
  ASSERT_GT(marked, 0);
  struct Case {
    GemmLibraryLoader load;
    const char *reason;
  };
  for (const Case &c :
       {Case{[](cuda::Driver *) -> llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>> {
               return llmrt::unavailable("cuBLASLt not found: emulated absence");
             },
             "GEMM library unavailable (cuBLASLt not found: emulated absence)"},
        Case{[](cuda::Driver *) -> llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>> {
               return std::unique_ptr<cuda::GemmLibrary>();
             },
             "GEMM library unavailable (none loaded)"}}) {
    SCOPED_TRACE(c.reason);
    EmulatedDriver driver(plan->fb(), uint64_t{1} << 30);
    auto ex = makeExecutors(*plan, driver, 32, 4, 16, true, true,
                            [&](cuda::CudaExecutorOptions &o) { o.load_gemm_library = c.load; });
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    auto &gpu = ex->gpu;
    ASSERT_EQ(gpu->warnings().size(), 1u) << joined(gpu->warnings());
    EXPECT_NE(gpu->warnings()[0].find(c.reason), std::string::npos) << gpu->warnings()[0];
    EXPECT_NE(gpu->warnings()[0].find(std::to_string(marked) + " linear steps"), std::string::npos)
        << gpu->warnings()[0];
    EXPECT_EQ(gpu->gemm_library_steps(), 0);
    EXPECT_EQ(gpu->gemm_library_name(), "");
    EXPECT_EQ(gpu->memory().library, 0u);
    const int V = ex->V, bs = ex->bs;
    ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, 4, V, 1), kTf32Tol);
    EXPECT_EQ(driver.linearTensorCoreLaunches(), marked);
    EXPECT_EQ(driver.toBf16Launches(), 0);
  }
}

TEST(CudaExecutor, GemmLibraryRefusingAShapeFallsBackToTheGeneratedKernel) {
  // The library has no algorithm for the down projections (n 64, k 128): those steps run their
  // generated tensor-core kernel from then on, each with one warning; the others keep the library.
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir);
  ASSERT_TRUE(plan);
  const std::multiset<GemmKey> gemms = libraryGemms(*plan);
  const int marked = static_cast<int>(gemms.size());
  const int refused = static_cast<int>(gemms.count({64, 128, true, false}));
  ASSERT_EQ(refused, 2);
  EmulatedDriver driver(plan->fb(), uint64_t{1} << 30);
  GemmLog log;
  auto ex = makeExecutors(*plan, driver, 32, 4, 16, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.load_gemm_library =
        emulatedGemmLibrary(driver, log, [](const cuda::GemmShape &g) { return g.n == 64 && g.k == 128; });
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  EXPECT_EQ(gpu->gemm_library_steps(), marked);
  const int V = ex->V, bs = ex->bs;
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, 4, V, 1), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(log.refused, refused);
  EXPECT_EQ(log.executed, marked - refused);
  EXPECT_EQ(gpu->gemm_library_steps(), marked - refused);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), refused);
  ASSERT_EQ(gpu->warnings().size(), size_t(refused)) << joined(gpu->warnings());
  for (const std::string &w : gpu->warnings()) {
    EXPECT_NE(w.find("Linear"), std::string::npos) << w;
    EXPECT_NE(w.find("no algorithm for n 64, k 128"), std::string::npos) << w;
    EXPECT_NE(w.find("runs the plan's generated kernel"), std::string::npos) << w;
  }
  // The next big step does not ask again.
  ex->compare(makeStep({bs + 19, 16}, {16, 11}, bs, 4, V, 2), kBf16Tol);
  EXPECT_EQ(log.calls, 2 * marked - refused);
  EXPECT_EQ(log.refused, refused);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 2 * refused);
  EXPECT_EQ(gpu->warnings().size(), size_t(refused));
}

TEST(CudaExecutor, GemmLibraryTakesF32WeightsAsTf32WithoutConversion) {
  // f32 weights: the library multiplies the f32 activations directly (TF32), so the plan has no
  // to_bf16 kernel and the memory plan no bf16 copy.
  TempDir dir;
  auto plan = llmrt::Plan::open(
      compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama", "--target sm_90"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::multiset<GemmKey> gemms = libraryGemms(**plan);
  const int marked = static_cast<int>(gemms.size());
  EXPECT_EQ(marked, linearSteps(**plan));
  EXPECT_EQ(marked, 8);
  for (const GemmKey &g : gemms)
    EXPECT_FALSE(std::get<2>(g));
  for (const llmrt::fb::Step *st : *(*plan)->program("forward")->steps())
    EXPECT_EQ(st->library_input_kernel(), -1);
  for (const llmrt::fb::Kernel *k : *(*plan)->fb().kernels())
    EXPECT_NE(k->family()->str(), "to_bf16") << k->name()->str();
  EmulatedDriver driver((*plan)->fb(), uint64_t{1} << 30);
  GemmLog log;
  auto ex = makeExecutors(**plan, driver, 32, 4, 16, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(ex->gpu->gemm_library_steps(), marked);
  EXPECT_EQ(ex->gpu->memory().library, EmulatedGemmLibrary::kWorkspaceBytes);
  const int V = ex->V, bs = ex->bs;
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, 4, V, 1), kTf32Tol);
  ex->compare(makeStep({bs + 4, 6}, {1, 1}, bs, 4, V, 2), kTf32Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(log.shapes, gemms);
  EXPECT_EQ(driver.toBf16Launches(), 0);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
}

TEST(CudaExecutor, QuantizedLinearStepsCallTheLibraryOnDequantizedWeights) {
  // Quantized weights in the cuda_mma_n8 layout (--quant-gemm cublaslt, the default): a linear
  // step of 16 rows or more writes its weight as a bf16 matrix (dequant_bf16) and its input in
  // bf16 (to_bf16), then calls the library; smaller steps run the GEMV (and without the library
  // the tensor-core tiles keep their own threshold, 33 rows). The memory plan holds the bf16
  // copy of the largest such weight.
  TempDir dir;
  auto plan = llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                            "--target sm_90 --weight-layout cuda-mma --quantize int4-g32-f16-sym "
                                            "--quant-gemv f32"));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const llmrt::fb::Plan &fb = (*plan)->fb();
  int marked = 0;
  uint64_t largest = 0;
  std::multiset<GemmKey> gemms;
  for (const llmrt::fb::Step *st : *(*plan)->program("forward")->steps()) {
    if (st->op() != llmrt::fb::OpKind::Linear)
      continue;
    SCOPED_TRACE(st->name()->str());
    ++marked;
    EXPECT_EQ(st->gemm_library(), llmrt::fb::GemmLibrary::CublasLt);
    EXPECT_EQ(st->library_min_rows(), 16);
    EXPECT_EQ(st->batched_min_rows(), 33);
    ASSERT_GE(st->library_input_kernel(), 0);
    ASSERT_GE(st->library_weight_kernel(), 0);
    const llmrt::fb::Kernel *k = fb.kernels()->Get(static_cast<flatbuffers::uoffset_t>(st->library_weight_kernel()));
    EXPECT_EQ(k->family()->str(), "dequant_bf16");
    const llmrt::fb::Tensor *w = fb.tensors()->Get(static_cast<flatbuffers::uoffset_t>(st->weights()->Get(0)));
    ASSERT_TRUE(w->quant() && w->quant()->str() == "int4-g32-f16-sym") << (w->quant() ? w->quant()->str() : "");
    const int64_t n = w->shape()->Get(0), kk = w->shape()->Get(1);
    EXPECT_EQ(k->name()->str().rfind("llm_dequant_bf16_n" + std::to_string(n) + "_k" + std::to_string(kk) + "_", 0), 0u)
        << k->name()->str();
    largest = std::max<uint64_t>(largest, uint64_t(n) * uint64_t(kk) * 2);
    gemms.insert({n, kk, true, st->weights()->size() > 1 && st->weights()->Get(1) >= 0});
  }
  EXPECT_EQ(marked, 8);

  EmulatedDriver driver(fb, uint64_t{1} << 30);
  GemmLog log;
  const int tokens = 64;
  auto ex = makeExecutors(**plan, driver, tokens, 16, 64, true, true, [&](cuda::CudaExecutorOptions &o) {
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
  });
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto &gpu = ex->gpu;
  EXPECT_EQ(gpu->gemm_library_steps(), marked);
  EXPECT_TRUE(gpu->warnings().empty()) << joined(gpu->warnings());
  // Workspace, the widest converted input (down's 128) for 64 rows, the largest weight in bf16.
  EXPECT_EQ(gpu->memory().library,
            EmulatedGemmLibrary::kWorkspaceBytes + align256(128 * tokens * 2) + align256(largest));
  const int V = ex->V, bs = ex->bs, mb = 4;
  // A prefill of 24 rows: every linear step dequantizes its weight and calls the library.
  ex->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(log.shapes, gemms);
  EXPECT_EQ(driver.dequantLaunches(), marked);
  EXPECT_EQ(driver.toBf16Launches(), expectedConversions(**plan));
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
  // A chunk of 12 rows next to a decode row: the GEMV (below 16 rows), no library, no tiles.
  ex->compare(makeStep({bs + 15, 6}, {12, 1}, bs, mb, V, 2), kBf16Tol);
  EXPECT_EQ(log.calls, marked);
  EXPECT_EQ(driver.dequantLaunches(), marked);
  EXPECT_EQ(driver.linearTensorCoreLaunches(), 0);
  std::printf("[ measured ] int4 weights dequantized to bf16 on the library vs CPU: max |logit error| / "
              "max(1, max |logit|) = %.2e\n", ex->worst);

  // Without the library: the GEMV below 33 rows, the tiles from 33 (a warning says so).
  EmulatedDriver plain(fb, uint64_t{1} << 30);
  auto ex2 = makeExecutors(**plan, plain, tokens, 16, 64);
  ASSERT_TRUE(ex2.ok()) << ex2.status().to_string();
  EXPECT_EQ(ex2->gpu->gemm_library_steps(), 0);
  EXPECT_FALSE(ex2->gpu->warnings().empty());
  ex2->compare(makeStep({bs + 3, 5}, {bs + 3, 5}, bs, mb, V, 1), kTf32Tol);
  EXPECT_EQ(plain.linearTensorCoreLaunches(), 0);
  EXPECT_EQ(plain.dequantLaunches(), 0);

  // --quant-gemm generated: no library steps, no dequant_bf16 kernels.
  TempDir dir2;
  auto generated = llmrt::Plan::open(compilePlan(dir2, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/llama",
                                                 "--target sm_90 --weight-layout cuda-mma --quantize int4-g32-f16-sym "
                                                 "--quant-gemm generated"));
  ASSERT_TRUE(generated.ok()) << generated.status().to_string();
  for (const llmrt::fb::Step *st : *(*generated)->program("forward")->steps()) {
    EXPECT_EQ(st->gemm_library(), llmrt::fb::GemmLibrary::None);
    EXPECT_EQ(st->library_weight_kernel(), -1);
  }
  for (const llmrt::fb::Kernel *k : *(*generated)->fb().kernels())
    EXPECT_NE(k->family()->str(), "dequant_bf16") << k->name()->str();
}

TEST(CudaExecutor, RefusesGemmLibraryStepsItCannotRun) {
  // Plans the reader accepts but the executor cannot run: a bf16 library step without its
  // to_bf16 kernel, and a library step over f16 weights (the library is given bf16 or f32).
  TempDir dir;
  std::unique_ptr<llmrt::Plan> plan = bf16Plan(dir);
  ASSERT_TRUE(plan);
  const std::string bytes = llmc::testing::readFile(dir.file("plan.fb"));
  ASSERT_FALSE(bytes.empty());
  struct Case {
    const char *what;
    const char *error;
  };
  for (const Case &c : {Case{"no input kernel", "needs to_bf16 input kernel"},
                        Case{"f16 weights", "needs a dense bf16 or f32 weight"}}) {
    SCOPED_TRACE(c.what);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    const auto *header = reinterpret_cast<const llmrt::PlanFileHeader *>(copy.data());
    llmrt::fb::Plan *p = llmrt::fb::GetMutablePlan(copy.data() + header->flatbuffer_offset);
    llmrt::fb::Program *forward = nullptr;
    for (flatbuffers::uoffset_t i = 0; i < p->programs()->size(); ++i)
      if (p->programs()->Get(i)->name()->str() == "forward")
        forward = p->mutable_programs()->GetMutableObject(i);
    ASSERT_NE(forward, nullptr);
    llmrt::fb::Step *step = nullptr;
    for (flatbuffers::uoffset_t i = 0; i < forward->steps()->size() && !step; ++i)
      if (forward->steps()->Get(i)->gemm_library() != llmrt::fb::GemmLibrary::None)
        step = forward->mutable_steps()->GetMutableObject(i);
    ASSERT_NE(step, nullptr);
    if (std::string(c.what) == "no input kernel") {
      ASSERT_TRUE(step->mutate_library_input_kernel(-1));
    } else {
      llmrt::fb::Tensor *w = p->mutable_tensors()->GetMutableObject(
          static_cast<flatbuffers::uoffset_t>(step->weights()->Get(0)));
      ASSERT_EQ(w->dtype(), llmrt::fb::DType::BF16);
      ASSERT_TRUE(w->mutate_dtype(llmrt::fb::DType::F16));
    }
    auto mutated = llmrt::Plan::from_bytes(copy.data(), copy.size());
    ASSERT_TRUE(mutated.ok()) << mutated.status().to_string();
    EmulatedDriver driver((*mutated)->fb(), uint64_t{1} << 30);
    GemmLog log;
    cuda::CudaExecutorOptions o = hermeticOptions();
    o.load_gemm_library = emulatedGemmLibrary(driver, log);
    auto ex = cuda::CudaExecutor::create(**mutated, &driver, o);
    ASSERT_FALSE(ex.ok());
    EXPECT_EQ(ex.status().code(), llmrt::StatusCode::kInvalidArgument) << ex.status().to_string();
    EXPECT_NE(ex.status().message().find(c.error), std::string::npos) << ex.status().message();
    EXPECT_NE(ex.status().message().find("Linear"), std::string::npos) << ex.status().message();
  }
}

} // namespace
