#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

namespace llmrt::cuda {
namespace {

// The few driver API entry points used here, declared with their documented C signatures (CUDA
// Driver API reference); CUresult 0 is CUDA_SUCCESS. cuda.h is not included: the runtime builds
// without the toolkit.
using CUresult = int;
using CUdevice = int;
constexpr int kAttrCcMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

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
    return check(init_(0), "cuInit");
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
  template <typename F>
  Status sym(const char* name, F** out) {
    *out = reinterpret_cast<F*>(dlsym(lib_, name));
    if (!*out) return internal_error(std::string("libcuda.so.1 has no ") + name + " (driver too old?)");
    return ok_status();
  }
  static Status check(CUresult r, const char* call) {
    if (r == 0) return ok_status();
    return internal_error(std::string(call) + " failed with CUresult " + std::to_string(r));
  }

  void* lib_ = nullptr;
  CUresult (*init_)(unsigned) = nullptr;
  CUresult (*version_)(int*) = nullptr;
  CUresult (*count_)(int*) = nullptr;
  CUresult (*get_)(CUdevice*, int) = nullptr;
  CUresult (*name_)(char*, int, CUdevice) = nullptr;
  CUresult (*attr_)(int*, int, CUdevice) = nullptr;
  CUresult (*mem_)(size_t*, CUdevice) = nullptr;
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
