// The CUDA executor (runtime/cuda/cuda_executor.h) end to end without a GPU: plans compiled by
// llmc with kernel images run through a cuda::Driver that emulates the device on the host.
// Device memory is host memory; loading a module finds the plan kernel whose image it is and
// builds that kernel's CUDA C++ source with the host compiler against HostEmulation.h; a launch
// runs it with the executor's exact parameter block. So everything but the GPU itself is real:
// module selection, the memory plan, weight upload, argument marshalling, launch geometry, the
// batch upload and the KV cache. Logits must match the CPU executor on the same plan.
// A dense GEMM library (cuBLASLt's place, runtime/cuda/gemm_library.h) is emulated the same way:
// it multiplies what lies in the emulated device memory, on the driver's emulated stream.

#include "runtime/cuda/cuda_executor.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/engine/profiler.h"
#include "runtime/plan/plan_file.h"
#include "runtime/quant/quant_format.h"
#include "runtime/sampler/logits_summary.h"
#include "tests/unit/tiny_plan.h"

#include "codegen/KernelSource.h"

#include "CodegenTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <dlfcn.h>
#include <filesystem>
#include <functional>
#include <unistd.h>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

using llmc::testing::TempDir;
namespace cuda = llmrt::cuda;

/// A device emulated on the host (see the file comment).
class EmulatedDriver : public cuda::Driver {
public:
  /// `graphs`: whether the emulated driver offers CUDA graphs (false: the Driver defaults).
  EmulatedDriver(const llmrt::fb::Plan &plan, uint64_t memory, bool graphs = true, bool events = true)
      : plan_(plan), memory_(memory), graphs_(graphs), events_(events) {}
  ~EmulatedDriver() override {
    for (auto &[p, bytes] : live_)
      std::free(reinterpret_cast<void *>(p));
  }

  llmrt::StatusOr<int> version() override { return version_; }
  llmrt::StatusOr<std::vector<cuda::DeviceInfo>> devices() override {
    return std::vector<cuda::DeviceInfo>{{0, "Host emulation", ccMajor_, ccMinor_, memory_}};
  }
  /// What the emulated device and driver report (default: compute capability 9.0, CUDA 13.0,
  /// programmatic dependent launch).
  void setDevice(int ccMajor, int ccMinor) { ccMajor_ = ccMajor, ccMinor_ = ccMinor; }
  void setVersion(int version) { version_ = version; }
  void setProgrammaticLaunch(bool on) { programmatic_ = on; }
  llmrt::Status use_device(int ordinal) override {
    return ordinal == 0 ? llmrt::ok_status() : llmrt::invalid_argument("no device");
  }
  llmrt::StatusOr<cuda::DevicePtr> alloc(uint64_t bytes) override {
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p)
      return llmrt::resource_exhausted("emulated alloc");
    std::memset(p, 0xCD, bytes); // device memory is not zeroed
    live_[reinterpret_cast<cuda::DevicePtr>(p)] = bytes;
    return reinterpret_cast<cuda::DevicePtr>(p);
  }
  llmrt::Status free(cuda::DevicePtr p) override {
    auto it = live_.find(p);
    if (it == live_.end())
      return llmrt::invalid_argument("free of an unknown pointer");
    std::free(reinterpret_cast<void *>(p));
    live_.erase(it);
    return llmrt::ok_status();
  }
  llmrt::Status copy_to_device(cuda::DevicePtr dst, const void *src, uint64_t bytes) override {
    RETURN_IF_ERROR(notCapturing("copy_to_device"));
    afterLaunch_ = false;
    RETURN_IF_ERROR(inside(dst, bytes));
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
    return llmrt::ok_status();
  }
  llmrt::Status copy_to_host(void *dst, cuda::DevicePtr src, uint64_t bytes) override {
    RETURN_IF_ERROR(notCapturing("copy_to_host"));
    afterLaunch_ = false;
    RETURN_IF_ERROR(inside(src, bytes));
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
    return llmrt::ok_status();
  }
  llmrt::Status copy_on_device(cuda::DevicePtr dst, cuda::DevicePtr src, uint64_t bytes) override {
    afterLaunch_ = false;
    RETURN_IF_ERROR(inside(dst, bytes));
    RETURN_IF_ERROR(inside(src, bytes));
    std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), bytes);
    return llmrt::ok_status();
  }
  llmrt::StatusOr<cuda::ModuleHandle> load_module(const void *image, size_t size, bool ptx) override {
    // The image is one of the plan's: find its kernel and build that kernel's source.
    for (const llmrt::fb::Kernel *k : *plan_.kernels())
      for (const llmrt::fb::KernelImage *im : *k->images()) {
        const auto *bytes = ptx ? im->ptx() : im->cubin();
        if (!bytes || (!ptx && bytes->data() != image))
          continue;
        if (ptx && std::memcmp(bytes->data(), image, bytes->size()) != 0)
          continue;
        (void)size;
        loadingGridDependency_ = im->grid_dependency_control();
        return build(*k);
      }
    return llmrt::invalid_argument("emulated load_module: the image is not one of the plan's");
  }
  llmrt::StatusOr<cuda::FunctionHandle> get_function(cuda::ModuleHandle module,
                                                     const std::string &name) override {
    auto *m = static_cast<Module *>(module);
    if (m->entry != name)
      return llmrt::not_found("no function " + name + " in the module of " + m->entry);
    return module;
  }
  llmrt::Status launch(cuda::FunctionHandle fn, unsigned grid, const int block[3], unsigned shared,
                       void **params) override {
    auto *m = static_cast<Module *>(fn);
    if (grid == 0 || block[0] != m->block || block[1] != 1 || block[2] != 1 || shared != 0)
      return llmrt::invalid_argument("emulated launch of " + m->entry + ": bad geometry");
    afterLaunch_ = true;
    if (capturing_) { // recorded with its parameter values (8-byte slots, as the executor passes)
      Recorded r;
      r.module = m;
      r.grid = grid;
      r.values.resize(m->arity);
      for (unsigned i = 0; i < m->arity; ++i)
        std::memcpy(&r.values[i], params[i], sizeof(uint64_t));
      recording_.push_back(std::move(r));
      return llmrt::ok_status();
    }
    count(*m);
    // Emulation cost grows with blocks x threads: a small grid is exactly as correct (the
    // kernels walk their items grid-stride) and keeps the test fast.
    m->run(params, std::min(grid, 4u), static_cast<unsigned>(m->block));
    return llmrt::ok_status();
  }
  bool has_programmatic_launch() override { return programmatic_; }
  /// As launch(), counted; refused unless the driver offers it, the kernel's image waits on
  /// griddepcontrol (sm_90+, the plan's grid_dependency_control) and the stream's last operation
  /// was a kernel launch (the executor's rule: never after a copy, an event or library work).
  llmrt::Status launch_programmatic(cuda::FunctionHandle fn, unsigned grid, const int block[3], unsigned shared,
                                    void **params) override {
    auto *m = static_cast<Module *>(fn);
    if (!programmatic_ || !m->gridDependency || !afterLaunch_)
      return llmrt::internal_error("emulated programmatic launch of " + m->entry + ": " +
                                   (!programmatic_        ? "the driver has none"
                                    : !m->gridDependency ? "its image does not wait on griddepcontrol"
                                                         : "not right after a kernel launch"));
    ++overlappedLaunches_;
    return launch(fn, grid, block, shared, params);
  }
  int overlappedLaunches() const { return overlappedLaunches_; }
  llmrt::Status synchronize() override { return llmrt::ok_status(); }

  llmrt::Status begin_capture() override {
    if (!graphs_)
      return cuda::Driver::begin_capture();
    if (capturing_)
      return llmrt::invalid_argument("emulated begin_capture: already capturing");
    capturing_ = true;
    afterLaunch_ = false;
    recording_.clear();
    return llmrt::ok_status();
  }
  llmrt::StatusOr<cuda::GraphHandle> end_capture() override {
    if (!capturing_)
      return llmrt::invalid_argument("emulated end_capture: not capturing");
    capturing_ = false;
    graphs_made_.push_back(std::make_unique<std::vector<Recorded>>(std::move(recording_)));
    return static_cast<cuda::GraphHandle>(graphs_made_.back().get());
  }
  llmrt::Status launch_graph(cuda::GraphHandle g) override {
    RETURN_IF_ERROR(notCapturing("launch_graph"));
    afterLaunch_ = false;
    ++graphLaunches_;
    for (Recorded &r : *static_cast<std::vector<Recorded> *>(g)) {
      if (r.host) { // work a library enqueued on the stream
        r.host();
        continue;
      }
      std::vector<void *> params(r.values.size());
      for (size_t i = 0; i < params.size(); ++i)
        params[i] = &r.values[i];
      count(*r.module);
      r.module->run(params.data(), std::min(r.grid, 4u), static_cast<unsigned>(r.module->block));
    }
    return llmrt::ok_status();
  }

  // Events: launches run on the host as they are made, so the host clock at a record is the
  // point the stream has reached.
  llmrt::StatusOr<cuda::EventHandle> create_event() override {
    if (!events_)
      return cuda::Driver::create_event();
    eventTimes_.push_back(std::make_unique<int64_t>(-1));
    return static_cast<cuda::EventHandle>(eventTimes_.back().get());
  }
  llmrt::Status record_event(cuda::EventHandle e) override {
    RETURN_IF_ERROR(notCapturing("record_event"));
    afterLaunch_ = false;
    *static_cast<int64_t *>(e) = llmrt::Profiler::now_ns();
    ++eventRecords_;
    return llmrt::ok_status();
  }
  llmrt::StatusOr<float> elapsed_ms(cuda::EventHandle a, cuda::EventHandle b) override {
    const int64_t t0 = *static_cast<int64_t *>(a), t1 = *static_cast<int64_t *>(b);
    if (t0 < 0 || t1 < 0)
      return llmrt::invalid_argument("emulated elapsed_ms: an event was never recorded");
    return static_cast<float>(double(t1 - t0) / 1e6);
  }
  int eventRecords() const { return eventRecords_; }

  /// Work a library enqueues on the stream (cuBLASLt's kernels): run now, or recorded into the
  /// graph being captured and run at each replay, in order with the kernel launches.
  void enqueue(std::function<void()> work) {
    afterLaunch_ = false;
    if (capturing_) {
      Recorded r;
      r.host = std::move(work);
      recording_.push_back(std::move(r));
      return;
    }
    work();
  }
  bool capturing() const { return capturing_; }
  /// Whether [p, p + bytes) lies inside one live allocation.
  bool holds(cuda::DevicePtr p, uint64_t bytes) const { return inside(p, bytes).ok(); }

  int launches() const { return launches_; }
  int graphsCaptured() const { return static_cast<int>(graphs_made_.size()); }
  int graphLaunches() const { return graphLaunches_; }
  /// Launches of tensor-core kernels (entries with "_tc_"), and of the tiled attention among them.
  int tensorCoreLaunches() const { return tensorCoreLaunches_; }
  int tiledAttentionLaunches() const { return tiledAttentionLaunches_; }
  /// Launches of the linear steps' tensor-core kernels, and of to_bf16 kernels (a GEMM library
  /// step's input conversion).
  int linearTensorCoreLaunches() const { return linearTensorCoreLaunches_; }
  int toBf16Launches() const { return toBf16Launches_; }
  /// Launches of dequant_bf16 kernels (a quantized GEMM library step's weight conversion).
  int dequantLaunches() const { return dequantLaunches_; }
  /// Launches of quantize_q8 kernels and of the GEMVs that read their int8 rows.
  int quantizeLaunches() const { return quantizeLaunches_; }
  int int8GemvLaunches() const { return int8GemvLaunches_; }
  /// Launches of rope_kv_store kernels, and of attention kernels with it inside (Step.rope_kernel).
  int ropeKvStoreLaunches() const { return ropeKvStoreLaunches_; }
  int ropeAttentionLaunches() const { return ropeAttentionLaunches_; }
  size_t modules() const { return modules_.size(); }

private:
  struct Module {
    std::string entry;
    int block = 0;
    unsigned arity = 0; // kernel parameters
    bool gridDependency = false; // the loaded image's grid_dependency_control
    void (*run)(void **, unsigned, unsigned) = nullptr;
  };
  struct Recorded {
    Module *module = nullptr;
    unsigned grid = 0;
    std::vector<uint64_t> values;
    std::function<void()> host; // set: work enqueued by a library, not a kernel launch
  };

  void count(const Module &m) {
    ++launches_;
    const bool tc = m.entry.find("_tc_") != std::string::npos;
    tensorCoreLaunches_ += tc;
    tiledAttentionLaunches_ += tc && m.entry.rfind("llm_paged_attention", 0) == 0;
    linearTensorCoreLaunches_ += tc && m.entry.rfind("llm_linear_", 0) == 0;
    toBf16Launches_ += m.entry.rfind("llm_to_bf16_", 0) == 0;
    dequantLaunches_ += m.entry.rfind("llm_dequant_bf16_", 0) == 0;
    quantizeLaunches_ += m.entry.rfind("llm_quantize_q8_", 0) == 0;
    int8GemvLaunches_ += m.entry.find("_q8a_") != std::string::npos;
    ropeKvStoreLaunches_ += m.entry.rfind("llm_rope_kv_store_", 0) == 0;
    ropeAttentionLaunches_ += m.entry.rfind("llm_paged_attention_", 0) == 0 && m.entry.find("_rope") != std::string::npos;
  }

  llmrt::Status notCapturing(const char *call) const {
    if (capturing_) // as on a GPU: a synchronous copy invalidates the capture
      return llmrt::internal_error(std::string("emulated ") + call + " during a graph capture");
    return llmrt::ok_status();
  }

  llmrt::Status inside(cuda::DevicePtr p, uint64_t bytes) const {
    auto it = live_.upper_bound(p);
    if (it == live_.begin())
      return llmrt::invalid_argument("emulated copy outside device memory");
    --it;
    if (p + bytes > it->first + it->second)
      return llmrt::invalid_argument("emulated copy past the end of an allocation");
    return llmrt::ok_status();
  }

  llmrt::StatusOr<cuda::ModuleHandle> build(const llmrt::fb::Kernel &k) {
    const std::string entry = k.name()->str();
    for (auto &m : modules_)
      if (m->entry == entry)
        return static_cast<cuda::ModuleHandle>(m.get());
    std::string src =
        "#include \"HostEmulation.h\"\n#include <type_traits>\n#include <utility>\n" + k.source()->str() +
        "\ntemplate <class... A, std::size_t... I>\n"
        "static void llmcCall(void (*f)(A...), void **p, std::index_sequence<I...>) {\n"
        "  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>> *>(p[I])...);\n}\n"
        "template <class... A> static void llmcCallAll(void (*f)(A...), void **p) {\n"
        "  llmcCall(f, p, std::index_sequence_for<A...>{});\n}\n"
        "template <class... A> static constexpr unsigned llmcArity(void (*)(A...)) { return sizeof...(A); }\n"
        "extern \"C\" unsigned llmc_arity() { return llmcArity(&" + entry + "); }\n"
        "extern \"C\" void llmc_launch(void **params, unsigned grid, unsigned block) {\n"
        "  llmcLaunch(grid, block, [&] { llmcCallAll(&" + entry + ", params); });\n}\n";
    // A library built once serves every test, across processes (ctest runs each test in its
    // own): it is cached under the build tree by the hash of everything that makes it.
    static std::map<std::string, void *> built;
    void *&h = built[entry];
    if (h)
      return adopt(k, h);
    static const std::string emulation =
        llmc::testing::readFile(std::string(LLMC_HOST_EMULATION_DIR) + "/HostEmulation.h");
    const std::string flags = "-std=c++20 -O1 -fPIC -shared -pthread -w";
    char key[20];
    std::snprintf(key, sizeof(key), "%016llx",
                  static_cast<unsigned long long>(llmc::detail::fnv1a64(src + emulation + flags + LLMC_HOST_CXX)));
    std::filesystem::create_directories(LLMC_EMULATION_CACHE);
    const std::string lib = std::string(LLMC_EMULATION_CACHE) + "/" + entry + "_" + key + ".so";
    if (!std::filesystem::exists(lib)) {
      static TempDir work;
      const std::string cc = work.file(entry + ".cpp"), tmp = work.file(entry + ".so");
      llmc::testing::writeFile(cc, src.data(), src.size());
      auto r = llmc::testing::runCommand(std::string("'") + LLMC_HOST_CXX + "' " + flags + " -I'" +
                                             LLMC_HOST_EMULATION_DIR + "' '" + cc + "' -o '" + tmp + "'",
                                         work.file(entry + ".log"));
      if (r.exitCode != 0)
        return llmrt::internal_error("host build of " + entry + " failed:\n" + r.output);
      std::error_code ec; // a copy then an atomic rename: concurrent tests never see half a file
      const std::string staged = lib + "." + std::to_string(::getpid());
      std::filesystem::copy_file(tmp, staged, std::filesystem::copy_options::overwrite_existing, ec);
      if (!ec)
        std::filesystem::rename(staged, lib, ec);
      if (ec)
        return llmrt::internal_error("caching " + lib + ": " + ec.message());
    }
    h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      return llmrt::internal_error(std::string("dlopen: ") + dlerror());
    return adopt(k, h);
  }

  cuda::ModuleHandle adopt(const llmrt::fb::Kernel &k, void *h) {
    const std::string entry = k.name()->str();
    auto m = std::make_unique<Module>();
    m->entry = entry;
    m->block = k.block_dim()->Get(0);
    m->run = reinterpret_cast<void (*)(void **, unsigned, unsigned)>(dlsym(h, "llmc_launch"));
    m->arity = reinterpret_cast<unsigned (*)()>(dlsym(h, "llmc_arity"))();
    m->gridDependency = loadingGridDependency_;
    modules_.push_back(std::move(m));
    return static_cast<cuda::ModuleHandle>(modules_.back().get());
  }

  const llmrt::fb::Plan &plan_;
  uint64_t memory_;
  std::map<cuda::DevicePtr, uint64_t> live_;
  std::vector<std::unique_ptr<Module>> modules_;
  int launches_ = 0;
  bool graphs_ = true, capturing_ = false;
  std::vector<Recorded> recording_;
  std::vector<std::unique_ptr<std::vector<Recorded>>> graphs_made_;
  int graphLaunches_ = 0;
  int tensorCoreLaunches_ = 0;
  int tiledAttentionLaunches_ = 0;
  int linearTensorCoreLaunches_ = 0;
  int toBf16Launches_ = 0;
  int dequantLaunches_ = 0;
  int quantizeLaunches_ = 0, int8GemvLaunches_ = 0;
  int ropeKvStoreLaunches_ = 0, ropeAttentionLaunches_ = 0;
  bool events_ = true;
  int ccMajor_ = 9, ccMinor_ = 0, version_ = 13000;
  bool programmatic_ = true, afterLaunch_ = false, loadingGridDependency_ = false;
  int overlappedLaunches_ = 0;
  std::vector<std::unique_ptr<int64_t>> eventTimes_;
  int eventRecords_ = 0;
};

/// `llmc compile <model> -o <dir>/plan.fb <args>`.
std::string compilePlan(const TempDir &dir, const std::string &model, const std::string &args) {
  const std::string plan = dir.file("plan.fb");
  auto r = llmc::testing::runCommand(std::string("'") + LLMC_BIN + "' compile '" + model + "' -o '" + plan +
                                         "' -q " + args,
                                     dir.file("llmc.log"));
  EXPECT_EQ(r.exitCode, 0) << r.output;
  return plan;
}

/// One step's batch over fixed, scrambled blocks: sequence s owns blocks s*mb .. s*mb + mb - 1
/// (reversed), its rows are positions ctx[s] - n[s] .. ctx[s] - 1; logits for every row.
struct Step {
  std::vector<int32_t> tokens, positions, qs = {0}, ctx, tables, idx;
  std::vector<int64_t> slots;
  int mb = 0;
  llmrt::BatchInput input() const {
    llmrt::BatchInput b;
    b.tokens = tokens;
    b.positions = positions;
    b.kv_slots = slots;
    b.query_start = qs;
    b.context_lens = ctx;
    b.block_tables = tables;
    b.max_blocks_per_seq = mb;
    b.logits_indices = idx;
    return b;
  }
};

Step makeStep(const std::vector<int> &ctx, const std::vector<int> &rows, int bs, int mb, int vocab, int seed) {
  Step st;
  st.mb = mb;
  for (size_t s = 0; s < ctx.size(); ++s) {
    for (int j = 0; j < mb; ++j)
      st.tables.push_back(int32_t(s) * mb + (mb - 1 - j));
    for (int p = ctx[s] - rows[s]; p < ctx[s]; ++p) {
      st.idx.push_back(int32_t(st.tokens.size()));
      st.tokens.push_back((p * 37 + int(s) * 11 + seed) % vocab);
      st.positions.push_back(p);
      st.slots.push_back(int64_t(st.tables[s * mb + p / bs]) * bs + p % bs);
    }
    st.qs.push_back(int32_t(st.tokens.size()));
    st.ctx.push_back(ctx[s]);
  }
  return st;
}

/// max |gpu - cpu| / max(1, max |cpu|) (the measure the tolerances below bound); `relative`,
/// when given, receives it.
void expectLogitsClose(const std::vector<float> &gpu, const std::vector<float> &cpu, double tol,
                       double *relative = nullptr) {
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_TRUE(std::isfinite(gpu[i])) << i;
    worst = std::max(worst, std::fabs(double(gpu[i]) - cpu[i]));
    scale = std::max(scale, std::fabs(double(cpu[i])));
  }
  if (relative)
    *relative = worst / std::max(1.0, scale);
  EXPECT_LE(worst, tol * std::max(1.0, scale)) << "max |gpu - cpu| " << worst << ", max |logit| " << scale;
}

/// A CUDA executor over `driver` and a CPU executor on the same plan with the same capacity
/// and KV blocks. The CPU runs the reference contract unless told `cpuKernels`: the CUDA kernels
/// multiply f32 activations with exactly dequantized weights, except the quantized GEMV of plans
/// compiled with --quant-gemv int8 (the default), which quantizes its input as the fast contract
/// does.
struct Executors {
  std::unique_ptr<cuda::CudaExecutor> gpu;
  std::unique_ptr<llmrt::CpuExecutor> cpu;
  int V = 0, bs = 0;
  /// The largest relative logits error compare() has seen (expectLogitsClose's measure).
  mutable double worst = 0;
  /// Runs `st` on both and compares the logits at tolerance `tol`.
  void compare(const Step &st, double tol) const {
    std::vector<float> lg(st.idx.size() * V, NAN), lc(lg.size(), NAN);
    auto s1 = gpu->forward(st.input(), lg.data());
    ASSERT_TRUE(s1.ok()) << s1.to_string();
    auto s2 = cpu->forward(st.input(), lc.data());
    ASSERT_TRUE(s2.ok()) << s2.to_string();
    double relative = 0;
    expectLogitsClose(lg, lc, tol, &relative);
    worst = std::max(worst, relative);
  }
  /// Runs `st` summarized on the device: its whole rows (read back) match the CPU's within 1e-4,
  /// and each summary is the host's summary of the device's own row (max, ids, logits bit for
  /// bit, log_sum within 1e-12).
  void compareSummaries(const Step &st) const {
    const int L = static_cast<int>(st.idx.size());
    std::vector<llmrt::LogitsSummary> sums(L);
    ASSERT_TRUE(gpu->forward_summary(st.input(), sums.data()).ok());
    std::vector<float> rows(size_t(L) * V, NAN), lc(rows.size(), NAN);
    ASSERT_TRUE(gpu->read_logits(0, L, rows.data()).ok());
    ASSERT_TRUE(cpu->forward(st.input(), lc.data()).ok());
    expectLogitsClose(rows, lc, 1e-4);
    for (int i = 0; i < L; ++i) {
      llmrt::LogitsSummary want;
      llmrt::summarize_logits(rows.data() + size_t(i) * V, V, &want);
      EXPECT_EQ(sums[i].max, want.max) << i;
      EXPECT_EQ(sums[i].count, want.count) << i;
      EXPECT_EQ(sums[i].num_valid, V) << i;
      EXPECT_EQ(std::memcmp(sums[i].ids, want.ids, sizeof(want.ids)), 0) << i;
      EXPECT_EQ(std::memcmp(sums[i].logits, want.logits, sizeof(want.logits)), 0) << i;
      EXPECT_NEAR(sums[i].log_sum, want.log_sum, 1e-12 * std::max(1.0, std::fabs(want.log_sum))) << i;
    }
  }
};

/// A one-layer Llama config.json with one 32-wide head (as small as a test of the step's shape
/// needs: emulation costs grow with every thread and barrier), in dir/model.
std::string writeSmallConfig(const TempDir &dir, int vocab, int maxPositions) {
  std::filesystem::create_directories(dir.file("model"));
  const std::string config = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1,
    "num_key_value_heads": 1, "head_dim": 32, "vocab_size": )" + std::to_string(vocab) +
                             R"(, "max_position_embeddings": )" + std::to_string(maxPositions) + R"(,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu",
    "bos_token_id": 1, "eos_token_id": 2})";
  llmc::testing::writeFile(dir.file("model/config.json"), config.data(), config.size());
  return dir.file("model");
}

/// CudaExecutorOptions::load_gemm_library for tests that do not exercise a GEMM library: the
/// emulated device has none (load_cublaslt would dlopen the real libcublasLt and, on a GPU
/// machine, hand it host pointers). Steps the plan gives to a library run their generated kernels.
llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>> noGemmLibrary(cuda::Driver *) {
  return llmrt::unavailable("the emulated device has no GEMM library");
}

cuda::CudaExecutorOptions hermeticOptions() {
  cuda::CudaExecutorOptions o;
  o.load_gemm_library = noGemmLibrary;
  return o;
}

/// `options` (when given) adjusts the CUDA executor's options last (e.g. its GEMM library).
llmrt::StatusOr<Executors> makeExecutors(const llmrt::Plan &plan, EmulatedDriver &driver, int tokens, int seqs,
                                         int blocks, bool graphs = true, bool tiledAttention = true,
                                         const std::function<void(cuda::CudaExecutorOptions &)> &options = {},
                                         const char *cpuKernels = "reference") {
  cuda::CudaExecutorOptions go = hermeticOptions();
  go.tiled_attention = tiledAttention;
  go.max_tokens_per_step = tokens;
  go.max_seqs_per_step = seqs;
  go.num_kv_blocks = blocks;
  go.cuda_graphs = graphs;
  if (options)
    options(go);
  Executors e;
  ASSIGN_OR_RETURN(e.gpu, cuda::CudaExecutor::create(plan, &driver, go));
  llmrt::CpuExecutorOptions co;
  co.threads = 2;
  co.max_tokens_per_step = tokens;
  co.max_seqs_per_step = seqs;
  co.num_kv_blocks = blocks;
  co.cpu_kernels = cpuKernels;
  ASSIGN_OR_RETURN(e.cpu, llmrt::CpuExecutor::create(plan, co));
  if (e.gpu->vocab_size() != e.cpu->vocab_size())
    return llmrt::internal_error("the executors disagree on the vocabulary");
  e.V = e.cpu->vocab_size();
  e.bs = e.cpu->block_size();
  return e;
}

/// Prefill of two sequences (one spanning blocks), then a decode step of both, on both
/// executors (the CPU under `cpuKernels`); logits compared at every row. `int8Gemv`: whether
/// the plan's quantized GEMVs read int8 activations (each after its input's quantize_q8).
void runBothAndCompare(const std::string &planPath, double tol, bool tensorCores = false,
                       const char *cpuKernels = "reference", bool int8Gemv = false) {
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
  // The decode step launches each layer's rope_kv_store inside its attention kernel.
  EXPECT_EQ(gpu->rope_in_attention_steps(), gpu->num_layers());
  EXPECT_EQ(driver.launches(), 2 * gpu->launches_per_step() + gpu->rope_in_attention_steps());
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
        EXPECT_EQ(driver.launches(), 4 * ex->gpu->launches_per_step() + 2 * ex->gpu->rope_in_attention_steps());
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
    EXPECT_EQ(driver.launches() - eager, 4 * gpu->launches_per_step()); // every step ran once
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
    // A prefill launches every step's kernel, a decode step one fewer per layer (its
    // rope_kv_store inside the attention kernel, also overlapped).
    const int prefill = gpu->launches_per_step() + gpu->rope_in_attention_steps();
    ASSERT_EQ(prefill, steps);
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
    EXPECT_EQ(driver.launches(), prefill + 2 * gpu->launches_per_step());
    // All but the first kernel of the prefill and of the captured decode (the replay reruns the
    // capture's launches without launching anew); profiled steps launch plainly, to time each kernel.
    const int overlapped = prefill - 1 + gpu->launches_per_step() - 1;
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
        gpu->launches_per_step() + gpu->rope_in_attention_steps() + 1);
  check(makeStep({bs + 3, 6, 10}, {1, 1, 1}, bs, mb, V, 2), gpu->launches_per_step() + 1);
  EXPECT_EQ(driver.graphLaunches(), 1);
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
std::unique_ptr<llmrt::Plan> bf16Plan(const TempDir &dir, const std::string &extra = "") {
  auto plan = llmrt::Plan::open(compilePlan(dir, std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/tiny/qwen2",
                                            "--target sm_90 --weight-dtype bf16 " + extra));
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
