#include "runtime/plan/plan_file.h"

#include "runtime/plan/synthetic_weights.h"
#include "runtime/quant/quant_format.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "flatbuffers/flatbuffers.h"

namespace llmrt {
namespace {

const char* const kFeatures[] = {"forward_v1", "kv_f32", "weights_f32", "weights_quant_v1", "kv_i8",
                                 "synthetic_weights", "kv_bf16", "kv_f16", "kv_fp8_e4m3"};

std::string errno_text() { return std::strerror(errno); }

bool fits(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

int64_t dtype_bytes(fb::DType d) {
  switch (d) {
    case fb::DType::F32:
    case fb::DType::I32: return 4;
    case fb::DType::F16:
    case fb::DType::BF16: return 2;
    case fb::DType::I64: return 8;
    default: return 0;
  }
}

// Semantic checks that the FlatBuffers verifier cannot do: references in range, sizes
// consistent. After this, the executor may index tensors and values without bounds doubts.
Status check_semantics(const fb::Plan& plan, uint64_t weights_size) {
  if (plan.weights_size() != weights_size)
    return invalid_argument("weight section size " + std::to_string(weights_size) +
                            " does not match the plan's " + std::to_string(plan.weights_size()));
  const auto* tensors = plan.tensors();
  const int num_tensors = tensors ? static_cast<int>(tensors->size()) : 0;
  for (int i = 0; i < num_tensors; ++i) {
    const fb::Tensor* t = tensors->Get(i);
    const std::string name = t->name()->str();
    const bool quantized = t->quant() && t->quant()->size() != 0;
    const int64_t elem = quantized ? 1 : dtype_bytes(t->dtype());
    if (elem == 0) return invalid_argument("tensor '" + name + "' has an unsupported dtype");
    if (!t->shape() || t->shape()->size() == 0 || t->shape()->size() > 4)
      return invalid_argument("tensor '" + name + "' has no shape or more than 4 dims");
    uint64_t numel = 1;
    for (int64_t d : *t->shape()) {
      if (d <= 0 || d > (int64_t{1} << 40)) return invalid_argument("tensor '" + name + "' has a bad dim");
      if (numel > (uint64_t{1} << 48) / static_cast<uint64_t>(d))
        return invalid_argument("tensor '" + name + "' is too large");
      numel *= static_cast<uint64_t>(d);
    }
    uint64_t want = numel * static_cast<uint64_t>(elem);
    if (quantized) {
      // Quantized: a 2-D [rows, k] tensor of whole rows (or tiles of rows) of its format and
      // layout (quant_format.h).
      const std::string qname = t->quant()->str();
      StatusOr<quant::Format> f = quant::parse_format(qname);
      if (!f.ok()) return f.status().with_context("tensor '" + name + "'");
      if (t->dtype() != (f->bits == 8 ? fb::DType::I8 : f->bits == 5 ? fb::DType::I5 : fb::DType::I4))
        return invalid_argument("tensor '" + name + "' has dtype " + fb::EnumNameDType(t->dtype()) +
                                " but format " + qname);
      if (t->shape()->size() != 2)
        return invalid_argument("quantized tensor '" + name + "' is not 2-D");
      StatusOr<quant::Layout> layout = quant::parse_layout(t->layout() ? t->layout()->str() : std::string());
      if (!layout.ok()) return layout.status().with_context("tensor '" + name + "'");
      StatusOr<uint64_t> bytes = quant::tensor_bytes(*f, *layout, t->shape()->Get(0), t->shape()->Get(1));
      if (!bytes.ok()) return bytes.status().with_context("tensor '" + name + "'");
      want = *bytes;
    }
    if (want != t->size())
      return invalid_argument("tensor '" + name + "' size " + std::to_string(t->size()) +
                              " does not match its shape and " + (quantized ? "format and layout" : "dtype"));
    if (t->offset() % kTensorAlignment != 0)
      return invalid_argument("tensor '" + name + "' is not 64-byte aligned");
    if (!fits(t->offset(), t->size(), weights_size))
      return invalid_argument("tensor '" + name + "' lies outside the weight section");
  }
  const auto* kernels = plan.kernels();
  const int num_kernels = kernels ? static_cast<int>(kernels->size()) : 0;
  if (!plan.programs() || plan.programs()->size() == 0)
    return invalid_argument("plan has no programs");
  for (const fb::Program* prog : *plan.programs()) {
    const std::string pname = prog->name()->str();
    const int num_values = prog->values() ? static_cast<int>(prog->values()->size()) : 0;
    for (int i = 0; i < num_values; ++i) {
      const fb::Value* v = prog->values()->Get(i);
      if (static_cast<int>(v->id()) != i)
        return invalid_argument("program '" + pname + "': value ids must be dense and ordered");
      if (v->width() <= 0 || v->width() > (int64_t{1} << 32))
        return invalid_argument("program '" + pname + "': value " + std::to_string(i) + " has a bad width");
      if (dtype_bytes(v->dtype()) == 0)
        return invalid_argument("program '" + pname + "': value " + std::to_string(i) + " has a bad dtype");
    }
    auto value_ok = [&](int id) { return id >= 0 && id < num_values; };
    if (!value_ok(prog->token_input()) || !value_ok(prog->position_input()) || !value_ok(prog->output()))
      return invalid_argument("program '" + pname + "': input/output value ids out of range");
    if (!prog->steps()) return invalid_argument("program '" + pname + "' has no steps");
    if (const int k = prog->logits_summary_kernel(); k != -1) {
      if (k < 0 || k >= num_kernels)
        return invalid_argument("program '" + pname + "': logits summary kernel index out of range");
      const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (!kernel->family() || kernel->family()->str() != "logits_summary")
        return invalid_argument("program '" + pname + "': its logits summary kernel is of family '" +
                                (kernel->family() ? kernel->family()->str() : std::string()) + "'");
    }
    if (const int k = prog->sampling_kernel(); k != -1) {
      if (k < 0 || k >= num_kernels)
        return invalid_argument("program '" + pname + "': sampling kernel index out of range");
      const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (!kernel->family() || kernel->family()->str() != "sample")
        return invalid_argument("program '" + pname + "': its sampling kernel is of family '" +
                                (kernel->family() ? kernel->family()->str() : std::string()) + "'");
      if (prog->logits_summary_kernel() == -1)
        return invalid_argument("program '" + pname + "': a sampling kernel without the logits summary kernel "
                                "(it reads the rows' summaries)");
    }
    int index = 0;
    const fb::Step* prev_step = nullptr;
    std::vector<int> rope_q;  // the q values of steps with a rope_kernel: read by them only
    std::vector<int> silu_y;  // the outputs of linear steps with a silu_kernel: read by the silu_mul only
    auto row_bytes = [&](int id) {  // a value's bytes within an arena row
      const fb::Value* v = prog->values()->Get(static_cast<flatbuffers::uoffset_t>(id));
      return std::pair<uint64_t, uint64_t>{v->offset_per_row(),
                                           v->offset_per_row() + static_cast<uint64_t>(v->width()) * dtype_bytes(v->dtype())};
    };
    for (const fb::Step* step : *prog->steps()) {
      const std::string where = "program '" + pname + "' step " + std::to_string(index++);
      if (step->inputs())
        for (int id : *step->inputs())
          if (id != -1 && !value_ok(id)) return invalid_argument(where + ": input value id out of range");
      if (step->outputs())
        for (int id : *step->outputs())
          if (!value_ok(id)) return invalid_argument(where + ": output value id out of range");
      if (step->weights())
        for (int id : *step->weights())
          if (id != -1 && (id < 0 || id >= num_tensors))
            return invalid_argument(where + ": weight index out of range");
      if (step->kernel() != -1 && (step->kernel() < 0 || step->kernel() >= num_kernels))
        return invalid_argument(where + ": kernel index out of range");
      if (step->batched_kernel() != -1 &&
          (step->batched_kernel() < 0 || step->batched_kernel() >= num_kernels || step->kernel() < 0 ||
           step->batched_min_rows() < 1))
        return invalid_argument(where + ": batched kernel index out of range, without a kernel, or from "
                                        "fewer than 1 row");
      if (step->gemm_library() != fb::GemmLibrary::None) {
        // The library stands in for the batched kernel, which stays as the fallback.
        if (step->gemm_library() != fb::GemmLibrary::CublasLt)
          return invalid_argument(where + ": unknown GEMM library " +
                                  std::to_string(static_cast<int>(step->gemm_library())));
        if (step->op() != fb::OpKind::Linear || step->batched_kernel() < 0)
          return invalid_argument(where + ": a GEMM library on a step that is not a linear with a batched kernel");
      }
      if (const int k = step->library_input_kernel(); k != -1) {
        if (step->gemm_library() == fb::GemmLibrary::None || k < 0 || k >= num_kernels)
          return invalid_argument(where + ": library input kernel index out of range, or without a library");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "to_bf16")
          return invalid_argument(where + ": its library input kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) + "'");
      }
      if (const int k = step->library_weight_kernel(); k != -1) {
        // A quantized weight dequantized to bf16 for the library, which then needs bf16 input.
        if (step->gemm_library() == fb::GemmLibrary::None || k < 0 || k >= num_kernels ||
            step->library_input_kernel() < 0)
          return invalid_argument(where + ": library weight kernel index out of range, or without a library "
                                          "and its bf16 input kernel");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "dequant_bf16")
          return invalid_argument(where + ": its library weight kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) + "'");
      }
      if (const int k = step->input_quant_kernel(); k != -1) {
        // Int8 activations for the step's own kernel: quantized linear / logits steps only.
        if ((step->op() != fb::OpKind::Linear && step->op() != fb::OpKind::Logits) || step->kernel() < 0 || k < 0 ||
            k >= num_kernels)
          return invalid_argument(where + ": input quantization kernel index out of range, or on a step that is not "
                                          "a linear or logits with a kernel");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "quantize_q8")
          return invalid_argument(where + ": its input quantization kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) + "'");
      }
      if (step->quantized_output() &&
          (step->kernel() < 0 || (step->op() != fb::OpKind::RmsNorm && step->op() != fb::OpKind::AddRmsNorm &&
                                  step->op() != fb::OpKind::SiluMul && step->op() != fb::OpKind::PermuteColumns &&
                                  step->op() != fb::OpKind::PagedAttention)))
        return invalid_argument(where + ": quantized_output on a step that is not an rms_norm, add_rms_norm, "
                                        "silu_mul, permute_columns or paged_attention with a kernel");
      if (const int k = step->rope_kernel(); k != -1) {
        // The decode attention with the rope_kv_store before it inside: that step's q output is
        // this step's q, its positions the program's.
        const auto* in = step->inputs();
        const auto* store_in = prev_step ? prev_step->inputs() : nullptr;
        const auto* store_out = prev_step ? prev_step->outputs() : nullptr;
        if (step->op() != fb::OpKind::PagedAttention || step->kernel() < 0 || k < 0 || k >= num_kernels || !prev_step ||
            prev_step->op() != fb::OpKind::RopeKvStore || !in || in->size() == 0 || !store_in || store_in->size() < 2 ||
            !store_out || store_out->size() == 0 || store_out->Get(0) != in->Get(0) ||
            store_in->Get(1) != prog->position_input())
          return invalid_argument(where + ": rope kernel index out of range, or not on a paged_attention step with a "
                                          "kernel whose q is the output of the rope_kv_store step just before it "
                                          "(over the program's positions)");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "paged_attention")
          return invalid_argument(where + ": its rope kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) + "'");
        // That kernel reads qkv while it writes its outputs: their arena rows must not overlap.
        const int qkv = store_in->Get(0);
        if (!value_ok(qkv)) return invalid_argument(where + ": its rope_kv_store's qkv value id is out of range");
        if (const auto* outs = step->outputs())
          for (int id : *outs) {
            const auto [a0, a1] = row_bytes(qkv);
            const auto [b0, b1] = row_bytes(id);
            if (a0 < b1 && b0 < a1)
              return invalid_argument(where + ": its rope kernel reads the rope_kv_store's qkv (value " +
                                      std::to_string(qkv) + ") where it writes value " + std::to_string(id) +
                                      " (their arena rows overlap)");
          }
        rope_q.push_back(in->Get(0));
      }
      if (prev_step && prev_step->silu_kernel() != -1) {
        // The decode GEMV of the linear step before writes this silu_mul's output in its place:
        // this step is that silu_mul (fused gate|up input: the linear's output), and that kernel
        // reads the linear's input while it writes this output.
        const auto* in = step->inputs();
        const auto* out = step->outputs();
        const auto* y = prev_step->outputs();
        const auto* x = prev_step->inputs();
        if (step->op() != fb::OpKind::SiluMul || !in || in->size() != 1 || !y || y->size() == 0 ||
            in->Get(0) != y->Get(0) || !out || out->size() == 0 || !x || x->size() == 0 || !value_ok(x->Get(0)))
          return invalid_argument(where + ": the linear step before it has a silu kernel, but this step is not the "
                                          "silu_mul of that step's output (a fused gate|up)");
        const auto [a0, a1] = row_bytes(x->Get(0));
        const auto [b0, b1] = row_bytes(out->Get(0));
        if (a0 < b1 && b0 < a1)
          return invalid_argument(where + ": the silu kernel of the step before reads value " +
                                  std::to_string(x->Get(0)) + " where it writes value " + std::to_string(out->Get(0)) +
                                  " (their arena rows overlap)");
        silu_y.push_back(y->Get(0));
      }
      if (const int k = step->silu_kernel(); k != -1) {
        if (step->op() != fb::OpKind::Linear || step->kernel() < 0 || k < 0 || k >= num_kernels)
          return invalid_argument(where + ": silu kernel index out of range, or not on a linear step with a kernel");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "linear")
          return invalid_argument(where + ": its silu kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) + "'");
        if (index == static_cast<int>(prog->steps()->size()))
          return invalid_argument(where + ": a silu kernel on the last step (no silu_mul after it)");
      }
      if (const int k = step->norm_kernel(); k != -1) {
        // The decode GEMV with the add_rms_norm step after it inside: that step adds this step's
        // output y to its other input (y one of its two inputs, not both).
        const fb::Step* next = index < static_cast<int>(prog->steps()->size())
                                   ? prog->steps()->Get(static_cast<flatbuffers::uoffset_t>(index))
                                   : nullptr;
        const auto* y = step->outputs();
        const auto* in = next ? next->inputs() : nullptr;
        if (step->op() != fb::OpKind::Linear || step->kernel() < 0 || k < 0 || k >= num_kernels ||
            step->silu_kernel() != -1)
          return invalid_argument(where + ": norm kernel index out of range, or not on a linear step with a kernel "
                                          "(and no silu kernel)");
        const fb::Kernel* kernel = kernels->Get(static_cast<flatbuffers::uoffset_t>(k));
        if (!kernel->family() || kernel->family()->str() != "linear" || kernel->workspace_bytes() < 4)
          return invalid_argument(where + ": its norm kernel is of family '" +
                                  (kernel->family() ? kernel->family()->str() : std::string()) +
                                  "' or takes no workspace (its counter)");
        if (!next || next->op() != fb::OpKind::AddRmsNorm || !in || in->size() < 2 || !y || y->size() == 0 ||
            (in->Get(0) == y->Get(0)) == (in->Get(1) == y->Get(0)) || !next->outputs() || next->outputs()->size() < 2)
          return invalid_argument(where + ": it has a norm kernel, but the step after it is not an add_rms_norm of "
                                          "its output and another value");
      }
      if (step->library_min_rows() < 0 || (step->library_min_rows() > 0 && step->gemm_library() == fb::GemmLibrary::None))
        return invalid_argument(where + ": library_min_rows " + std::to_string(step->library_min_rows()) +
                                " is negative or without a library");
      if (step->params()) {
        const flatbuffers::String* prev = nullptr;
        for (const fb::Param* p : *step->params()) {
          if (prev && !(prev->str() < p->key()->str()))
            return invalid_argument(where + ": params are not sorted by key");
          prev = p->key();
        }
      }
      prev_step = step;
    }
    // Values a decode kernel doing two steps' work never writes (a rope kernel's q, a silu
    // kernel's gate|up): only the step it does besides its own may read them.
    auto single_reader = [&](const std::vector<int>& ids, const char* what, const char* who) {
      for (const int id : ids) {
        int readers = 0;
        for (const fb::Step* step : *prog->steps())
          if (step->inputs()) readers += static_cast<int>(std::count(step->inputs()->begin(), step->inputs()->end(), id));
        if (readers != 1 || id == prog->output())
          return invalid_argument("program '" + pname + "': value " + std::to_string(id) + ", " + what + ", is read by " +
                                  std::to_string(readers) + " steps (that kernel never writes it: only " + who + " may)");
      }
      return ok_status();
    };
    RETURN_IF_ERROR(single_reader(silu_y, "the output of a linear step with a silu kernel", "the silu_mul"));
    RETURN_IF_ERROR(single_reader(rope_q, "the q of a step with a rope kernel", "that step"));
  }
  return ok_status();
}

}  // namespace

const char* const* supported_features(size_t* count) {
  *count = sizeof(kFeatures) / sizeof(kFeatures[0]);
  return kFeatures;
}

StatusOr<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open '" + path + "': " + errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string e = errno_text();
    ::close(fd);
    return invalid_argument("cannot stat '" + path + "': " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'" + path + "' is not a regular file");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string e = errno_text();
      ::close(fd);
      return invalid_argument("cannot map '" + path + "': " + e);
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

Plan::~Plan() = default;

StatusOr<std::unique_ptr<Plan>> Plan::open(const std::string& path, bool generate_synthetic) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::open(path));
  const uint8_t* data = file->data();
  size_t size = file->size();
  auto plan = from_memory(std::move(file), nullptr, UINT64_MAX, generate_synthetic, data, size);
  if (!plan.ok()) return plan.status().with_context("plan '" + path + "'");
  return plan;
}

StatusOr<std::unique_ptr<Plan>> Plan::from_bytes(const uint8_t* data, size_t size,
                                                 uint64_t max_synthetic_bytes) {
  // Copy into 64-byte aligned storage so FlatBuffers' alignment checks hold.
  const size_t rounded = (size + 63) / 64 * 64 + 64;
  OwnedBytes owned(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  if (!owned) return resource_exhausted("cannot allocate " + std::to_string(size) + " bytes for a plan");
  if (size) std::memcpy(owned.get(), data, size);
  const uint8_t* p = owned.get();
  return from_memory(nullptr, std::move(owned), max_synthetic_bytes, true, p, size);
}

void Plan::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

StatusOr<std::unique_ptr<Plan>> Plan::from_memory(std::unique_ptr<MappedFile> file, OwnedBytes owned,
                                                  uint64_t max_synthetic_bytes, bool generate_synthetic,
                                                  const uint8_t* data, size_t size) {
  if (size < sizeof(PlanFileHeader))
    return invalid_argument("file is too small to be a plan (" + std::to_string(size) + " bytes)");
  PlanFileHeader h;
  std::memcpy(&h, data, sizeof(h));
  if (std::memcmp(h.magic, kPlanMagic, sizeof(kPlanMagic)) != 0)
    return invalid_argument("not a plan file (bad magic)");
  if (h.header_version != 1)
    return unimplemented("plan file header version " + std::to_string(h.header_version) +
                         " is not supported (this runtime reads version 1)");
  if (h.flatbuffer_offset != sizeof(PlanFileHeader) || !fits(h.flatbuffer_offset, h.flatbuffer_size, size))
    return invalid_argument("plan header: FlatBuffer range outside the file (truncated?)");
  if (h.weights_offset % kWeightAlignment != 0 ||
      h.weights_offset < h.flatbuffer_offset + h.flatbuffer_size || !fits(h.weights_offset, h.weights_size, size))
    return invalid_argument("plan header: weight section outside the file (truncated?)");
  const uint8_t* fbuf = data + h.flatbuffer_offset;
  if (h.flatbuffer_size < 8 || !fb::PlanBufferHasIdentifier(fbuf))
    return invalid_argument("plan FlatBuffer has no 'LLMP' identifier");
  flatbuffers::Verifier::Options opts;
  opts.max_tables = 100'000'000;
  opts.max_depth = 64;
  flatbuffers::Verifier verifier(fbuf, h.flatbuffer_size, opts);
  if (!fb::VerifyPlanBuffer(verifier)) return invalid_argument("plan FlatBuffer failed verification (corrupted)");
  const fb::Plan* root = fb::GetPlan(fbuf);
  if (root->schema_major() != kSchemaMajor)
    return unimplemented("plan schema major version " + std::to_string(root->schema_major()) +
                         " is not supported by this runtime (schema " + std::to_string(kSchemaMajor) + "." +
                         std::to_string(kSchemaMinor) + "); recompile the model with a matching llmc");
  if (root->cpu_kernel_abi() != kCpuKernelAbi)
    return unimplemented("plan needs CPU kernel ABI " + std::to_string(root->cpu_kernel_abi()) +
                         ", this runtime implements " + std::to_string(kCpuKernelAbi) +
                         "; recompile the model with a matching llmc");
  if (root->required_features()) {
    size_t n = 0;
    const char* const* have = supported_features(&n);
    std::set<std::string> known(have, have + n);
    for (const flatbuffers::String* f : *root->required_features())
      if (!known.count(f->str()))
        return unimplemented("plan requires feature '" + f->str() + "' which this runtime lacks");
  }
  // Synthetic weights: no bytes in the file (header size 0); generated here, the plan's size.
  const bool synthetic = root->synthetic_weights();
  if (synthetic && h.weights_size != 0)
    return invalid_argument("plan with synthetic weights has a weight section in the file");
  const uint64_t weights_size = synthetic ? root->weights_size() : h.weights_size;
  if (synthetic && generate_synthetic) {
    const uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
    const uint64_t cap = std::min(phys, max_synthetic_bytes);
    if (weights_size > cap)
      return resource_exhausted("plan with synthetic weights needs " + std::to_string(weights_size) +
                                " bytes of weights, more than " +
                                (cap == phys ? "this machine's memory (" : "the limit (") +
                                std::to_string(cap) + " bytes)");
  }
  RETURN_IF_ERROR(check_semantics(*root, weights_size));
  std::unique_ptr<Plan> plan(new Plan());
  plan->file_ = std::move(file);
  plan->owned_ = std::move(owned);
  plan->header_ = h;
  plan->fb_ = root;
  plan->weights_ = data + h.weights_offset;
  if (synthetic && !generate_synthetic) {
    plan->weights_ = nullptr;
    plan->header_.weights_size = weights_size;
  } else if (synthetic) {
    const uint64_t bytes = std::max<uint64_t>(kWeightAlignment, (weights_size + kWeightAlignment - 1) /
                                                                    kWeightAlignment * kWeightAlignment);
    plan->synthetic_.reset(static_cast<uint8_t*>(std::aligned_alloc(kWeightAlignment, bytes)));
    if (!plan->synthetic_)
      return resource_exhausted("cannot allocate " + std::to_string(weights_size) +
                                " bytes for the plan's synthetic weights");
    RETURN_IF_ERROR(generate_synthetic_weights(*root, root->synthetic_seed(), plan->synthetic_.get(), weights_size));
    plan->weights_ = plan->synthetic_.get();
    plan->header_.weights_size = weights_size;
  }
  return plan;
}

const uint8_t* Plan::tensor_data(int index) const {
  return weights_ + fb_->tensors()->Get(index)->offset();
}

int Plan::find_tensor(std::string_view name) const {
  if (!fb_->tensors()) return -1;
  for (int i = 0; i < static_cast<int>(fb_->tensors()->size()); ++i)
    if (fb_->tensors()->Get(i)->name()->string_view() == name) return i;
  return -1;
}

Status Plan::verify_weights_hash() const {
  if (synthetic_weights()) return ok_status();  // generated at load: nothing stored to check
  uint64_t h = XXH3_64bits(weights_, header_.weights_size);
  if (h != header_.weights_hash)
    return invalid_argument("weight section hash mismatch: the plan's weights are corrupted");
  return ok_status();
}

const fb::Program* Plan::program(std::string_view name) const {
  for (const fb::Program* p : *fb_->programs())
    if (p->name()->string_view() == name) return p;
  return nullptr;
}

const fb::Param* find_param(const fb::Step& step, std::string_view key) {
  if (!step.params()) return nullptr;
  for (const fb::Param* p : *step.params())
    if (p->key()->string_view() == key) return p;
  return nullptr;
}

uint64_t step_weight_bytes(const fb::Plan& plan, const fb::Step& step) {
  if (step.op() == fb::OpKind::Embedding || !step.weights() || !plan.tensors()) return 0;
  uint64_t bytes = 0;
  for (int32_t w : *step.weights())
    if (w >= 0 && static_cast<uint32_t>(w) < plan.tensors()->size()) bytes += plan.tensors()->Get(w)->size();
  return bytes;
}

struct PlanFileWriter::State {
  FILE* f = nullptr;
  std::string path;
  XXH3_state_t* hash = nullptr;
  PlanFileHeader header{};
  ~State() {
    if (f) fclose(f);
    if (hash) XXH3_freeState(hash);
  }
};

StatusOr<std::unique_ptr<PlanFileWriter>> PlanFileWriter::create(const std::string& path,
                                                                  const uint8_t* flatbuffer,
                                                                  size_t flatbuffer_size,
                                                                  uint64_t weights_size) {
  std::unique_ptr<PlanFileWriter> w(new PlanFileWriter());
  w->state_ = std::make_unique<State>();
  State& s = *w->state_;
  s.path = path;
  s.f = fopen(path.c_str(), "wb");
  if (!s.f) return invalid_argument("cannot create '" + path + "': " + errno_text());
  s.hash = XXH3_createState();
  XXH3_64bits_reset(s.hash);
  PlanFileHeader& h = s.header;
  std::memcpy(h.magic, kPlanMagic, sizeof(kPlanMagic));
  h.header_version = 1;
  h.flatbuffer_offset = sizeof(PlanFileHeader);
  h.flatbuffer_size = flatbuffer_size;
  h.weights_offset = (h.flatbuffer_offset + flatbuffer_size + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
  h.weights_size = weights_size;
  w->expected_ = weights_size;
  std::vector<uint8_t> pad(h.weights_offset - h.flatbuffer_offset - flatbuffer_size, 0);
  if (fwrite(&h, sizeof(h), 1, s.f) != 1 || fwrite(flatbuffer, 1, flatbuffer_size, s.f) != flatbuffer_size ||
      (!pad.empty() && fwrite(pad.data(), 1, pad.size(), s.f) != pad.size()))
    return invalid_argument("writing '" + path + "': " + errno_text());
  return w;
}

PlanFileWriter::~PlanFileWriter() = default;

Status PlanFileWriter::append(const void* data, size_t size) {
  if (size > expected_ - written_) return internal_error("plan writer: more weight bytes than declared");
  if (size && fwrite(data, 1, size, state_->f) != size)
    return invalid_argument("writing '" + state_->path + "': " + errno_text());
  XXH3_64bits_update(state_->hash, data, size);
  written_ += size;
  return ok_status();
}

Status PlanFileWriter::pad_to(uint64_t offset) {
  if (offset < written_) return internal_error("plan writer: tensors out of offset order");
  static const uint8_t zeros[4096] = {};
  while (written_ < offset) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(zeros), offset - written_));
    RETURN_IF_ERROR(append(zeros, n));
  }
  return ok_status();
}

Status PlanFileWriter::finish() {
  State& s = *state_;
  if (written_ != expected_)
    return internal_error("plan writer: wrote " + std::to_string(written_) + " weight bytes, declared " +
                          std::to_string(expected_));
  s.header.weights_hash = XXH3_64bits_digest(s.hash);
  if (fseek(s.f, 0, SEEK_SET) != 0 || fwrite(&s.header, sizeof(s.header), 1, s.f) != 1)
    return invalid_argument("writing '" + s.path + "': " + errno_text());
  int rc = fclose(s.f);
  s.f = nullptr;
  if (rc != 0) return invalid_argument("closing '" + s.path + "': " + errno_text());
  return ok_status();
}

}  // namespace llmrt
