#include "runtime/cuda/gemm_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

namespace llmrt::cuda {

LtCall lt_call(const GemmShape& g, int64_t rows) {
  LtCall c;
  const bool bf16 = g.input == GemmInput::kBf16;
  const int in = bf16 ? lt::kR16BF : lt::kR32F;
  c.compute = bf16 ? lt::kCompute32F : lt::kCompute32FFastTf32;
  c.scale_type = lt::kR32F;
  c.trans_a = lt::kOpT;  // A: w as column-major [k, n], used transposed: [n, k]
  c.trans_b = lt::kOpN;  // B: x as column-major [k, rows]
  const uint64_t n = static_cast<uint64_t>(g.n), k = static_cast<uint64_t>(g.k), r = static_cast<uint64_t>(rows);
  c.a = {in, k, n, g.k};
  c.b = {in, k, r, g.k};
  c.d = {lt::kR32F, n, r, g.n};  // y as column-major [n, rows]
  c.c = c.d;
  c.epilogue = g.bias ? lt::kEpilogueBias : lt::kEpilogueDefault;
  c.bias_type = lt::kR32F;
  return c;
}

namespace {

// The entry points used, declared with their documented C signatures (cuBLASLt API reference);
// handles and descriptors are opaque pointers, status 0 is CUBLAS_STATUS_SUCCESS.
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspace_size;
  int state;
  float waves_count;
  int reserved[4];
};
static_assert(sizeof(Algo) == lt::kAlgoBytes && sizeof(HeuristicResult) == lt::kHeuristicResultBytes);

class DlCublasLt : public GemmLibrary {
 public:
  ~DlCublasLt() override {
    for (auto& [key, e] : cache_) destroy(e);
    if (pref_) pref_destroy_(pref_);
    if (handle_) destroy_(handle_);
    if (lib_) dlclose(lib_);
  }

  Status open(Driver* driver) {
    if (!driver->stream())  // the library's kernels would run on the legacy stream, out of order with ours
      return unavailable("cuBLASLt needs the driver's stream, and this driver has none");
    std::vector<std::string> tried;
    if (const char* env = std::getenv("LLMRT_CUBLASLT"); env && *env) tried.push_back(env);
    for (const char* n : {"libcublasLt.so.13", "libcublasLt.so.12", "/usr/local/cuda/lib64/libcublasLt.so.13",
                          "/usr/local/cuda/lib64/libcublasLt.so.12"})
      tried.push_back(n);
    std::string errors;
    for (const std::string& name : tried) {
      lib_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib_) {
        file_ = name.substr(name.rfind('/') + 1);
        break;
      }
      const char* e = dlerror();
      errors += (errors.empty() ? "" : "; ") + std::string(e ? e : name.c_str());
    }
    if (!lib_) return unavailable("cuBLASLt not found: " + errors);
    RETURN_IF_ERROR(sym("cublasLtCreate", &create_));
    RETURN_IF_ERROR(sym("cublasLtDestroy", &destroy_));
    RETURN_IF_ERROR(sym("cublasLtGetVersion", &version_));
    RETURN_IF_ERROR(sym("cublasLtMatmulDescCreate", &desc_create_));
    RETURN_IF_ERROR(sym("cublasLtMatmulDescDestroy", &desc_destroy_));
    RETURN_IF_ERROR(sym("cublasLtMatmulDescSetAttribute", &desc_set_));
    RETURN_IF_ERROR(sym("cublasLtMatrixLayoutCreate", &layout_create_));
    RETURN_IF_ERROR(sym("cublasLtMatrixLayoutDestroy", &layout_destroy_));
    RETURN_IF_ERROR(sym("cublasLtMatmulPreferenceCreate", &pref_create_));
    RETURN_IF_ERROR(sym("cublasLtMatmulPreferenceDestroy", &pref_destroy_));
    RETURN_IF_ERROR(sym("cublasLtMatmulPreferenceSetAttribute", &pref_set_));
    RETURN_IF_ERROR(sym("cublasLtMatmulAlgoGetHeuristic", &heuristic_));
    RETURN_IF_ERROR(sym("cublasLtMatmul", &matmul_));
    status_name_ = reinterpret_cast<decltype(status_name_)>(dlsym(lib_, "cublasLtGetStatusName"));
    const size_t v = version_();  // major * 10000 + minor * 100 + patch
    name_ = "cuBLASLt " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
            std::to_string(v % 100) + " (" + file_ + ")";
    stream_ = driver->stream();
    RETURN_IF_ERROR(check(create_(&handle_), "cublasLtCreate"));
    RETURN_IF_ERROR(check(pref_create_(&pref_), "cublasLtMatmulPreferenceCreate"));
    const uint64_t ws = kCublasLtWorkspaceBytes;
    return check(pref_set_(pref_, lt::kPrefMaxWorkspace, &ws, sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute");
  }

  std::string name() const override { return name_; }
  uint64_t workspace_bytes() const override { return kCublasLtWorkspaceBytes; }

  Status matmul(const GemmShape& g, int64_t rows, DevicePtr w, DevicePtr x, DevicePtr bias, DevicePtr y,
                DevicePtr workspace) override {
    if (rows <= 0) return ok_status();
    ASSIGN_OR_RETURN(Entry * e, entry(g, rows));
    if (g.bias) {
      const void* b = reinterpret_cast<const void*>(static_cast<uintptr_t>(bias));
      RETURN_IF_ERROR(check(desc_set_(e->desc, lt::kDescBiasPointer, &b, sizeof(b)),
                            "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
    }
    const float alpha = 1.0f, beta = 0.0f;
    void* d = reinterpret_cast<void*>(static_cast<uintptr_t>(y));
    return check(matmul_(handle_, e->desc, &alpha, reinterpret_cast<const void*>(static_cast<uintptr_t>(w)), e->a,
                         reinterpret_cast<const void*>(static_cast<uintptr_t>(x)), e->b, &beta, d, e->d, d, e->d,
                         &e->algo, reinterpret_cast<void*>(static_cast<uintptr_t>(workspace)),
                         kCublasLtWorkspaceBytes, stream_),
                 "cublasLtMatmul");
  }

 private:
  // The descriptors and algorithm of one (shape, rows), made on first use: the heuristic query
  // is host work (microseconds), made once per row count a step meets.
  struct Entry {
    Desc desc = nullptr;
    Layout a = nullptr, b = nullptr, d = nullptr;
    Algo algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int, bool, int64_t>;

  StatusOr<Entry*> entry(const GemmShape& g, int64_t rows) {
    const Key key{g.n, g.k, static_cast<int>(g.input), g.bias, rows};
    if (auto it = cache_.find(key); it != cache_.end()) return &it->second;
    const LtCall c = lt_call(g, rows);
    Entry e;
    Status st = build(c, &e);
    if (!st.ok()) {
      destroy(e);
      return st;
    }
    return &cache_.emplace(key, e).first->second;
  }

  Status build(const LtCall& c, Entry* e) {
    RETURN_IF_ERROR(check(desc_create_(&e->desc, c.compute, c.scale_type), "cublasLtMatmulDescCreate"));
    auto set = [&](int attr, int32_t v, const char* what) {
      return check(desc_set_(e->desc, attr, &v, sizeof(v)), what);
    };
    RETURN_IF_ERROR(set(lt::kDescTransA, c.trans_a, "cublasLtMatmulDescSetAttribute(TRANSA)"));
    RETURN_IF_ERROR(set(lt::kDescTransB, c.trans_b, "cublasLtMatmulDescSetAttribute(TRANSB)"));
    const uint32_t epilogue = static_cast<uint32_t>(c.epilogue);
    RETURN_IF_ERROR(check(desc_set_(e->desc, lt::kDescEpilogue, &epilogue, sizeof(epilogue)),
                          "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
    if (c.epilogue == lt::kEpilogueBias)
      RETURN_IF_ERROR(set(lt::kDescBiasDataType, c.bias_type, "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
    auto layout = [&](const LtCall::Layout& l, Layout* out) {
      return check(layout_create_(out, l.type, l.rows, l.cols, l.ld), "cublasLtMatrixLayoutCreate");
    };
    RETURN_IF_ERROR(layout(c.a, &e->a));
    RETURN_IF_ERROR(layout(c.b, &e->b));
    RETURN_IF_ERROR(layout(c.d, &e->d));
    HeuristicResult r{};
    int found = 0;
    const int s = heuristic_(handle_, e->desc, e->a, e->b, e->d, e->d, pref_, 1, &r, &found);
    if (s == lt::kStatusNotSupported || (s == lt::kStatusSuccess && found == 0))
      return unimplemented("cuBLASLt has no algorithm for n " + std::to_string(c.d.rows) + ", k " +
                           std::to_string(c.a.rows) + ", " + std::to_string(c.d.cols) + " rows");
    RETURN_IF_ERROR(check(s, "cublasLtMatmulAlgoGetHeuristic"));
    e->algo = r.algo;
    return ok_status();
  }

  void destroy(Entry& e) {
    if (e.a) layout_destroy_(e.a);
    if (e.b) layout_destroy_(e.b);
    if (e.d) layout_destroy_(e.d);
    if (e.desc) desc_destroy_(e.desc);
    e = Entry{};
  }

  template <typename F>
  Status sym(const char* name, F** out) {
    *out = reinterpret_cast<F*>(dlsym(lib_, name));
    if (!*out) return internal_error(file_ + " has no " + name + " (cuBLASLt too old?)");
    return ok_status();
  }
  Status check(int s, const char* call) const {
    if (s == lt::kStatusSuccess) return ok_status();
    const char* n = status_name_ ? status_name_(s) : nullptr;
    return internal_error(std::string(call) + " failed with cublasStatus_t " + std::to_string(s) +
                          (n ? std::string(" (") + n + ")" : std::string()));
  }

  void* lib_ = nullptr;
  std::string file_, name_;
  void* stream_ = nullptr;
  Handle handle_ = nullptr;
  Pref pref_ = nullptr;
  std::map<Key, Entry> cache_;
  int (*create_)(Handle*) = nullptr;
  int (*destroy_)(Handle) = nullptr;
  size_t (*version_)() = nullptr;
  int (*desc_create_)(Desc*, int, int) = nullptr;
  int (*desc_destroy_)(Desc) = nullptr;
  int (*desc_set_)(Desc, int, const void*, size_t) = nullptr;
  int (*layout_create_)(Layout*, int, uint64_t, uint64_t, int64_t) = nullptr;
  int (*layout_destroy_)(Layout) = nullptr;
  int (*pref_create_)(Pref*) = nullptr;
  int (*pref_destroy_)(Pref) = nullptr;
  int (*pref_set_)(Pref, int, const void*, size_t) = nullptr;
  int (*heuristic_)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, HeuristicResult*, int*) = nullptr;
  int (*matmul_)(Handle, Desc, const void*, const void*, Layout, const void*, Layout, const void*, const void*,
                 Layout, void*, Layout, const Algo*, void*, size_t, void*) = nullptr;
  const char* (*status_name_)(int) = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<GemmLibrary>> load_cublaslt(Driver* driver) {
  if (!driver) return invalid_argument("load_cublaslt: no driver");
  auto lib = std::make_unique<DlCublasLt>();
  RETURN_IF_ERROR(lib->open(driver));
  return std::unique_ptr<GemmLibrary>(std::move(lib));
}

}  // namespace llmrt::cuda
