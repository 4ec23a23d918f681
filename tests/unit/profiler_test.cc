// Profiler aggregation (per op kind / per kernel, percentages, sorting), the trace's structure, and
// the executor hook on the tiny plan.
#include "runtime/engine/profiler.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "runtime/engine/cpu_executor.h"
#include "tests/unit/tiny_plan.h"

namespace llmrt {
namespace {

std::vector<Profiler::StepInfo> program() {
  return {{"Embedding", "step 0 (Embedding 'embed_tokens')", ""},
          {"Linear", "step 1 (Linear 'layers.0.q_proj')", ""},
          {"Linear", "step 2 (Linear 'layers.1.q_proj')", ""},
          {"Linear", "step 3 (Linear 'layers.10.o_proj')", ""},
          {"Logits", "step 4 (Logits)", ""}};
}

TEST(Profiler, KernelNamesFoldLayerIndices) {
  auto name = [](const char* op, const char* where, const char* detail = "") {
    return Profiler::kernel_name({op, where, detail});
  };
  EXPECT_EQ(name("Linear", "step 12 (Linear 'layers.0.q_proj')"), "Linear 'layers.*.q_proj'");
  EXPECT_EQ(name("Linear", "step 12 (Linear 'layers.0.q_proj')", "8->16"), "Linear 8->16 'layers.*.q_proj'");
  // llmc's names: the MLIR op name, then the location.
  EXPECT_EQ(name("Linear", "step 3 (Linear 'llm.linear loc(unknown)')", "8->16"), "Linear 8->16");
  EXPECT_EQ(name("Rope", "step 3 (Rope 'llm.rope loc(\"model.layers.17\")')"), "Rope 'loc(\"model.layers.*\")'");
  EXPECT_EQ(name("Add", "step 3 (Add 'h.3')"), "Add 'h.*'");
  // Digits that are not a whole path component stay.
  EXPECT_EQ(name("Linear", "step 1 (Linear 'w2.q8_proj')"), "Linear 'w2.q8_proj'");
  EXPECT_EQ(name("Logits", "step 4 (Logits)"), "Logits");
  EXPECT_EQ(name("", ""), "?");
}

TEST(Profiler, AggregatesPerOpAndKernel) {
  Profiler p;
  p.set_program(program());
  // Two forward() calls of 1000 ns each; step times in ns.
  const int64_t step_ns[2][5] = {{10, 200, 300, 100, 50}, {30, 100, 100, 100, 50}};
  int64_t t = 1000;
  for (int f = 0; f < 2; ++f) {
    const int64_t begin = t;
    for (int s = 0; s < 5; ++s) {
      p.record_step(s, 4, t, t + step_ns[f][s]);
      t += step_ns[f][s];
    }
    p.end_forward(4, 2, begin, begin + 1000);
    t = begin + 1000;
  }
  p.record_step(7, 4, 0, 1000);  // out of range: ignored
  const ProfileTable tab = p.table();
  EXPECT_EQ(tab.forwards, 2);
  EXPECT_EQ(tab.rows, 8);
  EXPECT_EQ(tab.forward_ns, 2000);
  EXPECT_EQ(tab.outside_ns, 2000 - (660 + 380));
  ASSERT_EQ(tab.by_op.size(), 3u);
  EXPECT_EQ(tab.by_op[0].name, "Linear");
  EXPECT_EQ(tab.by_op[0].calls, 6);
  EXPECT_EQ(tab.by_op[0].total_ns, 900);
  EXPECT_DOUBLE_EQ(tab.by_op[0].mean_us, 0.15);
  EXPECT_DOUBLE_EQ(tab.by_op[0].percent, 45.0);
  EXPECT_EQ(tab.by_op[1].name, "Logits");
  EXPECT_EQ(tab.by_op[1].total_ns, 100);
  EXPECT_EQ(tab.by_op[2].name, "Embedding");
  EXPECT_EQ(tab.by_op[2].total_ns, 40);
  std::map<std::string, ProfileRow> k;
  for (const auto& r : tab.by_kernel) k[r.name] = r;
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k["Linear 'layers.*.q_proj'"].calls, 4);
  EXPECT_EQ(k["Linear 'layers.*.q_proj'"].total_ns, 700);
  EXPECT_EQ(k["Linear 'layers.*.o_proj'"].total_ns, 200);
  EXPECT_EQ(tab.by_kernel.front().name, "Linear 'layers.*.q_proj'");
  for (size_t i = 1; i < tab.by_kernel.size(); ++i)
    EXPECT_GE(tab.by_kernel[i - 1].total_ns, tab.by_kernel[i].total_ns);

  const std::string text = p.format_table();
  EXPECT_NE(text.find("profile: 2 forward() calls, 8 rows"), std::string::npos) << text;
  EXPECT_NE(text.find("Linear 'layers.*.q_proj'"), std::string::npos) << text;
  EXPECT_NE(p.format_table(1).find("(3 more)"), std::string::npos) << p.format_table(1);

  p.reset_stats();
  EXPECT_EQ(p.table().forwards, 0);
  EXPECT_TRUE(p.table().by_op.empty());
  EXPECT_EQ(p.num_events(), 0u);  // keep_events is off by default
}

TEST(Profiler, WeightBandwidthPerOpAndKernel) {
  // Steps that read weights: bytes x calls over their time (B/ns = GB/s), folded like the times;
  // the column appears only where some row has weights.
  Profiler p;
  std::vector<Profiler::StepInfo> steps = program();
  steps[1].weight_bytes = 4000;  // layers.0.q_proj
  steps[2].weight_bytes = 2000;  // layers.1.q_proj (same kernel name)
  steps[4].weight_bytes = 1000;  // logits
  p.set_program(steps);
  const int64_t step_ns[5] = {10, 100, 100, 100, 50};
  for (int f = 0; f < 2; ++f) {
    int64_t t = 1000 * (f + 1);
    for (int s = 0; s < 5; ++s) {
      p.record_step(s, 1, t, t + step_ns[s]);
      t += step_ns[s];
    }
    p.end_forward(1, 1, 1000 * (f + 1), 1000 * (f + 1) + 500);
  }
  const ProfileTable tab = p.table();
  std::map<std::string, ProfileRow> op, k;
  for (const auto& r : tab.by_op) op[r.name] = r;
  for (const auto& r : tab.by_kernel) k[r.name] = r;
  EXPECT_EQ(op["Linear"].weight_bytes, 2u * (4000 + 2000));
  EXPECT_DOUBLE_EQ(op["Linear"].weight_gb_per_s, 12000.0 / 600);
  EXPECT_DOUBLE_EQ(k["Linear 'layers.*.q_proj'"].weight_gb_per_s, 12000.0 / 400);
  EXPECT_EQ(k["Linear 'layers.*.o_proj'"].weight_bytes, 0u);
  EXPECT_DOUBLE_EQ(op["Logits"].weight_gb_per_s, 2000.0 / 100);
  EXPECT_EQ(op["Embedding"].weight_bytes, 0u);
  const std::string text = p.format_table();
  EXPECT_NE(text.find("weights GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("30.0"), std::string::npos) << text;  // the q_proj kernel's 30 GB/s
  Profiler none;
  none.set_program(program());
  none.record_step(1, 1, 0, 10);
  none.end_forward(1, 1, 0, 20);
  EXPECT_EQ(none.format_table().find("GB/s"), std::string::npos) << none.format_table();
}

TEST(Profiler, TraceKeepsEventsUpToTheCap) {
  // Room for two forward() calls of 5 steps (6 events each) but not three.
  Profiler p(ProfilerOptions{.keep_events = true, .max_events = 14});
  p.set_program(program());
  p.set_phase("a \"quoted\"\n phase");
  for (int f = 0; f < 3; ++f) {
    const int64_t begin = p.begin_forward();
    for (int s = 0; s < 5; ++s) p.record_step(s, 3, begin + s, begin + s + 1);
    p.end_forward(3, 1, begin, begin + 10);
  }
  EXPECT_EQ(p.num_events(), 12u);
  EXPECT_EQ(p.dropped_forwards(), 1);
  EXPECT_EQ(p.table().forwards, 3);  // statistics count every call
  const nlohmann::json j = nlohmann::json::parse(p.trace_json());
  int forwards = 0, steps = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["args"]["phase"], "a \"quoted\"\n phase");
    EXPECT_EQ(e["args"]["rows"], 3);
    if (e["name"] == "forward") {
      ++forwards;
      EXPECT_EQ(e["args"]["seqs"], 1);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.01);
    } else {
      ++steps;
      EXPECT_TRUE(e["args"]["step"].get<std::string>().rfind("step ", 0) == 0);
    }
  }
  EXPECT_EQ(forwards, 2);
  EXPECT_EQ(steps, 10);
  EXPECT_EQ(j["otherData"]["dropped_forwards"], 1);
  EXPECT_FALSE(p.write_trace("/nonexistent-dir/t.json").ok());
}

TEST(Profiler, ExecutorRecordsEveryStepOnlyWhenAttached) {
  testing::TinyPlanConfig cfg;
  auto plan = testing::open_tiny_plan(testing::make_tiny_plan(cfg));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  CpuExecutorOptions opt;
  opt.threads = 1;
  auto ex = CpuExecutor::create(**plan, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const int vocab = (*ex)->vocab_size();
  std::vector<float> logits(vocab);
  auto step = [&](int pos) {
    const int32_t token = pos + 1, position = pos, qs[2] = {0, 1}, ctx = pos + 1, table = 0, li = 0;
    const int64_t slot = pos;
    BatchInput b;
    b.tokens = {&token, 1};
    b.positions = {&position, 1};
    b.kv_slots = {&slot, 1};
    b.query_start = qs;
    b.context_lens = {&ctx, 1};
    b.block_tables = {&table, 1};
    b.max_blocks_per_seq = 1;
    b.logits_indices = {&li, 1};
    return (*ex)->forward(b, logits.data());
  };
  Profiler p(ProfilerOptions{.keep_events = true});
  ASSERT_TRUE(step(0).ok());
  (*ex)->set_profiler(&p);
  const size_t steps = p.num_steps();
  ASSERT_GT(steps, 0u);
  ASSERT_TRUE(step(1).ok());
  ASSERT_TRUE(step(2).ok());
  (*ex)->set_profiler(nullptr);
  ASSERT_TRUE(step(3).ok());
  const ProfileTable t = p.table();
  EXPECT_EQ(t.forwards, 2);
  EXPECT_EQ(t.rows, 2);
  int64_t calls = 0;
  for (const auto& r : t.by_op) calls += r.calls;
  EXPECT_EQ(calls, static_cast<int64_t>(2 * steps));
  EXPECT_EQ(p.num_events(), 2 * (steps + 1));
  // Linear and Logits steps read their weights whole on every call.
  for (const auto& r : t.by_op)
    if (r.name == "Linear" || r.name == "Logits") {
      EXPECT_GT(r.weight_bytes, 0u) << r.name;
    } else if (r.name == "Embedding") {
      EXPECT_EQ(r.weight_bytes, 0u);
    }
}

}  // namespace
}  // namespace llmrt
