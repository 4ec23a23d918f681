// The CUDA driver as the runtime sees it: loaded at run time with dlopen("libcuda.so.1") (one
// llmrt binary for GPU and CPU machines; nothing links libcuda), behind an interface so that the
// host-side logic (module selection, driver checks) is tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability, e.g. 9.0 for H100/H200
  uint64_t total_memory = 0;       // bytes
};

/// A device address (CUdeviceptr).
using DevicePtr = uint64_t;
/// Opaque handles of a loaded module (CUmodule) and a kernel in it (CUfunction).
using ModuleHandle = void*;
using FunctionHandle = void*;
/// An instantiated CUDA graph (CUgraphExec).
using GraphHandle = void*;
/// A CUDA event (CUevent), for timing work on the stream.
using EventHandle = void*;

class Driver {
 public:
  virtual ~Driver() = default;
  /// CUDA driver API version, cuDriverGetVersion's form: 1000 * major + 10 * minor (13000).
  virtual StatusOr<int> version() = 0;
  virtual StatusOr<std::vector<DeviceInfo>> devices() = 0;

  // The calls below act on the device chosen by use_device() (its primary context, current on
  // the calling thread). Work is ordered on one stream; copies to the host wait for it.
  virtual Status use_device(int ordinal) = 0;
  virtual StatusOr<DevicePtr> alloc(uint64_t bytes) = 0;
  virtual Status free(DevicePtr p) = 0;
  virtual Status copy_to_device(DevicePtr dst, const void* src, uint64_t bytes) = 0;
  virtual Status copy_to_host(void* dst, DevicePtr src, uint64_t bytes) = 0;
  virtual Status copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) = 0;
  /// A CUBIN, or NUL-terminated PTX text that the driver JIT-compiles.
  virtual StatusOr<ModuleHandle> load_module(const void* image, size_t size, bool ptx) = 0;
  virtual StatusOr<FunctionHandle> get_function(ModuleHandle module, const std::string& name) = 0;
  /// cuLaunchKernel over gridDim (grid, 1, 1), blockDim `block`, dynamic shared memory `shared`;
  /// params[i] points at the value of the kernel's i-th parameter.
  virtual Status launch(FunctionHandle fn, unsigned grid, const int block[3], unsigned shared, void** params) = 0;
  /// Programmatic dependent launch (cuLaunchKernelEx with
  /// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): as launch(), but the kernel may start
  /// while the previous kernel on the stream still runs, once that kernel's blocks have all
  /// executed griddepcontrol.launch_dependents. Only for kernels that execute griddepcontrol.wait
  /// before they touch memory (plan KernelImage.grid_dependency_control), right after another
  /// kernel launch. Drivers without it (has_programmatic_launch() false) launch as launch() does.
  virtual bool has_programmatic_launch() { return false; }
  virtual Status launch_programmatic(FunctionHandle fn, unsigned grid, const int block[3], unsigned shared,
                                     void** params) {
    return launch(fn, grid, block, shared, params);
  }
  virtual Status synchronize() = 0;
  /// The CUstream the calls above order work on, for libraries that enqueue their own kernels
  /// there (cuBLASLt); nullptr for drivers without one.
  virtual void* stream() { return nullptr; }

  // CUDA graphs of the stream's work (cuStreamBeginCapture / cuStreamEndCapture /
  // cuGraphInstantiate): between begin_capture() and end_capture() launches are recorded, not
  // run, each with the parameter values it was given; launch_graph() replays them in order on
  // the stream. No other device call may come between begin and end. Drivers without graphs
  // keep these defaults (Unimplemented), and callers launch step by step instead.
  virtual Status begin_capture() { return unimplemented("CUDA graphs are not supported by this driver"); }
  virtual StatusOr<GraphHandle> end_capture() { return unimplemented("CUDA graphs are not supported by this driver"); }
  virtual Status launch_graph(GraphHandle) { return unimplemented("CUDA graphs are not supported by this driver"); }
  virtual Status destroy_graph(GraphHandle) { return ok_status(); }

  // Events for timing (cuEventCreate / cuEventRecord / cuEventElapsedTime): record_event() marks
  // the point the stream's work has reached; elapsed_ms() waits for `end` to complete and gives
  // the time between the two marks in milliseconds (about half a microsecond of resolution).
  // Drivers without events keep these defaults (Unimplemented).
  virtual StatusOr<EventHandle> create_event() { return unimplemented("CUDA events are not supported by this driver"); }
  virtual Status record_event(EventHandle) { return unimplemented("CUDA events are not supported by this driver"); }
  virtual StatusOr<float> elapsed_ms(EventHandle, EventHandle) {
    return unimplemented("CUDA events are not supported by this driver");
  }
  virtual Status destroy_event(EventHandle) { return ok_status(); }
};

/// dlopen("libcuda.so.1") and cuInit(0). Errors: Unavailable "no CUDA driver: ..." when the
/// library is absent (a machine without a GPU driver), Internal naming the failing call else.
StatusOr<std::unique_ptr<Driver>> load_driver();

/// "13.0" for 13000.
std::string driver_version_name(int version);

}  // namespace llmrt::cuda
