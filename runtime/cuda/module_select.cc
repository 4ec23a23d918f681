#include "runtime/cuda/module_select.h"

#include "runtime/cuda/launch_plan.h"

#include <cctype>
#include <set>

namespace llmrt::cuda {
namespace {

std::string device_text(const DeviceInfo& d) {
  return "device " + std::to_string(d.ordinal) + " (" + d.name + ", sm_" + std::to_string(d.cc_major) +
         std::to_string(d.cc_minor) + ")";
}

std::string targets_text(const fb::Kernel& k) {
  std::string out;
  if (k.images())
    for (const fb::KernelImage* im : *k.images()) out += (out.empty() ? "" : ", ") + im->target()->str();
  return out.empty() ? "none" : out;
}

}  // namespace

bool parse_target(const std::string& name, Target* out) {
  if (name.size() < 5 || name.compare(0, 3, "sm_") != 0) return false;
  size_t i = 3;
  int n = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && n < 10000)
    n = n * 10 + (name[i++] - '0');
  if (i - 3 < 2) return false;
  Target t;
  t.major = n / 10;
  t.minor = n % 10;
  if (i < name.size()) {
    if (i + 1 != name.size() || (name[i] != 'a' && name[i] != 'f')) return false;
    t.suffix = name[i];
  }
  *out = t;
  return true;
}

StatusOr<ImageChoice> choose_image(const fb::Kernel& kernel, const DeviceInfo& device) {
  const std::string kname = kernel.name() ? kernel.name()->str() : "?";
  ImageChoice exact, compatible, ptx;
  int compatible_minor = -1, ptx_cc = -1;
  const int dev_cc = device.cc_major * 10 + device.cc_minor;
  const int n = kernel.images() ? static_cast<int>(kernel.images()->size()) : 0;
  for (int i = 0; i < n; ++i) {
    const fb::KernelImage* im = kernel.images()->Get(i);
    Target t;
    if (!parse_target(im->target()->str(), &t)) continue;
    const bool has_cubin = im->cubin() && im->cubin()->size() > 0;
    const bool has_ptx = im->ptx() && im->ptx()->size() > 0;
    const bool same = t.major == device.cc_major && t.minor == device.cc_minor;
    if (has_cubin && same && (exact.image < 0 || t.suffix == 'a'))  // sm_90a beats sm_90 on 9.0
      exact = {i, im->target()->str(), false, false};
    if (has_cubin && t.suffix != 'a' && t.major == device.cc_major && t.minor < device.cc_minor &&
        t.minor > compatible_minor) {
      compatible = {i, im->target()->str(), false, true};
      compatible_minor = t.minor;
    }
    const int cc = t.major * 10 + t.minor;
    if (has_ptx && t.suffix != 'a' && cc <= dev_cc && cc > ptx_cc) {
      ptx = {i, im->target()->str(), true, false};
      ptx_cc = cc;
    }
  }
  for (ImageChoice* c : {&exact, &compatible, &ptx})
    if (c->image >= 0) c->grid_dependency_control =
          kernel.images()->Get(static_cast<flatbuffers::uoffset_t>(c->image))->grid_dependency_control();
  if (exact.image >= 0) return exact;
  if (compatible.image >= 0) return compatible;
  if (ptx.image >= 0) return ptx;
  return failed_precondition("kernel '" + kname + "' has images for " + targets_text(kernel) +
                             ", none of which runs on " + device_text(device) +
                             ": recompile the plan with --target sm_" + std::to_string(dev_cc));
}

StatusOr<PlanCheck> check_plan(const fb::Plan& plan, const DeviceInfo& device, int driver_version) {
  const int n = plan.kernels() ? static_cast<int>(plan.kernels()->size()) : 0;
  bool any_image = false;
  for (int i = 0; i < n; ++i)
    any_image |= plan.kernels()->Get(i)->images() && plan.kernels()->Get(i)->images()->size() > 0;
  if (!any_image)
    return failed_precondition("the plan has no GPU kernel images (compiled with --target none or "
                               "without NVRTC): recompile with --target sm_" +
                               std::to_string(device.cc_major * 10 + device.cc_minor));
  if (plan.cuda_min_driver_version() > driver_version)
    return failed_precondition("the plan's kernel images need a CUDA driver for CUDA " +
                               driver_version_name(plan.cuda_min_driver_version()) +
                               " or newer; this driver supports CUDA " +
                               driver_version_name(driver_version) +
                               ": update the driver, or compile the plan with an older toolkit");
  PlanCheck out;
  std::set<std::string> noted;
  for (int i = 0; i < n; ++i) {
    const fb::Kernel& k = *plan.kernels()->Get(i);
    // Launch geometry the runtime will use: a known grid rule and a block of 1..1024 threads.
    const std::string kname = k.name() ? k.name()->str() : "#" + std::to_string(i);
    auto rule = parse_grid_rule(k.grid_rule() ? k.grid_rule()->string_view() : std::string_view());
    if (!rule.ok()) return rule.status().with_context("kernel '" + kname + "'");
    int64_t threads = 1;
    if (!k.block_dim() || k.block_dim()->size() != 3) threads = 0;
    else
      for (int d : *k.block_dim()) threads = d >= 1 && d <= 1024 ? threads * d : 0;
    if (threads < 1 || threads > 1024)
      return invalid_argument("kernel '" + kname + "' has a block shape outside 1..1024 threads");
    ASSIGN_OR_RETURN(ImageChoice c, choose_image(k, device));
    if ((c.jit || c.compatible) && noted.insert(c.target).second)
      out.warnings.push_back(
          c.jit ? "no CUBIN for " + device_text(device) + ": the driver JIT-compiles the " + c.target +
                      " PTX at load (slower start); compile the plan with --target sm_" +
                      std::to_string(device.cc_major * 10 + device.cc_minor)
                : "running " + c.target + " CUBINs on " + device_text(device) +
                      " (binary compatible; --target sm_" +
                      std::to_string(device.cc_major * 10 + device.cc_minor) + " may be faster)");
    out.choices.push_back(std::move(c));
  }
  return out;
}

}  // namespace llmrt::cuda
