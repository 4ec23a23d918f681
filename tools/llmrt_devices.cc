// llmrt devices [PLAN]: the CUDA driver and devices this machine has (libcuda loaded at run time),
// and with a plan, for each device which kernel image every kernel would load (exact CUBIN,
// compatible CUBIN, PTX JIT) or why none can. A machine without a driver is not an error here:
// the command says so and exits 0 (llmrt then runs on the CPU); a plan that cannot run on a
// present device exits 1. With a plan it also states the device memory plan (weights,
// activations, batch buffers, KV-cache blocks) at --memory-utilization before anything is loaded.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/gemm_library.h"
#include "runtime/cuda/launch_plan.h"
#include "runtime/cuda/module_select.h"
#include "runtime/plan/plan_file.h"
#include "tools/llmrt_commands.h"

namespace llmrt_tools {

Subcommand add_devices_command(CLI::App& app) {
  auto plan_path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "devices", "CUDA driver and devices (loaded at run time); with a plan, the kernel image each device loads");
  cmd->add_option("plan", *plan_path, "a plan to check against each device");
  auto utilization = std::make_shared<double>(0.9);
  cmd->add_option("--memory-utilization", *utilization,
                  "share of each device's memory for the plan: weights, activations, then KV cache")
      ->check(CLI::Range(0.01, 1.0));
  return {cmd, [plan_path, utilization]() -> int {
            std::unique_ptr<llmrt::Plan> plan;
            if (!plan_path->empty()) {
              auto p = llmrt::Plan::open(*plan_path, /*generate_synthetic=*/false);
              if (!p.ok()) return fail(p.status());
              plan = std::move(p).value();
              std::string targets;
              if (const auto* t = plan->fb().compile() ? plan->fb().compile()->targets() : nullptr)
                for (const auto* s : *t) targets += (targets.empty() ? "" : ", ") + s->str();
              const int kernels = plan->fb().kernels() ? static_cast<int>(plan->fb().kernels()->size()) : 0;
              std::printf("plan: %d kernels, images for %s", kernels, targets.empty() ? "no GPU target" : targets.c_str());
              if (plan->fb().cuda_min_driver_version() > 0)
                std::printf(", need a driver for CUDA %s+",
                            llmrt::cuda::driver_version_name(plan->fb().cuda_min_driver_version()).c_str());
              std::printf("\n");
            }
            auto driver = llmrt::cuda::load_driver();
            if (!driver.ok()) {
              std::printf("%s\nllmrt runs on the CPU here.\n", std::string(driver.status().message()).c_str());
              return 0;
            }
            auto version = (*driver)->version();
            if (!version.ok()) return fail(version.status());
            auto devs = (*driver)->devices();
            if (!devs.ok()) return fail(devs.status());
            std::printf("CUDA driver %s, %zu device(s)\n", llmrt::cuda::driver_version_name(*version).c_str(),
                        devs->size());
            int status = 0;
            for (const auto& d : *devs) {
              std::printf("  %d: %s, sm_%d%d, %.1f GiB\n", d.ordinal, d.name.c_str(), d.cc_major, d.cc_minor,
                          static_cast<double>(d.total_memory) / (1u << 30));
              if (!plan) continue;
              auto check = llmrt::cuda::check_plan(plan->fb(), d, *version);
              if (!check.ok()) {
                std::printf("     plan: cannot run: %s\n", std::string(check.status().message()).c_str());
                status = 1;
                continue;
              }
              std::map<std::string, int> per;
              for (const auto& c : check->choices) per[c.target + (c.jit ? " PTX (JIT)" : " CUBIN")]++;
              for (const auto& [what, n] : per) std::printf("     plan: %d kernels from %s\n", n, what.c_str());
              for (const auto& w : check->warnings) std::printf("     warning: %s\n", w.c_str());
              const auto* mem = plan->fb().memory();
              const int max_tokens = mem ? mem->max_tokens_per_step() : 0;
              // Steps that call cuBLASLt: its workspace and input copies, as the executor plans
              // them when the library loads.
              auto m = llmrt::cuda::plan_device_memory(
                  plan->fb(), d, *utilization, max_tokens, mem ? mem->max_seqs_per_step() : 0,
                  llmrt::cuda::gemm_library_bytes(plan->fb(), max_tokens, llmrt::cuda::kCublasLtWorkspaceBytes));
              if (!m.ok()) {
                std::printf("     memory: %s\n", std::string(m.status().message()).c_str());
                status = 1;
                continue;
              }
              const int bs = plan->fb().kv() ? plan->fb().kv()->block_size() : 0;
              std::printf("     memory at %.2f: weights %s, activations %s, batch and logits %s, KV cache %s "
                          "(%lld blocks, %lld tokens)\n",
                          *utilization, llmrt::cuda::format_bytes(m->weights).c_str(),
                          llmrt::cuda::format_bytes(m->activations).c_str(),
                          llmrt::cuda::format_bytes(m->batch).c_str(), llmrt::cuda::format_bytes(m->kv).c_str(),
                          static_cast<long long>(m->kv_blocks), static_cast<long long>(m->kv_blocks) * bs);
            }
            return status;
          }};
}

}  // namespace llmrt_tools
