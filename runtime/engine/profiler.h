// Per-step profiling of an executor's forward() (`llmrt run --profile`, `llmrt bench --profile`,
// `--trace FILE`). The CPU executor times each step with the steady clock when a profiler is
// attached and does nothing extra when none is (one branch on a null pointer per step); the CUDA
// executor times each kernel on the device with CUDA events and passes the intervals, placed
// after the forward's start on the host clock.
//
// Aggregation is per step index (calls, total time), folded on demand into a table per op kind
// and per kernel (op, shape detail and the step's name with layer indices folded:
// "Linear 576->1728 'layers.*.qkv_proj'"), sorted by total time, each with its share of the time
// spent in forward(). With keep_events the
// profiler also keeps one event per step and per forward() call (up to max_events) and writes
// them as a Chrome trace event file (JSON object format, "X" complete events, microseconds) that
// Perfetto and chrome://tracing open.
//
// Not thread-safe: one executor records into it from the thread that calls forward().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

struct ProfileRow {
  std::string name;      // op kind or kernel
  int64_t calls = 0;
  int64_t total_ns = 0;
  double mean_us = 0;
  double percent = 0;    // of the time spent in forward()
  uint64_t weight_bytes = 0;  // weights read by all the calls (StepInfo::weight_bytes x calls)
  double weight_gb_per_s = 0;  // weight_bytes / total time: the effective weight bandwidth
};

struct ProfileTable {
  int64_t forwards = 0;      // forward() calls
  int64_t rows = 0;          // tokens over all forward() calls
  int64_t forward_ns = 0;    // time in forward()
  int64_t outside_ns = 0;    // forward() time not in any step (batch validation, dispatch)
  std::vector<ProfileRow> by_op, by_kernel;  // sorted by total_ns, largest first
};

struct ProfilerOptions {
  bool keep_events = false;        // keep per-step events for the trace
  size_t max_events = size_t{1} << 21;  // further forward() calls are counted but not kept
};

class Profiler {
 public:
  /// What the executor tells the profiler about each step of its program.
  struct StepInfo {
    std::string op;      // "Linear"
    std::string where;   // "step 12 (Linear 'layers.0.q_proj')"
    std::string detail;  // what tells kernels of one op apart: "576->1728" (may be empty)
    uint64_t weight_bytes = 0;  // weights read whole per call (step_weight_bytes; 0: none)
  };

  explicit Profiler(ProfilerOptions options = {});

  /// Called by the executor's set_profiler(); resets the statistics (events are kept).
  void set_program(std::vector<StepInfo> steps);
  size_t num_steps() const { return steps_.size(); }

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  /// Hot path, called by the executor: begin_forward() at the start of forward(), record_step()
  /// after each step, end_forward() after the last one. A forward() that fails in between is
  /// not recorded (its steps' times still count).
  int64_t begin_forward();
  void record_step(int step, int32_t rows, int64_t begin_ns, int64_t end_ns) {
    if (step < 0 || static_cast<size_t>(step) >= stats_.size()) return;
    stats_[step].calls += 1;
    stats_[step].total_ns += end_ns - begin_ns;
    if (keep_this_forward_) events_.push_back({step, rows, 0, phase_, begin_ns, end_ns - begin_ns});
  }
  void end_forward(int32_t rows, int32_t seqs, int64_t begin_ns, int64_t end_ns);

  /// Labels the forward() events that follow in the trace (e.g. the bench test "pp512").
  void set_phase(const std::string& phase);
  /// Zeroes the statistics (the table); the trace's events are kept.
  void reset_stats();

  ProfileTable table() const;
  /// Text table: a summary line, then per op kind and per kernel (with a "weights GB/s" column
  /// where steps read weights). max_kernel_rows > 0 keeps the kernel table to that many rows.
  std::string format_table(size_t max_kernel_rows = 0) const;

  size_t num_events() const { return events_.size(); }
  int64_t dropped_forwards() const { return dropped_forwards_; }
  /// Writes the Chrome trace event JSON (timestamps relative to the profiler's creation).
  Status write_trace(const std::string& path) const;
  std::string trace_json() const;

  /// The kernel a step belongs to: op, detail, and the step's name without the step number, the
  /// MLIR op name the compiler puts first ("llm.linear") and an unknown location, with layer
  /// indices folded to '*': {"Linear", "step 12 (Linear 'llm.linear loc(\"layers.0.q_proj\")')",
  /// "576->576"} gives "Linear 576->576 'loc(\"layers.*.q_proj\")'".
  static std::string kernel_name(const StepInfo& step);

 private:
  struct StepStat {
    int64_t calls = 0;
    int64_t total_ns = 0;
  };
  struct Event {
    int32_t step;   // -1: a forward() call
    int32_t rows;
    int32_t seqs;   // forward events: sequences in the batch
    int32_t phase;  // index in phases_, -1: none
    int64_t begin_ns, dur_ns;
  };
  template <typename Out>
  void write_trace_to(Out&& out) const;

  ProfilerOptions options_;
  int64_t origin_ns_ = 0;
  std::vector<StepInfo> steps_;
  std::vector<StepStat> stats_;
  int64_t forwards_ = 0, rows_ = 0, forward_ns_ = 0, dropped_forwards_ = 0;
  std::vector<Event> events_;
  std::vector<std::string> phases_;
  int32_t phase_ = -1;
  bool keep_this_forward_ = false;
};

}  // namespace llmrt
