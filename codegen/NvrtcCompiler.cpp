//===- NvrtcCompiler.cpp - Compile kernel specs with NVRTC ----------------===//

#include "codegen/NvrtcCompiler.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string_view>

#include <unistd.h>
#include <xxhash.h>

#if LLMC_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace llmc {

namespace {

/// Real architectures NVRTC 13 compiles for (used when NVRTC is absent).
constexpr int kKnownArchs[] = {75, 80, 86, 87, 88, 89, 90,
                               100, 103, 110, 120, 121};

std::vector<int> supportedArchs() {
#if LLMC_HAVE_NVRTC
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
    std::vector<int> archs(n);
    if (nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS) {
      // NVRTC 13 no longer compiles for anything older than sm_75.
      archs.erase(std::remove_if(archs.begin(), archs.end(),
                                 [](int a) { return a < 75; }),
                  archs.end());
      return archs;
    }
  }
#endif
  return std::vector<int>(std::begin(kKnownArchs), std::end(kKnownArchs));
}

std::string archList(const std::vector<int> &archs) {
  std::string out;
  for (int a : archs) {
    if (!out.empty())
      out += ", ";
    out += std::to_string(a);
  }
  return out;
}

#if LLMC_HAVE_NVRTC

#ifndef LLMC_CUDA_INCLUDE_DIR
#define LLMC_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

/// Owns an nvrtcProgram.
class NvrtcProgram {
public:
  NvrtcProgram() = default;
  ~NvrtcProgram() {
    if (prog_)
      nvrtcDestroyProgram(&prog_);
  }
  NvrtcProgram(const NvrtcProgram &) = delete;
  NvrtcProgram &operator=(const NvrtcProgram &) = delete;
  nvrtcProgram *out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

private:
  nvrtcProgram prog_ = nullptr;
};

llmrt::Status nvrtcError(const std::string &call, nvrtcResult result,
                         const std::string &context, const std::string &log) {
  std::string msg = call + " failed: " + nvrtcGetErrorString(result) +
                    " (code " + std::to_string(static_cast<int>(result)) +
                    ") " + context;
  if (!log.empty())
    msg += "\nNVRTC log:\n" + log;
  return llmrt::internal_error(std::move(msg));
}

std::string programLog(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1)
    return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS)
    return "";
  log.resize(size - 1); // drop the NUL
  return log;
}

llmrt::StatusOr<KernelImage> compileOne(const KernelSpec &spec,
                                        const std::string &target) {
  const std::string context =
      "compiling kernel '" + spec.entry + "' for " + target;
  const std::string fileName = spec.entry + ".cu";
  NvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(prog.out(), spec.source.c_str(),
                                     fileName.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return nvrtcError("nvrtcCreateProgram", r, context, "");

  std::vector<std::string> options = nvrtcOptions(target);
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  r = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()),
                          argv.data());
  std::string log = programLog(prog.get());
  if (r != NVRTC_SUCCESS)
    return nvrtcError("nvrtcCompileProgram", r, context, log);

  KernelImage image;
  image.target = target;
  size_t ptxSize = 0;
  if ((r = nvrtcGetPTXSize(prog.get(), &ptxSize)) != NVRTC_SUCCESS)
    return nvrtcError("nvrtcGetPTXSize", r, context, log);
  if (ptxSize <= 1)
    return llmrt::internal_error("NVRTC produced no PTX " + context);
  image.ptx.resize(ptxSize);
  if ((r = nvrtcGetPTX(prog.get(), image.ptx.data())) != NVRTC_SUCCESS)
    return nvrtcError("nvrtcGetPTX", r, context, log);
  image.ptx.resize(ptxSize - 1); // drop the NUL

  size_t cubinSize = 0;
  if ((r = nvrtcGetCUBINSize(prog.get(), &cubinSize)) != NVRTC_SUCCESS)
    return nvrtcError("nvrtcGetCUBINSize", r, context, log);
  if (cubinSize == 0)
    return llmrt::internal_error("NVRTC produced no CUBIN (size 0) " +
                                 context);
  image.cubin.resize(cubinSize);
  if ((r = nvrtcGetCUBIN(prog.get(), reinterpret_cast<char *>(
                                         image.cubin.data()))) !=
      NVRTC_SUCCESS)
    return nvrtcError("nvrtcGetCUBIN", r, context, log);

  // The entry must be a visible kernel of this program.
  if (image.ptx.find(".entry " + spec.entry + "(") == std::string::npos)
    return llmrt::internal_error("kernel entry '" + spec.entry +
                                 "' not found in the PTX " + context);
  if (!parsePtxasReport(log, &image.resources))
    return llmrt::internal_error("ptxas reported no register count " + context +
                                 "\nNVRTC log:\n" + log);
  return image;
}

#endif // LLMC_HAVE_NVRTC

} // namespace

std::vector<std::string> defaultTargets() {
  return {"sm_80", "sm_86", "sm_89", "sm_90"};
}

llmrt::Status validateTarget(const std::string &target) {
  std::vector<int> archs = supportedArchs();
  auto bad = [&](const std::string &why) {
    return llmrt::invalid_argument(
        "unsupported GPU target '" + target + "' (" + why +
        "): expected sm_<N>[a|f] with N one of " + archList(archs) +
        ", suffix 'a' for N >= 90, 'f' for N >= 100");
  };
  std::string_view t(target);
  if (t.substr(0, 3) != "sm_")
    return bad("not of the form sm_<N>");
  t.remove_prefix(3);
  char suffix = 0;
  if (!t.empty() && (t.back() == 'a' || t.back() == 'f')) {
    suffix = t.back();
    t.remove_suffix(1);
  }
  if (t.empty() || t.size() > 4 || t[0] == '0' ||
      !std::all_of(t.begin(), t.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return bad("not of the form sm_<N>");
  int arch = std::stoi(std::string(t));
  if (std::find(archs.begin(), archs.end(), arch) == archs.end())
    return bad("architecture not supported by NVRTC 13");
  if (suffix == 'a' && arch < 90)
    return bad("'a' targets exist from sm_90");
  if (suffix == 'f' && arch < 100)
    return bad("'f' targets exist from sm_100");
  return llmrt::ok_status();
}

std::vector<std::string> nvrtcOptions(const std::string &target) {
  std::vector<std::string> options = {
      "--gpu-architecture=" + target,
      "-std=c++17",
      // Accuracy over speed: IEEE division and sqrt, denormals kept.
      "--ftz=false",
      "--prec-div=true",
      "--prec-sqrt=true",
      "--fmad=true",
      // ptxas' resource report (registers, shared memory, stack, spills)
      // goes to the program log; compileOne records it with the image.
      "--ptxas-options=-v",
  };
#if LLMC_HAVE_NVRTC
  options.push_back(std::string("--include-path=") + LLMC_CUDA_INCLUDE_DIR);
#endif
  return options;
}

bool parsePtxasReport(const std::string &log, KernelResources *out) {
  KernelResources r;
  bool found = false;
  // The number right before `tag` in `line`, if any.
  auto numberBefore = [](const std::string &line, const std::string &tag,
                         unsigned *value) {
    size_t at = line.find(tag);
    if (at == std::string::npos)
      return false;
    size_t end = at;
    while (end > 0 && line[end - 1] == ' ')
      --end;
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1])))
      --begin;
    if (begin == end || end - begin > 9)
      return false;
    *value = static_cast<unsigned>(std::stoul(line.substr(begin, end - begin)));
    return true;
  };
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    if (eol == std::string::npos)
      eol = log.size();
    const std::string line = log.substr(pos, eol - pos);
    pos = eol + 1;
    unsigned v = 0, w = 0;
    if (line.find("Used ") != std::string::npos &&
        numberBefore(line, " registers", &v)) {
      r.registers = static_cast<int>(v);
      found = true;
      if (numberBefore(line, " barriers", &v))
        r.barriers = static_cast<int>(v);
      if (numberBefore(line, " bytes smem", &v))
        r.sharedBytes = v;
    }
    if (numberBefore(line, " bytes stack frame", &v))
      r.stackBytes = v;
    if (numberBefore(line, " bytes spill stores", &v) &&
        numberBefore(line, " bytes spill loads", &w))
      r.spillBytes = v + w;
  }
  if (found)
    *out = r;
  return found;
}

bool nvrtcAvailable() {
#if LLMC_HAVE_NVRTC
  return true;
#else
  return false;
#endif
}

std::string nvrtcVersionString() {
#if LLMC_HAVE_NVRTC
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "";
  return std::to_string(major) + "." + std::to_string(minor);
#else
  return "";
#endif
}

namespace {

std::mutex cacheMutex;
std::string cacheDirOverride;
bool cacheOverridden = false;
std::atomic<int> cacheHits{0}, cacheMisses{0};

std::string readFile(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  return in ? std::string(std::istreambuf_iterator<char>(in), {}) : std::string();
}

// Writes `bytes` to `p` through a unique temporary name and a rename.
void writeFileAtomically(const std::filesystem::path &p, const std::string &bytes) {
  std::error_code ec;
  std::filesystem::path tmp = p;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return;
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec)
    std::filesystem::remove(tmp, ec);
}

// The resources in ptxas' words, so the cache's copy parses like a fresh log.
std::string ptxasReport(const KernelResources &r) {
  return "ptxas info    : Used " + std::to_string(r.registers) + " registers, used " +
         std::to_string(r.barriers) + " barriers, " + std::to_string(r.sharedBytes) +
         " bytes smem\nptxas         .     " + std::to_string(r.stackBytes) +
         " bytes stack frame, " + std::to_string(r.spillBytes) +
         " bytes spill stores, 0 bytes spill loads\n";
}

std::string cacheKey(const KernelSpec &spec, const std::string &target) {
  std::string text = "llmc kernel cache v2\n" + nvrtcVersionString() + "\n" + target + "\n";
  for (const std::string &o : nvrtcOptions(target))
    text += o + "\n";
  text += spec.entry + "\n" + spec.source;
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

} // namespace

void setKernelCacheDir(const std::string &dir) {
  std::lock_guard<std::mutex> lock(cacheMutex);
  cacheDirOverride = dir;
  cacheOverridden = true;
}

std::string kernelCacheDir() {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    if (cacheOverridden)
      dir = cacheDirOverride;
  }
  if (dir.empty()) {
    if (const char *e = std::getenv("LLMC_KERNEL_CACHE"))
      dir = e;
    else if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
      dir = std::string(x) + "/llmc/kernels";
    else if (const char *h = std::getenv("HOME"); h && *h)
      dir = std::string(h) + "/.cache/llmc/kernels";
  }
  return dir == "off" ? std::string() : dir;
}

KernelCacheStats kernelCacheStats() { return {cacheHits.load(), cacheMisses.load()}; }

llmrt::StatusOr<std::vector<KernelImage>>
compileKernel(const KernelSpec &spec, const std::vector<std::string> &targets) {
  if (spec.entry.empty() || spec.source.empty())
    return llmrt::invalid_argument(
        "compileKernel: kernel spec has an empty entry or source");
  if (targets.empty())
    return llmrt::invalid_argument("compileKernel: no GPU targets given for '" +
                                   spec.entry + "'");
  for (const std::string &t : targets)
    RETURN_IF_ERROR(validateTarget(t));
#if LLMC_HAVE_NVRTC
  std::vector<KernelImage> images;
  images.reserve(targets.size());
  const std::string dir = kernelCacheDir();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  for (const std::string &t : targets) {
    std::filesystem::path base;
    if (!dir.empty()) {
      base = std::filesystem::path(dir) / cacheKey(spec, t);
      std::string ptx = readFile(base.string() + ".ptx"), cubin = readFile(base.string() + ".cubin");
      KernelResources resources;
      const bool valid = cubin.size() > 4 && cubin.compare(0, 4, "\x7f" "ELF") == 0 &&
                         ptx.find(spec.entry) != std::string::npos &&
                         parsePtxasReport(readFile(base.string() + ".ptxas"), &resources);
      if (valid) {
        ++cacheHits;
        images.push_back(KernelImage{t, std::move(ptx), std::vector<uint8_t>(cubin.begin(), cubin.end()),
                                     resources});
        continue;
      }
    }
    ASSIGN_OR_RETURN(KernelImage image, compileOne(spec, t));
    ++cacheMisses;
    if (!base.empty()) {
      writeFileAtomically(base.string() + ".ptx", image.ptx);
      writeFileAtomically(base.string() + ".cubin", std::string(image.cubin.begin(), image.cubin.end()));
      writeFileAtomically(base.string() + ".ptxas", ptxasReport(image.resources));
    }
    images.push_back(std::move(image));
  }
  return images;
#else
  return llmrt::unavailable("NVRTC not available in this build (compiling '" +
                            spec.entry + "')");
#endif
}

} // namespace llmc
