// The emulated device of the CUDA executor tests (CudaExecutorTest.cpp,
// CudaExecutorGemmLibraryTest.cpp): a cuda::Driver whose device memory is host memory and whose
// modules are the plan's kernel sources built with the host compiler against HostEmulation.h (see
// CudaExecutorTest.cpp), and the helpers both files share: plans compiled by llmc, step batches, a
// CUDA and a CPU executor on one plan.
#pragma once
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


namespace llmc::testing::emulated {

using llmc::testing::TempDir;
namespace cuda = llmrt::cuda;

/// A device emulated on the host (see the comment of CudaExecutorTest.cpp).
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
  /// Launches of silu_mul kernels, and of GEMVs with it inside (Step.silu_kernel).
  int siluMulLaunches() const { return siluMulLaunches_; }
  int siluGemvLaunches() const { return siluGemvLaunches_; }
  /// Launches of add_rms_norm kernels, and of GEMVs with it inside (Step.norm_kernel).
  int addRmsNormLaunches() const { return addRmsNormLaunches_; }
  int normGemvLaunches() const { return normGemvLaunches_; }
  /// Launches of the sampling kernel (Program.sampling_kernel).
  int samplingLaunches() const { return samplingLaunches_; }
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
    siluMulLaunches_ += m.entry.rfind("llm_silu_mul_", 0) == 0;
    siluGemvLaunches_ += m.entry.rfind("llm_linear_", 0) == 0 && m.entry.find("_silu_") != std::string::npos;
    addRmsNormLaunches_ += m.entry.rfind("llm_add_rms_norm_", 0) == 0;
    normGemvLaunches_ += m.entry.rfind("llm_linear_", 0) == 0 && m.entry.find("_addnorm") != std::string::npos;
    samplingLaunches_ += m.entry.rfind("llm_sample_", 0) == 0;
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
  int siluMulLaunches_ = 0, siluGemvLaunches_ = 0, addRmsNormLaunches_ = 0, normGemvLaunches_ = 0;
  int samplingLaunches_ = 0;
  bool events_ = true;
  int ccMajor_ = 9, ccMinor_ = 0, version_ = 13000;
  bool programmatic_ = true, afterLaunch_ = false, loadingGridDependency_ = false;
  int overlappedLaunches_ = 0;
  std::vector<std::unique_ptr<int64_t>> eventTimes_;
  int eventRecords_ = 0;
};

/// `llmc compile <model> -o <dir>/plan.fb <args>`.
inline std::string compilePlan(const TempDir &dir, const std::string &model, const std::string &args) {
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

inline Step makeStep(const std::vector<int> &ctx, const std::vector<int> &rows, int bs, int mb, int vocab, int seed) {
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
inline void expectLogitsClose(const std::vector<float> &gpu, const std::vector<float> &cpu, double tol,
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
inline std::string writeSmallConfig(const TempDir &dir, int vocab, int maxPositions, int intermediate = 64,
                                    int layers = 1) {
  std::filesystem::create_directories(dir.file("model"));
  const std::string config = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 32, "intermediate_size": )" + std::to_string(intermediate) +
                             R"(, "num_hidden_layers": )" + std::to_string(layers) + R"(, "num_attention_heads": 1,
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
inline llmrt::StatusOr<std::unique_ptr<cuda::GemmLibrary>> noGemmLibrary(cuda::Driver *) {
  return llmrt::unavailable("the emulated device has no GEMM library");
}

inline cuda::CudaExecutorOptions hermeticOptions() {
  cuda::CudaExecutorOptions o;
  o.load_gemm_library = noGemmLibrary;
  return o;
}

/// `options` (when given) adjusts the CUDA executor's options last (e.g. its GEMM library).
inline llmrt::StatusOr<Executors> makeExecutors(const llmrt::Plan &plan, EmulatedDriver &driver, int tokens, int seqs,
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

} // namespace llmc::testing::emulated
