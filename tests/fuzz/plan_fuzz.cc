// libFuzzer target: the plan reader (header, FlatBuffer verifier, semantic checks) and the
// executor's decoding of the program must reject any bytes cleanly.
#include <cstddef>
#include <cstdint>

#include "runtime/engine/cpu_executor.h"
#include "runtime/plan/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto plan = llmrt::Plan::from_bytes(data, size, /*max_synthetic_bytes=*/uint64_t{64} << 20);
  if (!plan.ok()) return 0;
  (void)(*plan)->verify_weights_hash();
  llmrt::CpuExecutorOptions options;
  options.threads = 1;
  options.max_tokens_per_step = 8;
  options.max_seqs_per_step = 2;
  options.num_kv_blocks = 4;
  options.max_memory_bytes = uint64_t{256} << 20;  // a corrupted plan may ask for anything
  auto executor = llmrt::CpuExecutor::create(**plan, options);
  (void)executor;
  return 0;
}
