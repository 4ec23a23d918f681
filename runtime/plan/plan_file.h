// The plan file: a 64-byte header, the FlatBuffer (runtime/plan/plan.fbs), padding to
// kWeightAlignment, then the weight section. Opening a plan maps it read-only, verifies the
// FlatBuffer and checks its semantics once; after that the rest of the runtime trusts it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/status.h"
#include "runtime/plan/plan_generated.h"

namespace llmrt {

inline constexpr uint16_t kSchemaMajor = 1;
inline constexpr uint16_t kSchemaMinor = 14;  // 1: quantized weights, cpu_kernels; 2: PermuteColumns,
                                             // cuda_mma_n8; 3: RopeKvStore; 4: grid rules with
                                             // " + seqs*<s>" (tiled paged attention); 5: a step's
                                             // gemm_library and library_input_kernel (cuBLASLt);
                                             // 6: KernelImage.grid_dependency_control; 7: a
                                             // step's library_weight_kernel, library_min_rows;
                                             // 8: a step's input_quant_kernel (int8 GEMV input);
                                             // 9: a step's quantized_output; 10: a step's
                                             // rope_kernel (rope_kv_store inside the decode
                                             // attention); 11: a step's silu_kernel
                                             // (silu_mul inside the decode gate|up GEMV);
                                             // 12: a step's norm_kernel (add_rms_norm after
                                             // the decode GEMV, in its last block); 13: the
                                             // program's sampling_kernel; 14: I5 tensors
                                             // (int5 codes), sub-scale formats
/// Version of the CPU kernel ABI (step semantics + param names in PROGRAM.md).
inline constexpr uint32_t kCpuKernelAbi = 2;  // 2: fast contract sums whole blocks (kernels.h)
inline constexpr uint64_t kWeightAlignment = 4096;
inline constexpr uint64_t kTensorAlignment = 64;
inline constexpr char kPlanMagic[8] = {'L', 'L', 'M', 'P', 'L', 'A', 'N', '\0'};

/// Features this runtime implements; a plan listing anything else in required_features is refused.
const char* const* supported_features(size_t* count);

struct PlanFileHeader {
  char magic[8];
  uint32_t header_version;   // 1
  uint32_t reserved0;
  uint64_t flatbuffer_offset;  // 64
  uint64_t flatbuffer_size;
  uint64_t weights_offset;     // multiple of kWeightAlignment
  uint64_t weights_size;
  uint64_t weights_hash;       // XXH3-64 of the weight section
  uint64_t reserved1;
};
static_assert(sizeof(PlanFileHeader) == 64);

/// Read-only memory map of a whole file (RAII).
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// A verified plan. Holds the mapping (or an owned copy, for from_bytes).
class Plan {
 public:
  /// Maps `path`, verifies header, FlatBuffer, schema version, features and semantics.
  /// generate_synthetic = false (for inspect and devices, which read only the FlatBuffer): a
  /// synthetic-weights plan's weights are not generated; its weights() and tensor_data() are then
  /// null and it must not be executed.
  static StatusOr<std::unique_ptr<Plan>> open(const std::string& path, bool generate_synthetic = true);
  /// Same checks over bytes in memory (copied into aligned storage). For tests and fuzzing.
  /// `max_synthetic_bytes` caps the weights a synthetic-weights plan may make it generate (the
  /// fuzz target keeps it small); every plan is also capped by the machine's physical memory.
  static StatusOr<std::unique_ptr<Plan>> from_bytes(const uint8_t* data, size_t size,
                                                    uint64_t max_synthetic_bytes = UINT64_MAX);
  ~Plan();

  const fb::Plan& fb() const { return *fb_; }
  const PlanFileHeader& header() const { return header_; }
  const uint8_t* weights() const { return weights_; }
  uint64_t weights_size() const { return header_.weights_size; }
  /// Whether the weights were generated at load (llmc --synthetic-weights): outputs are meaningless.
  bool synthetic_weights() const { return fb_->synthetic_weights(); }
  /// Bytes of tensor `index` (already checked to lie inside the weight section).
  const uint8_t* tensor_data(int index) const;
  /// Index of the tensor called `name`, or -1.
  int find_tensor(std::string_view name) const;
  /// Recomputes the weight hash and compares it with the header (reads every weight byte).
  Status verify_weights_hash() const;
  /// The program called `name` ("forward"), or nullptr.
  const fb::Program* program(std::string_view name) const;

 private:
  Plan() = default;
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  using OwnedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;
  static StatusOr<std::unique_ptr<Plan>> from_memory(std::unique_ptr<MappedFile> file, OwnedBytes owned,
                                                     uint64_t max_synthetic_bytes, bool generate_synthetic,
                                                     const uint8_t* data, size_t size);
  std::unique_ptr<MappedFile> file_;
  OwnedBytes owned_;
  OwnedBytes synthetic_;  // generated weights of a synthetic-weights plan
  PlanFileHeader header_{};
  const fb::Plan* fb_ = nullptr;
  const uint8_t* weights_ = nullptr;
};

/// Writes a plan file: the FlatBuffer first, then weights streamed in offset order (the hash is
/// computed on the way and patched into the header at finish()).
class PlanFileWriter {
 public:
  static StatusOr<std::unique_ptr<PlanFileWriter>> create(const std::string& path,
                                                          const uint8_t* flatbuffer,
                                                          size_t flatbuffer_size,
                                                          uint64_t weights_size);
  ~PlanFileWriter();
  /// Appends weight bytes; the running total must never exceed weights_size.
  Status append(const void* data, size_t size);
  /// Pads with zeros up to `offset` (relative to the weight section).
  Status pad_to(uint64_t offset);
  uint64_t written() const { return written_; }
  /// Checks the total, patches the hash into the header and closes the file.
  Status finish();

 private:
  PlanFileWriter() = default;
  struct State;
  std::unique_ptr<State> state_;
  uint64_t written_ = 0;
  uint64_t expected_ = 0;
};

/// Decoded `Param` lookups over a step's sorted params.
const fb::Param* find_param(const fb::Step& step, std::string_view key);

/// The weight bytes a step reads whole on every call: the sizes of its weight tensors, except an
/// Embedding's table (a step gathers only its rows' rows of it). Indices outside the plan's
/// tensors count nothing. For the profilers' weight bandwidth.
uint64_t step_weight_bytes(const fb::Plan& plan, const fb::Step& step);

}  // namespace llmrt
