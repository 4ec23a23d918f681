//===- KernelSource.cpp - Helpers for writing kernel source ---------------===//

#include "codegen/KernelSource.h"

#include "runtime/quant/quant_format.h"

#include <cassert>
#include <cmath>
#include <cstdio>

namespace llmc {
namespace detail {

std::string floatLiteral(float value) {
  assert(std::isfinite(value) && "kernel constants must be finite");
  // 9 significant digits round-trip every float; %e keeps the form stable.
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.8ef", static_cast<double>(value));
  return buf;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string substitute(
    std::string_view tmpl,
    const std::vector<std::pair<std::string, std::string>> &bindings) {
  std::string out;
  out.reserve(tmpl.size() + 256);
  std::vector<bool> used(bindings.size(), false);
  size_t pos = 0;
  while (pos < tmpl.size()) {
    size_t open = tmpl.find("${", pos);
    if (open == std::string_view::npos) {
      out.append(tmpl.substr(pos));
      break;
    }
    out.append(tmpl.substr(pos, open - pos));
    size_t close = tmpl.find('}', open + 2);
    assert(close != std::string_view::npos && "unterminated placeholder");
    std::string_view name = tmpl.substr(open + 2, close - open - 2);
    bool found = false;
    for (size_t i = 0; i < bindings.size(); ++i) {
      if (bindings[i].first == name) {
        out.append(bindings[i].second);
        used[i] = true;
        found = true;
        break;
      }
    }
    // ${ENTRY} stays for finishSpec.
    if (!found) {
      assert(name == "ENTRY" && "unbound template placeholder");
      out.append(tmpl.substr(open, close - open + 1));
    }
    pos = close + 1;
  }
  for (size_t i = 0; i < used.size(); ++i)
    assert(used[i] && "unused template binding");
  (void)used;
  return out;
}

const char *const kBlockReductions = R"cuda(
__device__ __forceinline__ float reduceMax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double reduceMax(double a, double b) { return fmax(a, b); }
// Every thread's v combined over the block, returned to every thread: an xor tree in each warp,
// then the same tree over the warps' results (each warp computes it, so one barrier publishes
// them and one more frees `red` for the next call). The order depends on kBlock only.
template <bool kMax, class T>
__device__ __forceinline__ T blockReduce(T v, T *red) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "blocks of whole warps");
  constexpr int kRedWarps = kBlock / 32;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? reduceMax(v, u) : v + u;
  }
  if (lane == 0)
    red[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = lane < kRedWarps ? red[lane] : (kMax ? red[0] : T(0));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T u = __shfl_xor_sync(0xffffffffu, r, o);
    r = kMax ? reduceMax(r, u) : r + u;
  }
  __syncthreads();
  return r;
}
template <class T> __device__ __forceinline__ T blockSum(T v, T *red) { return blockReduce<false>(v, red); }
template <class T> __device__ __forceinline__ T blockMax(T v, T *red) { return blockReduce<true>(v, red); }
)cuda";

// Tensor-core operations (sm_80+): TF32 mma.sync m16n8k8 with f32 accumulation, and the
// round-to-TF32 conversion of its operands. The host emulation provides both with the PTX ISA's
// semantics (tests/codegen/HostEmulation.h).
const char *const kTf32Mma = R"cuda(namespace {
__device__ __forceinline__ unsigned toTf32(float v) {
#ifdef LLMC_HOST_EMULATION
  return llmcEmuToTf32(v);
#else
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
#endif
}

// acc += A B over one k-step of 8: A 16 rows x 8 (a0..a3), B 8 x 8 columns (b0, b1), with the
// fragment layout of mma.m16n8k8 .tf32 (lane 4 g + q: a0 (g, q) a1 (g+8, q) a2 (g, q+4)
// a3 (g+8, q+4); b0 (k q, column g) b1 (k q+4, column g); acc (g, 2q) (g, 2q+1) (g+8, 2q)
// (g+8, 2q+1)).
__device__ __forceinline__ void mmaTf32(float acc[4], const unsigned a[4], const unsigned b[2]) {
#ifdef LLMC_HOST_EMULATION
  llmcEmuMmaTf32(acc, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
} // namespace
)cuda";

const char *const kFloatConversions = R"cuda(namespace {
// IEEE half -> float, exact (no cuda_fp16.h: sources are self-contained): the conversion
// instruction on the GPU (the bit-level form, which ptxas kept as ~12 instructions and two
// branches, made every f16 scale of a quantized GEMV cost as much as its 8 weights), the same
// mapping spelled out for the host emulation.
__device__ __forceinline__ float halfToFloat(unsigned h) {
#ifndef LLMC_HOST_EMULATION
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
  return f;
#else
  const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu,
                 man = h & 0x3ffu;
  if (exp == 0) {
    const float f = (float)man * 5.9604644775390625e-08f; // man * 2^-24
    return sign ? -f : f;
  }
  if (exp == 31)
    return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
#endif
}
__device__ __forceinline__ float bf16ToFloat(unsigned h) {
  return __uint_as_float(h << 16);
}
// float -> IEEE half bits, round to nearest, ties to even; past the largest finite half (65504)
// rounds to infinity (cvt.rn.f16.f32; the CPU backend's quant::float_to_half, the same bits
// spelled out for the host emulation; NaN stays NaN, quiet).
__device__ __forceinline__ unsigned short floatToHalf(float f) {
#ifndef LLMC_HOST_EMULATION
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) // inf, NaN
    return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) // 65520 and up: the tie above 65504 goes to the even infinity
    return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) // below 2^-14: a subnormal half, a * 2^24 rounded to an integer (exact scaling)
    return (unsigned short)(sign | (unsigned)rintf(__uint_as_float(a) * 16777216.0f));
  const unsigned m = a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u; // rebias 127 -> 15, round
  return (unsigned short)(sign | (m >> 13));
#endif
}
// float -> bf16 bits, round to nearest, ties to even (as __float2bfloat16_rn and the CPU
// backend round); NaN stays NaN (quiet), infinities stay infinite, values past bf16's largest
// finite round to infinity as IEEE rounding does.
__device__ __forceinline__ unsigned short floatToBf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, quiet
    return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// 16 bytes, for one vector load (ld.global.v4) where the address is 16-byte aligned.
struct alignas(16) Vec16 {
  unsigned u[4];
};
// The 4 floats at p (16-byte aligned).
__device__ __forceinline__ void loadFloat4(const float *p, float out[4]) {
  const Vec16 v = *reinterpret_cast<const Vec16 *>(p);
#pragma unroll
  for (int c = 0; c < 4; ++c)
    out[c] = __uint_as_float(v.u[c]);
}
} // namespace
)cuda";

namespace {

constexpr const char *kDenseConstants = R"cuda(namespace {
constexpr int kWeightType = ${WEIGHT_TYPE}; // 0 f16, 1 bf16, 2 f32
constexpr int kWeightBytes = kWeightType == 2 ? 4 : 2;
constexpr int kWeightVec = 16 / kWeightBytes; // elements per 16-byte load

// Elements i .. i + kWeightVec - 1 of the weight in one 16-byte load (i * kWeightBytes a multiple
// of 16 from a 16-byte aligned w).
__device__ __forceinline__ void weightVec(const unsigned char *w, long long i, float out[kWeightVec]) {
  const Vec16 v = *reinterpret_cast<const Vec16 *>(w + i * kWeightBytes);
#pragma unroll
  for (int e = 0; e < kWeightVec; ++e) {
    if (kWeightType == 2) {
      out[e] = __uint_as_float(v.u[e]);
    } else {
      const unsigned h = (v.u[e / 2] >> (16 * (e % 2))) & 0xffffu;
      out[e] = kWeightType == 0 ? halfToFloat(h) : bf16ToFloat(h);
    }
  }
}

__device__ __forceinline__ float weightAt(const unsigned char *w, long long i) {
  if (kWeightType == 2)
    return reinterpret_cast<const float *>(w)[i];
  const unsigned h = reinterpret_cast<const unsigned short *>(w)[i];
  return kWeightType == 0 ? halfToFloat(h) : bf16ToFloat(h);
}
} // namespace
)cuda";

constexpr const char *kMmaTileConstants = R"cuda(namespace {
// A tile of 8 rows of ${ROW_K} elements in the cuda_mma_n8 layout (quant_format.h).
constexpr int kHeaderGroup = ${GROUP};    // elements per group header: scale [, offset] [, sub-scale codes]
constexpr int kHeaderGroups = ${ROW_K} / kHeaderGroup;
constexpr int kSub = ${SUB};              // elements per int8 sub-scale code (32, or 16: int4 / int8 sym or min); 0: none
// Elements per scale (and offset), which the kernels call a group: a sub-block of kSub elements
// (scale d * sc_j, min dmin * mc_j: exact f32 products), else the header's group (a multiple of
// 32, or 16: int8 sym or min). Groups of 16 are a k-step's (int4: nibbles 2, 3, 6, 7 of a lane's word are
// k-step 1's).
constexpr int kGroup = kSub > 0 ? kSub : kHeaderGroup;
constexpr int kGroups = ${ROW_K} / kGroup;
constexpr int kSubGroups = kGroup < 32 ? 32 / kGroup : 1; // groups per 32-element sub-block (1 or 2)
constexpr int kSubPerHeader = kSub > 0 ? kHeaderGroup / kSub : 1;
constexpr int kBits = ${BITS};            // 4 | 5 | 8
constexpr int kScaleType = ${SCALE_TYPE}; // 0 f16, 1 bf16, 2 f32
constexpr int kScaleBytes = kScaleType == 2 ? 4 : 2;
constexpr int kOffset = ${OFFSET};        // 0 sym, 1 zero point, 2 min, 3 nl (int4: grid values)
constexpr long long kTileBytes = ${TILE_BYTES};
constexpr int kOffsetsAt = 8 * kHeaderGroups * kScaleBytes;
// [header group][sc codes, then (min) mc codes][8 rows]
constexpr int kSubCodesAt = kOffsetsAt + 8 * kHeaderGroups * (kOffset == 2 ? kScaleBytes : kOffset == 1 ? 1 : 0);
constexpr int kSubCodes = kSub > 0 ? kSubPerHeader * (kOffset == 2 ? 2 : 1) : 0; // a header's, per row
constexpr int kCodesAt = kSubCodesAt + 8 * kHeaderGroups * kSubCodes;
constexpr int kW = kBits == 8 ? 8 : 4;    // lane bytes per sub-block (int5: of the low 4 bits)
constexpr int kSpanBytes = 8 * 128 * kBits / 8;
// Sub-blocks of span `span` (4 but in a short last span).
__device__ __forceinline__ int spanSubBlocks(int span) {
  return (${ROW_K} - span * 128) / 32 < 4 ? (${ROW_K} - span * 128) / 32 : 4;
}
// sym int4 / int5: a code's value is d * (code - kSymCode) (int8: the signed byte's d * code).
constexpr int kSymCode = kBits == 8 ? 0 : kBits == 5 ? 16 : 8;

// int5: the 5-bit codes of nibbles 0, 2, 4, 6 (ca) and 1, 3, 5, 7 (cb) of a lane's sub-block
// word w as bytes, hi its byte of fifth bits (bit p: nibble p's): (x & 0x55) * 0x410410 moves bits
// 0, 2, 4, 6 of x to 4, 12, 20, 28 (its other partial products carry only into bits 11, 17
// and 23, none of them).
__device__ __forceinline__ void int5Codes(unsigned w, unsigned hi, unsigned &ca, unsigned &cb) {
  ca = (w & 0x0F0F0F0Fu) | (((hi & 0x55u) * 0x410410u) & 0x10101010u);
  cb = ((w >> 4) & 0x0F0F0F0Fu) | ((((hi >> 1) & 0x55u) * 0x410410u) & 0x10101010u);
}
// int5: a span's fifth bits follow its m * 128 bytes of low 4 bits, lane L's m bytes at L * m.
// The byte of sub-block j of span `span` of lane L = 4 n + q of the tile at base.
__device__ __forceinline__ unsigned fifthBits(const unsigned char *base, int span, int j, int lane) {
  const int m = spanSubBlocks(span);
  return base[kCodesAt + span * kSpanBytes + m * 128 + lane * m + j];
}
// int5: the lane's fifth bits of span `span` as a word (sub-block j's at bits 8 j), from the tile:
// a whole span's in one 4-byte load.
__device__ __forceinline__ unsigned spanFifthBits(const unsigned char *base, int span, int lane) {
  if ((span + 1) * 128 <= ${ROW_K})
    return *reinterpret_cast<const unsigned *>(base + kCodesAt + span * kSpanBytes + 512 + lane * 4);
  unsigned hi = 0;
  for (int j = 0; j < 4; ++j)
    if (span * 128 + j * 32 < ${ROW_K})
      hi |= (unsigned)fifthBits(base, span, j, lane) << (8 * j);
  return hi;
}
constexpr int kSpans = (${ROW_K} + 127) / 128;

__device__ __forceinline__ float loadScale(const unsigned char *p) {
  if (kScaleType == 2)
    return *reinterpret_cast<const float *>(p);
  const unsigned h = *reinterpret_cast<const unsigned short *>(p);
  return kScaleType == 0 ? halfToFloat(h) : bf16ToFloat(h);
}
// A sub-scale code (a signed byte) as a float, exactly, without the int-to-float unit.
__device__ __forceinline__ float subCode(unsigned c) {
  return __uint_as_float(0x4B000000u | (c ^ 0x80u)) - 8388736.0f; // 2^23 + (c + 128) - (2^23 + 128)
}
// Tile offsets of group g's (kGroup elements') 8 rows: their header scales (the offsets at
// kOffsetsAt + groupHeaderAt(g)), their sc codes, their mc codes (min).
__device__ __forceinline__ int groupHeaderAt(int g) { return g / kSubPerHeader * 8 * kScaleBytes; }
__device__ __forceinline__ int subScalesAt(int g) {
  return kSubCodesAt + (g / kSubPerHeader * kSubCodes + g % kSubPerHeader) * 8;
}
__device__ __forceinline__ int subMinsAt(int g) { return subScalesAt(g) + 8 * kSubPerHeader; }
// Group g's scale (min: its min) of row n of the tile at base: exact in f32.
__device__ __forceinline__ float groupScale(const unsigned char *base, int g, int n) {
  const float d = loadScale(base + groupHeaderAt(g) + n * kScaleBytes);
  return kSub > 0 ? d * subCode(base[subScalesAt(g) + n]) : d;
}
__device__ __forceinline__ float groupMin(const unsigned char *base, int g, int n) {
  const float m = loadScale(base + kOffsetsAt + groupHeaderAt(g) + n * kScaleBytes);
  return kSub > 0 ? m * subCode(base[subMinsAt(g) + n]) : m;
}

// nl codes: the 16 int8 values of the IQ4 grid (quant::kNlGrid), 4 to a word.
constexpr unsigned kNlGridWords[4] = {${NL_GRID}};
// The grid values (signed bytes 0..3) of the 4 codes in nibbles 0..3 of c: one byte permute per
// half of the grid looks up c & 7, a third takes the half that bit 3 names. (Selector bit 3 is
// masked off throughout: prmt's sign-replicate flag.)
__device__ __forceinline__ unsigned nlGrid4(unsigned c) {
  const unsigned s = c & 0x7777u;
  const unsigned low = __byte_perm(kNlGridWords[0], kNlGridWords[1], s);
  const unsigned high = __byte_perm(kNlGridWords[2], kNlGridWords[3], s);
  return __byte_perm(low, high, 0x3210u | ((c & 0x8888u) >> 1));
}
} // namespace
)cuda";
} // namespace

// kNlGridWords' initializer: quant::kNlGrid's bytes as 4 little-endian words.
std::string nlGridWords() {
  std::string out;
  for (int w = 0; w < 4; ++w) {
    uint32_t word = 0;
    for (int b = 0; b < 4; ++b)
      word |= static_cast<uint32_t>(static_cast<uint8_t>(llmrt::quant::kNlGrid[4 * w + b])) << (8 * b);
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08Xu", word);
    out += (w ? ", " : "") + std::string(hex);
  }
  return out;
}

llmrt::StatusOr<WeightSource> weightSource(const std::string &storage, int64_t k) {
  WeightSource ws;
  ws.constants = kFloatConversions;
  if (storage == "f32" || storage == "f16" || storage == "bf16") {
    ws.denseType = storage == "f16" ? 0 : storage == "bf16" ? 1 : 2;
    ws.constants += substitute(kDenseConstants, {{"WEIGHT_TYPE", std::to_string(ws.denseType)}});
    ws.tag = storage;
    return ws;
  }
  auto format = llmrt::quant::parse_format(storage);
  if (!format.ok())
    return llmrt::invalid_argument("weight '" + storage +
                                   "' is neither f32/f16/bf16 nor a quantized format (" +
                                   format.status().message() + ")");
  auto rowBytes = llmrt::quant::row_bytes(*format, k);
  if (!rowBytes.ok())
    return llmrt::invalid_argument(rowBytes.status().message());
  ws.dense = false;
  ws.tileBytes = llmrt::quant::kTileRows * *rowBytes;
  ws.constants += substitute(
      kMmaTileConstants,
      {{"ROW_K", std::to_string(k)},
       {"GROUP", std::to_string(llmrt::quant::group_elems(*format, k))},
       {"SUB", std::to_string(format->sub)},
       {"BITS", std::to_string(format->bits)},
       {"SCALE_TYPE", std::to_string(static_cast<int>(format->scale))},
       {"OFFSET", std::to_string(static_cast<int>(format->offset))},
       {"TILE_BYTES", std::to_string(ws.tileBytes)},
       {"NL_GRID", nlGridWords()}});
  ws.tag = llmrt::quant::format_name(*format);
  for (char &c : ws.tag)
    if (c == '-')
      c = '_';
  ws.tag += "_mma8";
  return ws;
}

int reductionBlockSize(int64_t n) {
  int block = 32;
  while (block < 1024 && int64_t(block) * 4 < n)
    block *= 2;
  return block;
}

int elementwiseBlockSize(int64_t n) {
  int block = 32;
  while (block < 256 && block < n)
    block *= 2;
  return block;
}

namespace {

// Programmatic dependent launch (PTX griddepcontrol, sm_90+). The runtime may launch a kernel
// while the previous kernel on its stream still runs (plan KernelImage.grid_dependency_control,
// runtime/cuda/cuda_executor.h), so every entry calls this before anything else: the wait
// returns once the previous kernel has completed and its writes are visible (the order a plain
// launch gives); launch_dependents then lets the next kernel be scheduled, and reach its own
// wait, while this one runs, which hides its launch latency. Below sm_90 (and in the host
// emulation) it is empty and the runtime launches the kernels one after the other.
//
// Before its wait a kernel may only ask the L2 for bytes that no kernel of the step writes before
// it (a GEMV's weights, the cache rows of earlier steps): llmcPrefetchL2 (cp.async.bulk.prefetch.L2,
// sm_90+, a hint nothing waits for; p and bytes multiples of 16), in pieces of at most 16 KiB (the
// PTX ISA states no largest size; no piece depends on one). The host emulation logs the pieces.
constexpr const char *kGridDependency = R"cuda(
__device__ __forceinline__ void llmcGridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void llmcPrefetchL2(const void *p, unsigned bytes) {
#if defined(LLMC_HOST_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  for (unsigned o = 0; o < bytes; o += 16384) {
    const unsigned n = bytes - o < 16384 ? bytes - o : 16384;
#if defined(LLMC_HOST_EMULATION)
    llmcEmuPrefetchL2(reinterpret_cast<unsigned long long>(p) + o, n);
#else
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char *>(p) + o), "r"(n)
                 : "memory");
#endif
  }
#endif
}
)cuda";

// `body` with kGridDependency in front and a call to it opening every __global__ function that
// does not call it itself.
std::string withGridDependency(const std::string &body) {
  std::string out = kGridDependency;
  out.reserve(out.size() + body.size() + 256);
  size_t pos = 0;
  for (size_t at = body.find("__global__"); at != std::string::npos;
       at = body.find("__global__", pos)) {
    // The body's opening brace: the first '{' after the declaration that is not
    // a `${NAME}` placeholder (the entry name is one); the declaration ends with
    // the parameter list's ')' (launch bounds and parameters only before it).
    size_t open = body.find('{', at);
    while (open != std::string::npos && open > 0 && body[open - 1] == '$')
      open = body.find('{', open + 1);
    assert(open != std::string::npos && "a __global__ function without a body");
    size_t last = body.find_last_not_of(" \t\n", open - 1);
    assert(last != std::string::npos && body[last] == ')' &&
           "a __global__ declaration must end with its parameter list");
    (void)last;
    out.append(body, pos, open + 1 - pos);
    // An entry that calls the wait itself (after reads that need no wait: a GEMV's prefetch of
    // its constant weights) keeps its own call; its text runs up to the next __global__.
    const size_t next = body.find("__global__", open);
    if (body.substr(open, next == std::string::npos ? std::string::npos : next - open)
            .find("llmcGridDependencyWait();") == std::string::npos)
      out.append("\n  llmcGridDependencyWait();");
    pos = open + 1;
  }
  out.append(body, pos, std::string::npos);
  return out;
}

} // namespace

KernelSpec finishSpec(std::string family, const std::string &prefix,
                      const std::string &kernelBody, int blockSize,
                      std::string gridRule) {
  const std::string body = withGridDependency(kernelBody);
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%012llx",
                static_cast<unsigned long long>(fnv1a64(body) >> 16));
  KernelSpec spec;
  spec.family = std::move(family);
  spec.entry = prefix + "_" + hash;
  const std::string placeholder = "${ENTRY}";
  std::string source = body;
  for (size_t at = source.find(placeholder); at != std::string::npos;
       at = source.find(placeholder, at + spec.entry.size()))
    source.replace(at, placeholder.size(), spec.entry);
  spec.source = std::move(source);
  spec.blockDim = {blockSize, 1, 1};
  spec.gridRule = std::move(gridRule);
  spec.sharedMemBytes = 0;
  return spec;
}

} // namespace detail
} // namespace llmc
