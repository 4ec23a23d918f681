#include "runtime/engine/make_executor.h"

#include <cctype>

#include "runtime/cuda/cuda_driver.h"

namespace llmrt {
namespace {

// The ordinal of "cuda" / "cuda:N", -1 for anything else.
int cuda_ordinal(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return -1;
  int n = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(device[i]))) return -1;
    n = n * 10 + (device[i] - '0');
  }
  return n;
}

// The executor's warnings (PTX JIT instead of an exact CUBIN, a GEMM library that did not load)
// go to `note`, which the tools print.
StatusOr<std::unique_ptr<Executor>> make_cuda(const Plan& plan, const ExecutorOptions& options, int ordinal,
                                              std::string* note) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::Driver> driver, cuda::load_driver());
  cuda::CudaExecutorOptions o = options.cuda;
  o.device = ordinal;
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaExecutor> ex, cuda::CudaExecutor::create(plan, std::move(driver), o));
  if (note) {
    note->clear();
    for (const std::string& w : ex->warnings()) *note += (note->empty() ? "" : "; ") + w;
  }
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace

Status check_device_name(const std::string& device) {
  if (device == "auto" || device == "cpu" || cuda_ordinal(device) >= 0) return ok_status();
  return invalid_argument("unknown device '" + device + "': expected auto, cpu, cuda or cuda:N");
}

StatusOr<std::unique_ptr<Executor>> make_executor(const Plan& plan, const ExecutorOptions& options,
                                                  std::string* note) {
  RETURN_IF_ERROR(check_device_name(options.device));
  if (options.device == "cpu") {
    ASSIGN_OR_RETURN(std::unique_ptr<CpuExecutor> ex, CpuExecutor::create(plan, options.cpu));
    return std::unique_ptr<Executor>(std::move(ex));
  }
  if (options.device != "auto") return make_cuda(plan, options, cuda_ordinal(options.device), note);
  // auto: the GPU when it can run the plan, else the CPU with the reason.
  auto gpu = make_cuda(plan, options, 0, note);
  if (gpu.ok()) return gpu;
  if (note) *note = "running on the CPU: " + std::string(gpu.status().message());
  ASSIGN_OR_RETURN(std::unique_ptr<CpuExecutor> ex, CpuExecutor::create(plan, options.cpu));
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace llmrt
