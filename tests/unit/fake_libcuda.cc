// A stand-in for the CUDA driver (libcuda.so.1) on machines without a GPU, so the runtime's real
// driver path (runtime/cuda/cuda_driver.cc: dlopen, symbol lookup, cuInit, contexts, streams,
// graphs, events, launches) and everything above it (llmrt devices/run/serve --device cuda) run
// in the tests. Written here: no fake driver fitting this exists as a package.
//
// What it models, from the CUDA Driver API reference:
//   * the current context is per thread: every call that acts on a context fails with
//     CUDA_ERROR_INVALID_CONTEXT (201) on a thread that has not made one current;
//   * device memory: host memory (zeroed, 256-byte aligned) within the device's size, else
//     CUDA_ERROR_OUT_OF_MEMORY (2); addresses are checked on free and copies (1, INVALID_VALUE);
//   * stream capture: between cuStreamBeginCapture and cuStreamEndCapture launches are recorded,
//     and a synchronous copy, allocation or synchronize fails with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and invalidates the capture, as on a GPU;
//   * launches check their geometry (block <= 1024 threads, grid >= 1) and are counted; they run
//     no code (a CUBIN cannot run here), so device outputs stay what was written to them.
// Knobs (environment, read at cuInit): LLMC_FAKE_CUDA_VERSION (cuDriverGetVersion, default
// 13000), LLMC_FAKE_CUDA_CC (compute capability as 10 major + minor, default 90),
// LLMC_FAKE_CUDA_MEMORY_MIB (default 8192), LLMC_FAKE_CUDA_NO_GRAPHS (set: stream capture fails
// with CUDA_ERROR_NOT_SUPPORTED).
// For tests: llmc_fake_cuda_counts(&launches, &programmatic, &graph_launches, &bytes_in_use).

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3,
                   kInvalidDevice = 101, kInvalidImage = 200, kInvalidContext = 201,
                   kCaptureUnsupported = 900, kCaptureInvalidated = 901, kNotSupported = 801;

struct Context {
  int device = 0;
};
struct Stream {};  // one stream's handle: the capture below says whether it is capturing
struct Graph {
  int launches = 0;
};
struct Module {};
struct Function {
  std::string name;
};
struct Event {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

struct State {
  std::mutex mu;
  bool initialized = false;
  int version = 13000, cc = 90;
  uint64_t memory = uint64_t(8192) << 20, in_use = 0;
  bool graphs = true;
  Context primary;
  std::map<uint64_t, uint64_t> allocations;  // address -> bytes
  uint64_t launches = 0, programmatic = 0, graph_launches = 0;
};
// Never destroyed (nor the map below): what the runtime still holds at exit stays reachable.
State& state() {
  static State* s = new State;
  return *s;
}
thread_local Context* current = nullptr;

// Every object handed out stays owned here until its destroy call (or the process's end), so a
// leak checker sees no leak where the runtime keeps a module or stream for the whole run.
std::mutex owned_mu;
std::map<void*, void (*)(void*)>& owned() {
  static auto* objects = new std::map<void*, void (*)(void*)>;
  return *objects;
}
template <class T>
T* own(T* p) {
  std::lock_guard<std::mutex> l(owned_mu);
  owned()[p] = [](void* q) { delete static_cast<T*>(q); };
  return p;
}
void release(void* p) {
  std::lock_guard<std::mutex> l(owned_mu);
  auto it = owned().find(p);
  if (it == owned().end()) return;
  it->second(p);
  owned().erase(it);
}

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// The allocation holding [p, p + bytes), if any.
bool covered(State& s, uint64_t p, uint64_t bytes) {
  auto it = s.allocations.upper_bound(p);
  if (it == s.allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

// Calls that act on the current context: not initialized, no context on this thread, or (for
// those a capture forbids) a capture in progress on the stream.
struct Capture {
  Stream* stream = nullptr;  // the stream being captured, if any
  bool invalidated = false;  // a call the capture forbids came
  int launches = 0;          // launches recorded since it began
} capture;
CUresult need_context() {
  if (!state().initialized) return kNotInitialized;
  return current ? kSuccess : kInvalidContext;
}
CUresult forbidden_in_capture() {
  if (capture.stream) {
    capture.invalidated = true;
    return kCaptureUnsupported;
  }
  return kSuccess;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.version = int(env_u64("LLMC_FAKE_CUDA_VERSION", 13000));
  s.cc = int(env_u64("LLMC_FAKE_CUDA_CC", 90));
  s.memory = env_u64("LLMC_FAKE_CUDA_MEMORY_MIB", 8192) << 20;
  s.graphs = std::getenv("LLMC_FAKE_CUDA_NO_GRAPHS") == nullptr;
  s.initialized = true;
  return kSuccess;
}
CUresult cuDriverGetVersion(int* v) {
  if (!v) return kInvalidValue;
  *v = state().initialized ? state().version : int(env_u64("LLMC_FAKE_CUDA_VERSION", 13000));
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  if (!state().initialized) return kNotInitialized;
  *n = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  if (!state().initialized) return kNotInitialized;
  if (ordinal != 0) return kInvalidDevice;
  *d = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int len, int d) {
  if (d != 0) return kInvalidDevice;
  if (!name || len <= 0) return kInvalidValue;
  std::strncpy(name, "Fake CUDA device (llmc tests)", size_t(len));
  name[len - 1] = 0;
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  if (d != 0) return kInvalidDevice;
  if (attr == 75) *v = state().cc / 10;       // COMPUTE_CAPABILITY_MAJOR
  else if (attr == 76) *v = state().cc % 10;  // COMPUTE_CAPABILITY_MINOR
  else if (attr == 16) *v = 4;                // MULTIPROCESSOR_COUNT
  else return kInvalidValue;
  return kSuccess;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int d) {
  if (d != 0) return kInvalidDevice;
  *bytes = size_t(state().memory);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  if (!state().initialized) return kNotInitialized;
  if (d != 0) return kInvalidDevice;
  *ctx = &state().primary;
  return kSuccess;
}
CUresult cuCtxSetCurrent(void* ctx) {
  if (ctx && ctx != &state().primary) return kInvalidContext;
  current = static_cast<Context*>(ctx);
  return kSuccess;
}
CUresult cuCtxGetCurrent(void** ctx) {
  if (!state().initialized) return kNotInitialized;
  *ctx = current;
  return kSuccess;
}
CUresult cuCtxSynchronize() {
  if (CUresult r = need_context()) return r;
  return forbidden_in_capture();
}

CUresult cuMemAlloc_v2(uint64_t* p, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (CUresult r = forbidden_in_capture()) return r;
  if (bytes == 0) return kInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.in_use + bytes > s.memory) return kOutOfMemory;
  void* mem = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!mem) return kOutOfMemory;
  std::memset(mem, 0, bytes);
  *p = reinterpret_cast<uint64_t>(mem);
  s.allocations[*p] = bytes;
  s.in_use += bytes;
  return kSuccess;
}
CUresult cuMemFree_v2(uint64_t p) {
  if (CUresult r = need_context()) return r;
  if (CUresult r = forbidden_in_capture()) return r;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.allocations.find(p);
  if (it == s.allocations.end()) return kInvalidValue;
  s.in_use -= it->second;
  s.allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (CUresult r = forbidden_in_capture()) return r;
  std::lock_guard<std::mutex> l(state().mu);
  if (!covered(state(), dst, bytes)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (CUresult r = forbidden_in_capture()) return r;
  std::lock_guard<std::mutex> l(state().mu);
  if (!covered(state(), src, bytes)) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (CUresult r = forbidden_in_capture()) return r;
  std::lock_guard<std::mutex> l(state().mu);
  if (!covered(state(), dst, bytes) || !covered(state(), src, bytes)) return kInvalidValue;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}

// A CUBIN (ELF) or NUL-terminated PTX text; anything else is refused as the driver would.
CUresult cuModuleLoadData(void** module, const void* image) {
  if (CUresult r = need_context()) return r;
  if (!image) return kInvalidValue;
  const char* p = static_cast<const char*>(image);
  const bool elf = std::memcmp(p, "\x7f" "ELF", 4) == 0;
  if (!elf && std::strstr(p, ".version") == nullptr) return kInvalidImage;
  *module = own(new Module);
  return kSuccess;
}
CUresult cuModuleGetFunction(void** fn, void* module, const char* name) {
  if (!module || !name || !*name) return kInvalidValue;
  *fn = own(new Function{name});
  return kSuccess;
}

namespace {
CUresult launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                void* stream, bool programmatic) {
  if (CUresult r = need_context()) return r;
  if (!fn || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || uint64_t(bx) * by * bz > 1024)
    return kInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  if (stream && stream == capture.stream) {
    ++capture.launches;
    return kSuccess;
  }
  ++s.launches;
  s.programmatic += programmatic;
  return kSuccess;
}
}  // namespace

CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned, void* stream, void** params, void** extra) {
  if (!params && !extra) return kInvalidValue;
  return launch(fn, gx, gy, gz, bx, by, bz, stream, false);
}

// CUlaunchConfig / CUlaunchAttribute as cuda.h lays them out (see cuda_driver.cc).
struct LaunchAttribute {
  int id;
  char pad[4];
  alignas(8) unsigned char value[64];
};
struct LaunchConfig {
  unsigned grid[3], block[3], shared;
  void* stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
};
CUresult cuLaunchKernelEx(const LaunchConfig* c, void* fn, void** params, void**) {
  if (!c || !params || (c->num_attrs > 0 && !c->attrs)) return kInvalidValue;
  bool programmatic = false;
  for (unsigned i = 0; i < c->num_attrs; ++i) {
    if (c->attrs[i].id != 6) return kInvalidValue;  // only PROGRAMMATIC_STREAM_SERIALIZATION here
    int allowed = 0;
    std::memcpy(&allowed, c->attrs[i].value, sizeof(allowed));
    programmatic = allowed != 0;
  }
  if (programmatic && state().cc < 90) return kNotSupported;
  return launch(fn, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2], c->stream,
                programmatic);
}

CUresult cuStreamCreate(void** stream, unsigned flags) {
  if (CUresult r = need_context()) return r;
  if (flags > 1) return kInvalidValue;
  *stream = own(new Stream);
  return kSuccess;
}
CUresult cuStreamBeginCapture_v2(void* stream, int mode) {
  if (CUresult r = need_context()) return r;
  if (!state().graphs) return kNotSupported;
  Stream* st = static_cast<Stream*>(stream);
  if (!st || capture.stream || mode < 0 || mode > 2) return kInvalidValue;
  capture = Capture{st, false, 0};
  return kSuccess;
}
CUresult cuStreamEndCapture(void* stream, void** graph) {
  if (CUresult r = need_context()) return r;
  Stream* st = static_cast<Stream*>(stream);
  if (!st || st != capture.stream) return kInvalidValue;
  const Capture done = capture;
  capture = Capture{};
  if (done.invalidated) return kCaptureInvalidated;
  *graph = own(new Graph{done.launches});
  return kSuccess;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
  if (!graph) return kInvalidValue;
  *exec = own(new Graph(*static_cast<Graph*>(graph)));
  return kSuccess;
}
CUresult cuGraphLaunch(void* exec, void*) {
  if (CUresult r = need_context()) return r;
  if (!exec) return kInvalidValue;
  std::lock_guard<std::mutex> l(state().mu);
  ++state().graph_launches;
  state().launches += uint64_t(static_cast<Graph*>(exec)->launches);
  return kSuccess;
}
CUresult cuGraphExecDestroy(void* exec) {
  release(exec);
  return kSuccess;
}
CUresult cuGraphDestroy(void* graph) {
  release(graph);
  return kSuccess;
}

CUresult cuEventCreate(void** e, unsigned) {
  if (CUresult r = need_context()) return r;
  *e = own(new Event);
  return kSuccess;
}
CUresult cuEventRecord(void* e, void*) {
  if (CUresult r = need_context()) return r;
  if (!e) return kInvalidValue;
  static_cast<Event*>(e)->at = std::chrono::steady_clock::now();
  static_cast<Event*>(e)->recorded = true;
  return kSuccess;
}
CUresult cuEventSynchronize(void* e) {
  if (CUresult r = need_context()) return r;
  return e ? kSuccess : kInvalidValue;
}
CUresult cuEventElapsedTime_v2(float* ms, void* start, void* end) {
  if (CUresult r = need_context()) return r;
  const Event *a = static_cast<Event*>(start), *b = static_cast<Event*>(end);
  if (!ms || !a || !b || !a->recorded || !b->recorded) return kInvalidValue;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* e) {
  release(e);
  return kSuccess;
}

CUresult cuGetErrorName(CUresult r, const char** name) {
  switch (r) {
    case kSuccess: *name = "CUDA_SUCCESS"; break;
    case kInvalidValue: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case kOutOfMemory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case kNotInitialized: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case kInvalidDevice: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case kInvalidImage: *name = "CUDA_ERROR_INVALID_IMAGE"; break;
    case kInvalidContext: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case kNotSupported: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case kCaptureUnsupported: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    case kCaptureInvalidated: *name = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; break;
    default: *name = nullptr; return kInvalidValue;
  }
  return kSuccess;
}

// Not part of the driver API: what the tests read back.
void llmc_fake_cuda_counts(uint64_t* launches, uint64_t* programmatic, uint64_t* graph_launches,
                           uint64_t* bytes_in_use) {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  *launches = s.launches;
  *programmatic = s.programmatic;
  *graph_launches = s.graph_launches;
  *bytes_in_use = s.in_use;
}

}  // extern "C"
