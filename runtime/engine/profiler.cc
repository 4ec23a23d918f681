#include "runtime/engine/profiler.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

namespace llmrt {

namespace {

// JSON string body: quotes, backslashes and control characters escaped; bytes >= 0x80 as \u00XX
// so that any step name (plan names are untrusted bytes) gives valid JSON.
std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x80) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::vector<ProfileRow> sorted_rows(const std::map<std::string, ProfileRow>& groups, int64_t forward_ns) {
  std::vector<ProfileRow> rows;
  rows.reserve(groups.size());
  for (const auto& [name, r] : groups) {
    ProfileRow row = r;
    row.name = name;
    row.mean_us = row.calls ? row.total_ns / 1e3 / row.calls : 0.0;
    row.percent = forward_ns > 0 ? 100.0 * row.total_ns / forward_ns : 0.0;
    row.weight_gb_per_s = row.total_ns > 0 ? static_cast<double>(row.weight_bytes) / row.total_ns : 0.0;  // B/ns
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return rows;
}

void append_rows(std::string* out, const char* title, const std::vector<ProfileRow>& rows,
                 size_t max_rows) {
  size_t width = std::strlen(title);
  const size_t shown = max_rows ? std::min(max_rows, rows.size()) : rows.size();
  for (size_t i = 0; i < shown; ++i) width = std::max(width, rows[i].name.size());
  width = std::min<size_t>(width, 60);
  bool weights = false;  // the weight bandwidth column, where some step reads weights
  for (const ProfileRow& r : rows) weights |= r.weight_bytes > 0;
  char line[256];
  std::snprintf(line, sizeof line, "  %-*s %10s %11s %11s %7s%s\n", static_cast<int>(width), title,
                "calls", "total ms", "mean us", "%", weights ? "  weights GB/s" : "");
  *out += line;
  for (size_t i = 0; i < shown; ++i) {
    const ProfileRow& r = rows[i];
    std::string name = r.name.size() > width ? r.name.substr(0, width - 3) + "..." : r.name;
    char gbs[32] = "";
    if (r.weight_bytes > 0) std::snprintf(gbs, sizeof gbs, " %14.1f", r.weight_gb_per_s);
    std::snprintf(line, sizeof line, "  %-*s %10" PRId64 " %11.3f %11.2f %7.2f%s\n",
                  static_cast<int>(width), name.c_str(), r.calls, r.total_ns / 1e6, r.mean_us,
                  r.percent, gbs);
    *out += line;
  }
  if (shown < rows.size()) {
    int64_t calls = 0, ns = 0;
    double pct = 0;
    for (size_t i = shown; i < rows.size(); ++i) {
      calls += rows[i].calls;
      ns += rows[i].total_ns;
      pct += rows[i].percent;
    }
    char name[48];
    std::snprintf(name, sizeof name, "(%zu more)", rows.size() - shown);
    std::snprintf(line, sizeof line, "  %-*s %10" PRId64 " %11.3f %11s %7.2f\n",
                  static_cast<int>(width), name, calls, ns / 1e6, "", pct);
    *out += line;
  }
}

}  // namespace

Profiler::Profiler(ProfilerOptions options) : options_(options), origin_ns_(now_ns()) {}

void Profiler::set_program(std::vector<StepInfo> steps) {
  steps_ = std::move(steps);
  stats_.assign(steps_.size(), StepStat{});
  forwards_ = rows_ = forward_ns_ = 0;
}

int64_t Profiler::begin_forward() {
  keep_this_forward_ =
      options_.keep_events && events_.size() + steps_.size() + 1 <= options_.max_events;
  if (options_.keep_events && !keep_this_forward_) ++dropped_forwards_;
  if (keep_this_forward_ && events_.capacity() < events_.size() + steps_.size() + 1)
    events_.reserve(std::min(options_.max_events, std::max<size_t>(2 * events_.capacity(),
                                                                    events_.size() + steps_.size() + 1)));
  return now_ns();
}

void Profiler::end_forward(int32_t rows, int32_t seqs, int64_t begin_ns, int64_t end_ns) {
  forwards_ += 1;
  rows_ += rows;
  forward_ns_ += end_ns - begin_ns;
  if (keep_this_forward_) events_.push_back({-1, rows, seqs, phase_, begin_ns, end_ns - begin_ns});
  keep_this_forward_ = false;
}

void Profiler::set_phase(const std::string& phase) {
  auto it = std::find(phases_.begin(), phases_.end(), phase);
  if (it == phases_.end()) it = phases_.insert(phases_.end(), phase);
  phase_ = static_cast<int32_t>(it - phases_.begin());
}

void Profiler::reset_stats() {
  stats_.assign(steps_.size(), StepStat{});
  forwards_ = rows_ = forward_ns_ = 0;
}

std::string Profiler::kernel_name(const StepInfo& step) {
  // "step 12 (Linear 'NAME')" -> NAME.
  std::string name;
  const size_t q0 = step.where.find('\'');
  const size_t q1 = step.where.rfind('\'');
  if (q0 != std::string::npos && q1 > q0) name = step.where.substr(q0 + 1, q1 - q0 - 1);
  // llmc writes "<mlir op name> <location>": the op name repeats the op kind.
  if (name.rfind("llm.", 0) == 0) {
    const size_t sp = name.find(' ');
    name = sp == std::string::npos ? std::string() : name.substr(sp + 1);
  }
  if (name == "loc(unknown)") name.clear();
  // Fold digit runs that form a whole dotted path component: "layers.12.q" -> "layers.*.q".
  std::string folded;
  folded.reserve(name.size());
  for (size_t i = 0; i < name.size();) {
    if (std::isdigit(static_cast<unsigned char>(name[i])) && i > 0 && name[i - 1] == '.') {
      size_t j = i;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (j == name.size() || std::strchr(".'\")", name[j])) {
        folded += '*';
        i = j;
        continue;
      }
    }
    folded += name[i++];
  }
  std::string out = step.op.empty() ? "?" : step.op;
  if (!step.detail.empty()) out += " " + step.detail;
  if (!folded.empty()) out += " '" + folded + "'";
  return out;
}

ProfileTable Profiler::table() const {
  ProfileTable t;
  t.forwards = forwards_;
  t.rows = rows_;
  t.forward_ns = forward_ns_;
  std::map<std::string, ProfileRow> ops, kernels;
  int64_t in_steps = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const StepStat& s = stats_[i];
    if (s.calls == 0) continue;
    in_steps += s.total_ns;
    for (ProfileRow* r : {&ops[steps_[i].op], &kernels[kernel_name(steps_[i])]}) {
      r->calls += s.calls;
      r->total_ns += s.total_ns;
      r->weight_bytes += steps_[i].weight_bytes * static_cast<uint64_t>(s.calls);
    }
  }
  t.outside_ns = std::max<int64_t>(0, forward_ns_ - in_steps);
  t.by_op = sorted_rows(ops, forward_ns_);
  t.by_kernel = sorted_rows(kernels, forward_ns_);
  return t;
}

std::string Profiler::format_table(size_t max_kernel_rows) const {
  const ProfileTable t = table();
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile: %" PRId64 " forward() calls, %" PRId64 " rows, %.3f ms in forward()"
                " (%.3f ms outside the steps: %.2f%%)\n",
                t.forwards, t.rows, t.forward_ns / 1e6, t.outside_ns / 1e6,
                t.forward_ns > 0 ? 100.0 * t.outside_ns / t.forward_ns : 0.0);
  out += line;
  append_rows(&out, "op", t.by_op, 0);
  append_rows(&out, "kernel", t.by_kernel, max_kernel_rows);
  return out;
}

template <typename Out>
void Profiler::write_trace_to(Out&& out) const {
  // Names and step labels are escaped once per step, not per event.
  std::vector<std::string> op_json(steps_.size()), where_json(steps_.size()), phase_json;
  for (size_t i = 0; i < steps_.size(); ++i) {
    op_json[i] = json_escape(steps_[i].op);
    where_json[i] = json_escape(steps_[i].where);
  }
  for (const std::string& p : phases_) phase_json.push_back(json_escape(p));
  out("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"llmrt\",\"program_steps\":");
  out(std::to_string(steps_.size()));
  out(",\"dropped_forwards\":");
  out(std::to_string(dropped_forwards_));
  out("},\"traceEvents\":[\n");
  out("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"llmrt\"}},\n");
  out("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"forward\"}}");
  char buf[160];
  for (const Event& e : events_) {
    const bool fwd = e.step < 0;
    out(",\n{\"name\":\"");
    out(fwd ? std::string("forward") : op_json[e.step]);
    std::snprintf(buf, sizeof buf,
                  "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                  "\"args\":{\"rows\":%d",
                  fwd ? "forward" : "step", (e.begin_ns - origin_ns_) / 1e3, e.dur_ns / 1e3,
                  static_cast<int>(e.rows));
    out(buf);
    if (fwd) {
      out(",\"seqs\":" + std::to_string(e.seqs));
    } else {
      out(",\"step\":\"");
      out(where_json[e.step]);
      out("\"");
    }
    if (e.phase >= 0 && static_cast<size_t>(e.phase) < phase_json.size()) {
      out(",\"phase\":\"");
      out(phase_json[e.phase]);
      out("\"");
    }
    out("}}");
  }
  out("\n]}\n");
}

std::string Profiler::trace_json() const {
  std::string s;
  write_trace_to([&](const std::string& piece) { s += piece; });
  return s;
}

Status Profiler::write_trace(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return invalid_argument("cannot write trace file '" + path + "': " + std::strerror(errno));
  bool ok = true;
  write_trace_to([&](const std::string& piece) {
    if (ok && std::fwrite(piece.data(), 1, piece.size(), f.get()) != piece.size()) ok = false;
  });
  if (std::fclose(f.release()) != 0) ok = false;
  if (!ok) return invalid_argument("writing trace file '" + path + "' failed");
  return ok_status();
}

}  // namespace llmrt
