// Subcommands of llmrt that live in their own files (tools/llmrt_serve.cc, tools/bench_serve.cc).
// Each adds its CLI11 subcommand to `app` and returns the function main() calls when that
// subcommand was given (its result is the exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "runtime/base/status.h"

namespace llmrt_tools {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Subcommand add_serve_command(CLI::App& app);        // llmrt serve PLAN|MODEL
Subcommand add_bench_serve_command(CLI::App& app);  // llmrt bench-serve --url URL | --plan PLAN
Subcommand add_bench_command(CLI::App& app);        // llmrt bench PLAN (tools/llmrt_bench.cc)
Subcommand add_eval_command(CLI::App& app);         // llmrt eval PLAN (tools/llmrt_eval.cc)
Subcommand add_devices_command(CLI::App& app);      // llmrt devices [PLAN] (tools/llmrt_devices.cc)

/// Prints "llmrt: error: <message>" to stderr (bytes that are not printable UTF-8, e.g. from a
/// corrupted file, escaped as \xNN) and returns the exit code 1.
int fail(const llmrt::Status& s);

}  // namespace llmrt_tools
