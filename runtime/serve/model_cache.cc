#include "runtime/serve/model_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/plan/plan_file.h"

extern char** environ;

namespace llmrt {
namespace {

constexpr size_t kHeadBytes = size_t{1} << 20;  // each model file contributes its first MiB

std::string errno_text() { return std::strerror(errno); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string dirname_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string basename_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

/// Reads up to `n` bytes from the start of `path`.
StatusOr<std::string> read_head(const std::string& path, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": " + errno_text());
  std::string buf(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      Status s = internal_error(path + ": read failed: " + errno_text());
      ::close(fd);
      return s;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  buf.resize(got);
  return buf;
}

bool has_plan_magic(const std::string& head) {
  return head.size() >= sizeof(kPlanMagic) && std::memcmp(head.data(), kPlanMagic, sizeof(kPlanMagic)) == 0;
}

/// A cached plan is trusted if its header is whole and the file is as long as the header says
/// (Plan::open verifies the rest when the server maps it).
bool looks_like_complete_plan(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  StatusOr<std::string> head = read_head(path, sizeof(PlanFileHeader));
  if (!head.ok() || head->size() != sizeof(PlanFileHeader) || !has_plan_magic(*head)) return false;
  PlanFileHeader h;
  std::memcpy(&h, head->data(), sizeof(h));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  return h.weights_offset <= size && h.weights_size <= size - h.weights_offset;
}

/// Files of a Hugging Face folder that the compiler reads (sorted by name).
std::vector<std::string> model_files_in(const std::string& dir) {
  static const char* const kNames[] = {
      "config.json",        "generation_config.json", "tokenizer.json",      "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json", "vocab.json",          "encoder.json",
      "merges.txt",         "vocab.bpe",              "tokenizer.model",     "chat_template.jinja",
      "chat_template.json"};
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    bool wanted = ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json") ||
                  ends_with(lower(name), ".gguf");
    for (const char* n : kNames) wanted = wanted || name == n;
    struct stat st;
    if (wanted && ::stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void hash_string(XXH3_state_t* state, const std::string& s) {
  XXH3_128bits_update(state, s.data(), s.size());
  XXH3_128bits_update(state, "\0", 1);
}

void hash_u64(XXH3_state_t* state, uint64_t v) { XXH3_128bits_update(state, &v, sizeof(v)); }

/// Name, size, mtime (ns) and the hash of the first MiB of one file.
Status hash_file_identity(XXH3_state_t* state, const std::string& name, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return not_found(path + ": " + errno_text());
  ASSIGN_OR_RETURN(std::string head, read_head(path, kHeadBytes));
  XXH128_hash_t h = XXH3_128bits(head.data(), head.size());
  hash_string(state, name);
  hash_u64(state, static_cast<uint64_t>(st.st_size));
  hash_u64(state, static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull +
                      static_cast<uint64_t>(st.st_mtim.tv_nsec));
  hash_u64(state, h.high64);
  hash_u64(state, h.low64);
  return ok_status();
}

/// Runs argv[0] (a path) with argv; stdin is /dev/null. With `captured`, the child's stdout is
/// read into it and its stderr discarded; otherwise both pass through. Returns the wait status.
StatusOr<int> run_process(const std::vector<std::string>& args, std::string* captured) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int pipe_fds[2] = {-1, -1};
  if (captured && ::pipe2(pipe_fds, O_CLOEXEC) != 0) return internal_error("pipe: " + errno_text());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (captured) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (captured) ::close(pipe_fds[1]);
  if (rc != 0) {
    if (captured) ::close(pipe_fds[0]);
    return internal_error(std::string("cannot run ") + args[0] + ": " + std::strerror(rc));
  }
  if (captured) {
    char buf[4096];
    for (;;) {
      ssize_t r = ::read(pipe_fds[0], buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      if (captured->size() < 65536) captured->append(buf, static_cast<size_t>(r));
    }
    ::close(pipe_fds[0]);
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return internal_error("waitpid: " + errno_text());
  }
  return wstatus;
}

std::string describe_exit(int wstatus) {
  if (WIFEXITED(wstatus)) return "exit status " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return "killed by signal " + std::to_string(WTERMSIG(wstatus));
  return "wait status " + std::to_string(wstatus);
}

/// The value of --target in `args` ("default" when absent: the compiler picks, and its choice is
/// part of its identity).
std::string targets_of(const std::vector<std::string>& args) {
  std::string targets = "default";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--target" && i + 1 < args.size()) targets = args[i + 1];
    else if (args[i].rfind("--target=", 0) == 0) targets = args[i].substr(9);
  }
  return targets;
}

std::string hex128(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

/// An exclusive flock on `path` for this scope.
class FileLock {
 public:
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  Status lock(const std::string& path, bool quiet) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return internal_error("cannot open lock file " + path + ": " + errno_text());
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return ok_status();
    if (errno != EWOULDBLOCK) return internal_error("flock " + path + ": " + errno_text());
    if (!quiet) std::fprintf(stderr, "llmrt: waiting for another process compiling the same model\n");
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return internal_error("flock " + path + ": " + errno_text());
    }
    return ok_status();
  }

 private:
  int fd_ = -1;
};

}  // namespace

StatusOr<std::string> model_cache_dir(const ModelCacheOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/llmc";  // relative values are ignored (XDG spec)
  const char* home = std::getenv("HOME");
  if (home && home[0] != '\0') return std::string(home) + "/.cache/llmc";
  return failed_precondition("no cache folder: neither $XDG_CACHE_HOME nor $HOME is set (pass a cache folder)");
}

StatusOr<std::string> find_llmc(const ModelCacheOptions& options) {
  if (!options.llmc_path.empty()) {
    if (is_executable_file(options.llmc_path)) return options.llmc_path;
    return not_found("llmc: '" + options.llmc_path + "' is not an executable file");
  }
  std::string self_dir;
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = '\0';
    self_dir = dirname_of(buf);
    if (is_executable_file(self_dir + "/llmc")) return self_dir + "/llmc";
  }
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    size_t i = 0;
    while (i <= p.size()) {
      size_t end = p.find(':', i);
      if (end == std::string::npos) end = p.size();
      const std::string dir = end > i ? p.substr(i, end - i) : std::string(".");
      if (is_executable_file(dir + "/llmc")) return dir + "/llmc";
      i = end + 1;
    }
  }
  return not_found("llmc (the compiler) is not installed: it is neither next to llmrt" +
                   (self_dir.empty() ? std::string() : " (" + self_dir + ")") +
                   " nor in $PATH. Install llmc, or compile the model yourself and serve the plan: "
                   "`llmc compile MODEL -o model.plan.fb` then `llmrt serve model.plan.fb`");
}

StatusOr<std::string> resolve_plan_path(const std::string& path, const ModelCacheOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return not_found(path + ": " + errno_text());

  // What is it: a plan, a .gguf file or a Hugging Face folder.
  std::vector<std::pair<std::string, std::string>> files;  // (name in the key, path)
  if (S_ISREG(st.st_mode)) {
    ASSIGN_OR_RETURN(std::string head, read_head(path, 8));
    if (has_plan_magic(head)) return path;
    const bool gguf = head.compare(0, 4, "GGUF") == 0 || ends_with(lower(path), ".gguf");
    if (!gguf)
      return invalid_argument(path + ": neither a plan file (from llmc compile), a .gguf file nor a "
                              "Hugging Face model folder");
    files.emplace_back(basename_of(path), path);
  } else if (S_ISDIR(st.st_mode)) {
    struct stat cst;
    if (::stat((path + "/config.json").c_str(), &cst) != 0 || !S_ISREG(cst.st_mode))
      return invalid_argument(path + ": a folder without config.json is not a Hugging Face model folder");
    for (const std::string& name : model_files_in(path)) files.emplace_back(name, path + "/" + name);
  } else {
    return invalid_argument(path + ": not a regular file or folder");
  }

  ASSIGN_OR_RETURN(std::string llmc, find_llmc(options));
  ASSIGN_OR_RETURN(std::string dir, model_cache_dir(options));

  // The key.
  XXH3_state_t* state = XXH3_createState();
  if (!state) return internal_error("out of memory");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state_owner(state, &XXH3_freeState);
  XXH3_128bits_reset(state);
  hash_string(state, "llmrt model cache v1");
  hash_u64(state, files.size());
  for (const auto& [name, file] : files) RETURN_IF_ERROR(hash_file_identity(state, name, file));
  hash_u64(state, options.compile_args.size());
  for (const std::string& arg : options.compile_args) hash_string(state, arg);
  hash_string(state, "targets=" + targets_of(options.compile_args));
  std::error_code ec;
  std::string llmc_real = std::filesystem::canonical(llmc, ec).string();
  if (ec) llmc_real = llmc;
  RETURN_IF_ERROR(hash_file_identity(state, "llmc:" + llmc_real, llmc_real));
  std::string version;
  ASSIGN_OR_RETURN(int version_status, run_process({llmc, "--version"}, &version));
  hash_string(state, WIFEXITED(version_status) && WEXITSTATUS(version_status) == 0 ? version : "");
  const std::string key = hex128(XXH3_128bits_digest(state));

  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create the compile cache folder " + dir + ": " + ec.message());
  const std::string plan = dir + "/" + key + ".plan.fb";

  if (looks_like_complete_plan(plan)) {
    if (!options.quiet) std::fprintf(stderr, "llmrt: compile cache hit: %s\n", plan.c_str());
    return plan;
  }

  // Miss: one compile per key at a time; whoever waited finds the plan afterwards.
  FileLock lock;
  RETURN_IF_ERROR(lock.lock(dir + "/" + key + ".lock", options.quiet));
  if (looks_like_complete_plan(plan)) {
    if (!options.quiet) std::fprintf(stderr, "llmrt: compile cache hit: %s\n", plan.c_str());
    return plan;
  }

  const std::string tmp = plan + ".tmp." + std::to_string(::getpid());
  std::vector<std::string> args = {llmc, "compile", path, "-o", tmp};
  args.insert(args.end(), options.compile_args.begin(), options.compile_args.end());
  if (options.quiet) args.push_back("-q");
  if (!options.quiet)
    std::fprintf(stderr, "llmrt: compiling %s with %s (once; cached as %s)\n", path.c_str(), llmc.c_str(),
                 plan.c_str());
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(int wstatus, run_process(args, nullptr));
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    ::unlink(tmp.c_str());
    std::string cmd;
    for (const std::string& a : args) cmd += (cmd.empty() ? "" : " ") + a;
    return internal_error("llmc could not compile " + path + " (" + describe_exit(wstatus) +
                          "; its messages are above). Command: " + cmd);
  }
  if (!looks_like_complete_plan(tmp)) {
    ::unlink(tmp.c_str());
    return internal_error("llmc exited successfully but wrote no complete plan for " + path);
  }
  if (::rename(tmp.c_str(), plan.c_str()) != 0) {
    Status s = internal_error("cannot move the compiled plan to " + plan + ": " + errno_text());
    ::unlink(tmp.c_str());
    return s;
  }
  if (!options.quiet) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "llmrt: compiled in %.1f s: %s\n", secs, plan.c_str());
  }
  return plan;
}

}  // namespace llmrt
