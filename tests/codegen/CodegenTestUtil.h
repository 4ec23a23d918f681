// Helpers shared by the codegen tests: temp dirs, subprocesses, files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace llmc::testing {

/// A fresh directory under $TMPDIR, removed when the object dies (kept when
/// LLMC_KEEP_TEST_FILES is set, for debugging).
class TempDir {
public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "llmc_codegen_XXXXXX")
            .string();
    char *made = mkdtemp(tmpl.data());
    if (made)
      path_ = made;
  }
  ~TempDir() {
    if (!path_.empty() && !std::getenv("LLMC_KEEP_TEST_FILES")) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  bool ok() const { return !path_.empty(); }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const {
    return (std::filesystem::path(path_) / name).string();
  }

private:
  std::string path_;
};

inline bool writeFile(const std::string &path, const void *data,
                      size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CommandResult {
  int exitCode = -1;
  std::string output; // stdout + stderr
};

/// Runs `command` through the shell, capturing stdout and stderr.
inline CommandResult runCommand(const std::string &command,
                                const std::string &logPath) {
  CommandResult r;
  std::string full = command + " > '" + logPath + "' 2>&1";
  int status = std::system(full.c_str());
  r.exitCode = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  r.output = readFile(logPath);
  return r;
}

inline bool isExecutable(const std::string &path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

} // namespace llmc::testing
