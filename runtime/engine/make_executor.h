// Backend choice for --device auto|cpu|cuda[:N]: "cpu" is the embedded CPU executor; "cuda" the
// plan's GPU kernels on device N (libcuda loaded at run time), an error when that cannot run;
// "auto" takes CUDA when a driver, a device and kernel images for it exist, else the CPU, and
// says why in *note.
#pragma once

#include <memory>
#include <string>

#include "runtime/cuda/cuda_executor.h"
#include "runtime/engine/cpu_executor.h"
#include "runtime/engine/executor.h"

namespace llmrt {

struct ExecutorOptions {
  std::string device = "cpu";
  CpuExecutorOptions cpu;
  cuda::CudaExecutorOptions cuda;  // .device is set from "cuda:N"
};

/// Errors: an unknown device name; with "cuda", whatever keeps the plan off the GPU.
StatusOr<std::unique_ptr<Executor>> make_executor(const Plan& plan, const ExecutorOptions& options,
                                                  std::string* note = nullptr);

/// OK for "auto", "cpu", "cuda" and "cuda:N".
Status check_device_name(const std::string& device);

}  // namespace llmrt
