#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>

namespace llmrt::cuda {
namespace {

// The few driver API entry points used here, declared with their documented C signatures (CUDA
// Driver API reference); CUresult 0 is CUDA_SUCCESS. cuda.h is not included: the runtime builds
// without the toolkit.
using CUresult = int;
using CUdevice = int;
constexpr int kAttrCcMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

// cuLaunchKernelEx's configuration (CUDA 12.0+), laid out as cuda.h declares CUlaunchAttribute
// (an id, padding to 8 bytes, a 64-byte value union) and CUlaunchConfig.
constexpr int kLaunchAttrProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
struct LaunchAttribute {
  int id = 0;
  char pad[4] = {};
  alignas(8) unsigned char value[64] = {};  // programmaticStreamSerializationAllowed: an int at 0
};
struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared = 0;
  void* stream = nullptr;
  LaunchAttribute* attrs = nullptr;
  unsigned num_attrs = 0;
};
static_assert(sizeof(LaunchAttribute) == 72 && offsetof(LaunchAttribute, value) == 8, "CUlaunchAttribute layout");
static_assert(offsetof(LaunchConfig, stream) == 32 && offsetof(LaunchConfig, attrs) == 40 &&
                  offsetof(LaunchConfig, num_attrs) == 48 && sizeof(LaunchConfig) == 56,
              "CUlaunchConfig layout");

class DlDriver : public Driver {
 public:
  ~DlDriver() override {
    if (lib_) dlclose(lib_);
  }

  Status open() {
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      const char* e = dlerror();
      return unavailable(std::string("no CUDA driver: cannot load libcuda.so.1 (") + (e ? e : "?") + ")");
    }
    RETURN_IF_ERROR(sym("cuInit", &init_));
    RETURN_IF_ERROR(sym("cuDriverGetVersion", &version_));
    RETURN_IF_ERROR(sym("cuDeviceGetCount", &count_));
    RETURN_IF_ERROR(sym("cuDeviceGet", &get_));
    RETURN_IF_ERROR(sym("cuDeviceGetName", &name_));
    RETURN_IF_ERROR(sym("cuDeviceGetAttribute", &attr_));
    RETURN_IF_ERROR(sym("cuDeviceTotalMem_v2", &mem_));
    RETURN_IF_ERROR(sym("cuDevicePrimaryCtxRetain", &retain_));
    RETURN_IF_ERROR(sym("cuCtxSetCurrent", &set_current_));
    RETURN_IF_ERROR(sym("cuCtxGetCurrent", &get_current_));
    RETURN_IF_ERROR(sym("cuMemAlloc_v2", &alloc_));
    RETURN_IF_ERROR(sym("cuMemFree_v2", &free_));
    RETURN_IF_ERROR(sym("cuMemcpyHtoD_v2", &htod_));
    RETURN_IF_ERROR(sym("cuMemcpyDtoH_v2", &dtoh_));
    RETURN_IF_ERROR(sym("cuMemcpyDtoD_v2", &dtod_));
    RETURN_IF_ERROR(sym("cuModuleLoadData", &load_));
    RETURN_IF_ERROR(sym("cuModuleGetFunction", &function_));
    RETURN_IF_ERROR(sym("cuLaunchKernel", &launch_));
    RETURN_IF_ERROR(sym("cuCtxSynchronize", &sync_));
    RETURN_IF_ERROR(sym("cuStreamCreate", &stream_create_));
    // Graphs are optional: without them every step is launched on its own.
    graphs_ = optional("cuStreamBeginCapture_v2", &begin_capture_) &&
              optional("cuStreamEndCapture", &end_capture_) &&
              optional("cuGraphInstantiateWithFlags", &instantiate_) && optional("cuGraphLaunch", &graph_launch_) &&
              optional("cuGraphExecDestroy", &exec_destroy_) && optional("cuGraphDestroy", &graph_destroy_);
    // Events (profiling) are optional too; cuEventElapsedTime_v2 is the CUDA 12.8+ name of the
    // same call.
    events_ = optional("cuEventCreate", &event_create_) && optional("cuEventRecord", &event_record_) &&
              optional("cuEventSynchronize", &event_sync_) &&
              (optional("cuEventDestroy_v2", &event_destroy_) || optional("cuEventDestroy", &event_destroy_)) &&
              (optional("cuEventElapsedTime_v2", &event_elapsed_) || optional("cuEventElapsedTime", &event_elapsed_));
    // Programmatic dependent launch: cuLaunchKernelEx (CUDA 12.0+); without it, plain launches.
    programmatic_ = optional("cuLaunchKernelEx", &launch_ex_);
    error_name_ = reinterpret_cast<decltype(error_name_)>(dlsym(lib_, "cuGetErrorName"));
    return check(init_(0), "cuInit");
  }

  Status use_device(int ordinal) override {
    CUdevice d = 0;
    RETURN_IF_ERROR(check(get_(&d, ordinal), "cuDeviceGet"));
    void* ctx = nullptr;
    RETURN_IF_ERROR(check(retain_(&ctx, d), "cuDevicePrimaryCtxRetain"));
    ctx_ = ctx;
    RETURN_IF_ERROR(check(set_current_(ctx), "cuCtxSetCurrent"));
    // A stream of our own (graphs cannot capture the legacy default stream). Flags 0 make it a
    // blocking stream: the synchronous copies, on the legacy stream, wait for its work and it
    // waits for theirs, so the order of calls is the order of work.
    stream_ = nullptr;
    return check(stream_create_(&stream_, 0), "cuStreamCreate");
  }
  StatusOr<DevicePtr> alloc(uint64_t bytes) override {
    RETURN_IF_ERROR(bind());
    DevicePtr p = 0;
    CUresult r = alloc_(&p, bytes);
    if (r == 2)  // CUDA_ERROR_OUT_OF_MEMORY
      return resource_exhausted("cuMemAlloc of " + std::to_string(bytes) + " bytes: out of device memory");
    RETURN_IF_ERROR(check(r, "cuMemAlloc"));
    return p;
  }
  Status free(DevicePtr p) override {
    RETURN_IF_ERROR(bind());
    return check(free_(p), "cuMemFree");
  }
  Status copy_to_device(DevicePtr dst, const void* src, uint64_t bytes) override {
    RETURN_IF_ERROR(bind());
    return check(htod_(dst, src, bytes), "cuMemcpyHtoD");
  }
  Status copy_to_host(void* dst, DevicePtr src, uint64_t bytes) override {
    RETURN_IF_ERROR(bind());
    return check(dtoh_(dst, src, bytes), "cuMemcpyDtoH");
  }
  Status copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) override {
    RETURN_IF_ERROR(bind());
    return check(dtod_(dst, src, bytes), "cuMemcpyDtoD");
  }
  StatusOr<ModuleHandle> load_module(const void* image, size_t, bool) override {
    RETURN_IF_ERROR(bind());
    void* m = nullptr;
    RETURN_IF_ERROR(check(load_(&m, image), "cuModuleLoadData"));
    return m;
  }
  StatusOr<FunctionHandle> get_function(ModuleHandle module, const std::string& name) override {
    void* f = nullptr;
    RETURN_IF_ERROR(check(function_(&f, module, name.c_str()), ("cuModuleGetFunction " + name).c_str()));
    return f;
  }
  Status launch(FunctionHandle fn, unsigned grid, const int block[3], unsigned shared, void** params) override {
    RETURN_IF_ERROR(bind());
    return check(launch_(fn, grid, 1, 1, static_cast<unsigned>(block[0]), static_cast<unsigned>(block[1]),
                         static_cast<unsigned>(block[2]), shared, stream_, params, nullptr),
                 "cuLaunchKernel");
  }
  bool has_programmatic_launch() override { return programmatic_; }
  Status launch_programmatic(FunctionHandle fn, unsigned grid, const int block[3], unsigned shared,
                             void** params) override {
    if (!programmatic_) return launch(fn, grid, block, shared, params);
    RETURN_IF_ERROR(bind());
    LaunchAttribute attr;
    attr.id = kLaunchAttrProgrammaticStreamSerialization;
    const int allowed = 1;
    std::memcpy(attr.value, &allowed, sizeof(allowed));
    LaunchConfig config;
    config.grid[0] = grid;
    for (int d = 0; d < 3; ++d) config.block[d] = static_cast<unsigned>(block[d]);
    config.shared = shared;
    config.stream = stream_;
    config.attrs = &attr;
    config.num_attrs = 1;
    return check(launch_ex_(&config, fn, params, nullptr), "cuLaunchKernelEx");
  }
  Status synchronize() override {
    RETURN_IF_ERROR(bind());
    return check(sync_(), "cuCtxSynchronize");
  }
  void* stream() override { return stream_; }

  Status begin_capture() override {
    RETURN_IF_ERROR(bind());
    if (!graphs_) return unimplemented("this CUDA driver has no graph API");
    return check(begin_capture_(stream_, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */), "cuStreamBeginCapture");
  }
  StatusOr<GraphHandle> end_capture() override {
    RETURN_IF_ERROR(bind());
    if (!graphs_) return unimplemented("this CUDA driver has no graph API");
    void* graph = nullptr;
    RETURN_IF_ERROR(check(end_capture_(stream_, &graph), "cuStreamEndCapture"));
    void* exec = nullptr;
    const CUresult r = instantiate_(&exec, graph, 0);
    graph_destroy_(graph);  // the instance keeps what it needs
    RETURN_IF_ERROR(check(r, "cuGraphInstantiateWithFlags"));
    return exec;
  }
  Status launch_graph(GraphHandle g) override {
    RETURN_IF_ERROR(bind());
    return check(graph_launch_(g, stream_), "cuGraphLaunch");
  }
  Status destroy_graph(GraphHandle g) override {
    RETURN_IF_ERROR(bind());
    return check(exec_destroy_(g), "cuGraphExecDestroy");
  }

  StatusOr<EventHandle> create_event() override {
    RETURN_IF_ERROR(bind());
    if (!events_) return unimplemented("this CUDA driver has no event API");
    void* e = nullptr;
    RETURN_IF_ERROR(check(event_create_(&e, 0 /* CU_EVENT_DEFAULT: timed */), "cuEventCreate"));
    return e;
  }
  Status record_event(EventHandle e) override {
    RETURN_IF_ERROR(bind());
    if (!events_) return unimplemented("this CUDA driver has no event API");
    return check(event_record_(e, stream_), "cuEventRecord");
  }
  StatusOr<float> elapsed_ms(EventHandle start, EventHandle end) override {
    RETURN_IF_ERROR(bind());
    if (!events_) return unimplemented("this CUDA driver has no event API");
    RETURN_IF_ERROR(check(event_sync_(end), "cuEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(check(event_elapsed_(&ms, start, end), "cuEventElapsedTime"));
    return ms;
  }
  Status destroy_event(EventHandle e) override {
    RETURN_IF_ERROR(bind());
    if (!events_) return ok_status();
    return check(event_destroy_(e), "cuEventDestroy");
  }

  StatusOr<int> version() override {
    int v = 0;
    RETURN_IF_ERROR(check(version_(&v), "cuDriverGetVersion"));
    return v;
  }

  StatusOr<std::vector<DeviceInfo>> devices() override {
    int n = 0;
    RETURN_IF_ERROR(check(count_(&n), "cuDeviceGetCount"));
    std::vector<DeviceInfo> out;
    for (int i = 0; i < n; ++i) {
      CUdevice d = 0;
      RETURN_IF_ERROR(check(get_(&d, i), "cuDeviceGet"));
      DeviceInfo info;
      info.ordinal = i;
      char name[256] = {};
      RETURN_IF_ERROR(check(name_(name, sizeof(name) - 1, d), "cuDeviceGetName"));
      info.name = name;
      RETURN_IF_ERROR(check(attr_(&info.cc_major, kAttrCcMajor, d), "cuDeviceGetAttribute"));
      RETURN_IF_ERROR(check(attr_(&info.cc_minor, kAttrCcMinor, d), "cuDeviceGetAttribute"));
      size_t bytes = 0;
      RETURN_IF_ERROR(check(mem_(&bytes, d), "cuDeviceTotalMem"));
      info.total_memory = bytes;
      out.push_back(std::move(info));
    }
    return out;
  }

 private:
  // The driver API's current context is per thread, and the serve engine calls from a thread of
  // its own: every call that needs the context makes it current first (once per thread; a cheap
  // query after that).
  Status bind() {
    void* cur = nullptr;
    if (ctx_ && (get_current_(&cur) != 0 || cur != ctx_)) return check(set_current_(ctx_), "cuCtxSetCurrent");
    return ok_status();
  }

  template <typename F>
  Status sym(const char* name, F** out) {
    *out = reinterpret_cast<F*>(dlsym(lib_, name));
    if (!*out) return internal_error(std::string("libcuda.so.1 has no ") + name + " (driver too old?)");
    return ok_status();
  }
  template <typename F>
  bool optional(const char* name, F** out) {
    *out = reinterpret_cast<F*>(dlsym(lib_, name));
    return *out != nullptr;
  }
  Status check(CUresult r, const char* call) const {
    if (r == 0) return ok_status();
    const char* name = nullptr;
    if (error_name_) error_name_(r, &name);
    return internal_error(std::string(call) + " failed with CUresult " + std::to_string(r) +
                          (name ? std::string(" (") + name + ")" : std::string()));
  }

  void* lib_ = nullptr;
  CUresult (*init_)(unsigned) = nullptr;
  CUresult (*version_)(int*) = nullptr;
  CUresult (*count_)(int*) = nullptr;
  CUresult (*get_)(CUdevice*, int) = nullptr;
  CUresult (*name_)(char*, int, CUdevice) = nullptr;
  CUresult (*attr_)(int*, int, CUdevice) = nullptr;
  CUresult (*mem_)(size_t*, CUdevice) = nullptr;
  CUresult (*retain_)(void**, CUdevice) = nullptr;
  CUresult (*set_current_)(void*) = nullptr;
  CUresult (*get_current_)(void**) = nullptr;
  void* ctx_ = nullptr;  // the device's primary context (use_device)
  CUresult (*alloc_)(DevicePtr*, size_t) = nullptr;
  CUresult (*free_)(DevicePtr) = nullptr;
  CUresult (*htod_)(DevicePtr, const void*, size_t) = nullptr;
  CUresult (*dtoh_)(void*, DevicePtr, size_t) = nullptr;
  CUresult (*dtod_)(DevicePtr, DevicePtr, size_t) = nullptr;
  CUresult (*load_)(void**, const void*) = nullptr;
  CUresult (*function_)(void**, void*, const char*) = nullptr;
  CUresult (*launch_)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                      void**) = nullptr;
  CUresult (*launch_ex_)(const LaunchConfig*, void*, void**, void**) = nullptr;
  bool programmatic_ = false;
  CUresult (*sync_)() = nullptr;
  CUresult (*stream_create_)(void**, unsigned) = nullptr;
  CUresult (*begin_capture_)(void*, int) = nullptr;
  CUresult (*end_capture_)(void*, void**) = nullptr;
  CUresult (*instantiate_)(void**, void*, unsigned long long) = nullptr;
  CUresult (*graph_launch_)(void*, void*) = nullptr;
  CUresult (*exec_destroy_)(void*) = nullptr;
  CUresult (*graph_destroy_)(void*) = nullptr;
  bool graphs_ = false;
  CUresult (*event_create_)(void**, unsigned) = nullptr;
  CUresult (*event_record_)(void*, void*) = nullptr;
  CUresult (*event_sync_)(void*) = nullptr;
  CUresult (*event_destroy_)(void*) = nullptr;
  CUresult (*event_elapsed_)(float*, void*, void*) = nullptr;
  bool events_ = false;
  void* stream_ = nullptr;  // CUstream
  CUresult (*error_name_)(CUresult, const char**) = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<Driver>> load_driver() {
  auto d = std::make_unique<DlDriver>();
  RETURN_IF_ERROR(d->open());
  return std::unique_ptr<Driver>(std::move(d));
}

std::string driver_version_name(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace llmrt::cuda
