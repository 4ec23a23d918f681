// The compile cache behind `llmrt serve MODEL`: a Hugging Face folder or a .gguf file is compiled
// once by `llmc` (a separate program, run as a child process: the runtime never links the
// compiler) into `<cache_dir>/<key>.plan.fb`, and later starts reuse that plan.
//
// The key is XXH3-128 over: each model file that the compiler reads (config.json,
// generation_config.json, tokenizer files, *.safetensors, *.gguf, ... sorted by name) as
// (name, size, mtime in ns, XXH3-128 of its first MiB); the extra compile arguments; the
// compiler's identity (its resolved path, size and mtime, plus `llmc --version` output when the
// compiler has that flag); and the GPU targets asked for (the compiler's default when none).
// Editing, replacing or touching a model file, changing options or rebuilding llmc gives a new
// key, so a stale plan is never served.
//
// Concurrency: a per-key lock file (flock) makes concurrent starts compile once; the plan is
// written to a temporary name and renamed into place, so nobody ever opens a half-written plan.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace llmrt {

struct ModelCacheOptions {
  std::string cache_dir;                  // "": $XDG_CACHE_HOME/llmc, else ~/.cache/llmc
  std::string llmc_path;                  // "": next to the running llmrt, then $PATH
  std::vector<std::string> compile_args;  // extra `llmc compile` arguments (e.g. --target none)
  bool quiet = false;                     // no log lines on stderr; llmc runs with -q
};

/// A plan file (starts with the plan magic) is returned unchanged. A Hugging Face model folder
/// (with config.json) or a .gguf file is resolved to its cached plan, compiling it with llmc on a
/// miss. Errors: not_found (no such path, llmc not installed), invalid_argument (neither a plan
/// nor a model), internal (llmc failed: the message carries its exit status; its own messages
/// went to stderr).
StatusOr<std::string> resolve_plan_path(const std::string& path, const ModelCacheOptions& options);

/// The cache directory `options` selects (cache_dir, or the XDG default).
StatusOr<std::string> model_cache_dir(const ModelCacheOptions& options);

/// Where llmc is: options.llmc_path, else next to /proc/self/exe, else the first in $PATH.
/// not_found with install / manual-compile advice when there is none.
StatusOr<std::string> find_llmc(const ModelCacheOptions& options);

}  // namespace llmrt
