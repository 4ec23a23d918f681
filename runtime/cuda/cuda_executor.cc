#include "runtime/cuda/cuda_executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/cuda/module_select.h"
#include "runtime/engine/batch_check.h"
#include "runtime/plan/plan_inspect.h"
#include "runtime/engine/profiler.h"

namespace llmrt::cuda {

struct CudaExecutor::Step {
  fb::OpKind op = fb::OpKind::Unknown;
  std::string where;
  std::string family;
  using Launch = CudaExecutor::Launch;
  Launch main, batched;  // batched (kernel -1: none) runs steps of batched_min_rows rows or more
  int batched_min_rows = 0;
  std::string kernels;  // for profiles: "n4096_k4096_bf16 (tc from 16 rows)"
  uint64_t weight_bytes = 0;  // read whole per call (step_weight_bytes), for profiles
  // A dense linear the plan gives to the GEMM library: wanted (the plan asks), library (it
  // loaded: steps of library_min_rows rows or more call it), its shape and conversions.
  bool wants_library = false, library = false;
  int library_min_rows = 0;  // the fewest rows at which it calls the library
  GemmShape gemm;
  Launch to_bf16;   // kernel -1: the library reads the f32 input
  Launch dequant;   // kernel -1: the library reads the weight as stored (else dequant_bf16's copy)
  Launch quant_in;  // kernel -1: `main` reads the f32 input (else quantize_q8's int8 rows)
  bool quant_out = false;  // `main` takes a q8 pointer: its output 0 as int8 rows (when not null)
  Launch rope;  // kernel -1: none; else `main` with the rope_kv_store step before it inside (decode)
  Launch silu;  // kernel -1: none; else `main` with the silu_mul step after it inside
  uint64_t silu_q8_rows[2] = {0, 0};  // silu: int8 row bytes of `main`'s input and of the silu_mul's output
  Launch norm;  // kernel -1: none; else `main` with the add_rms_norm step after it inside (one row)

  std::vector<int> in, out;
  std::vector<int> weights;  // plan tensor indices
  int layer = 0;
  uint64_t perm_offset = 0;  // PermuteColumns: byte offset of its permutation in perms_
};

namespace {

constexpr uint64_t kAlign = 256;  // cuMemAlloc's alignment; every tensor keeps it
constexpr uint64_t kNotInArena = UINT64_MAX;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

std::vector<int> trimmed(const flatbuffers::Vector<int32_t>* v) {
  std::vector<int> out;
  if (v) out.assign(v->begin(), v->end());
  while (!out.empty() && out.back() == -1) out.pop_back();
  return out;
}

// The kernel family each op runs (codegen/KernelEmitter.cpp).
const char* family_of(fb::OpKind op) {
  switch (op) {
    case fb::OpKind::Embedding: return "embedding";
    case fb::OpKind::RmsNorm: return "rms_norm";
    case fb::OpKind::AddRmsNorm: return "add_rms_norm";
    case fb::OpKind::Add: return "add";
    case fb::OpKind::Linear: return "linear";
    case fb::OpKind::PermuteColumns: return "permute_columns";
    case fb::OpKind::Split: return "split";
    case fb::OpKind::Rope: return "rope";
    case fb::OpKind::KvStore: return "kv_store";
    case fb::OpKind::RopeKvStore: return "rope_kv_store";
    case fb::OpKind::PagedAttention: return "paged_attention";
    case fb::OpKind::SiluMul: return "silu_mul";
    case fb::OpKind::Logits: return "logits";
    default: return "";
  }
}

}  // namespace

StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Plan& plan, std::unique_ptr<Driver> driver,
                                                             const CudaExecutorOptions& options) {
  Driver* d = driver.get();
  ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutor> ex, create(plan, d, options));
  ex->owned_driver_ = std::move(driver);
  return ex;
}

std::string CudaExecutor::device_name() const {
  return "cuda:" + std::to_string(device_.ordinal) + " (" + device_.name + ")";
}

CudaExecutor::~CudaExecutor() {
  if (!driver_) return;
  for (EventHandle e : events_) (void)driver_->destroy_event(e);
  for (GraphHandle g : graphs_)
    if (g) (void)driver_->destroy_graph(g);
  for (DevicePtr p : allocations_) (void)driver_->free(p);
}

StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Plan& plan, Driver* driver,
                                                             const CudaExecutorOptions& options) {
  if (!driver) return invalid_argument("CUDA executor: no driver");
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor());
  ex->driver_ = driver;
  Status st = ex->init(plan, options);
  if (!st.ok()) return st.with_context("CUDA executor");
  return ex;
}

Status CudaExecutor::init(const Plan& plan, const CudaExecutorOptions& opt) {
  // 1. The program, validated exactly as the CPU backend validates it (ids, widths, weights,
  //    params, dataflow and memory plan), at the smallest capacity.
  {
    CpuExecutorOptions check;
    check.threads = 1;
    check.max_tokens_per_step = 1;
    check.max_seqs_per_step = 1;
    check.num_kv_blocks = 1;
    auto validated = CpuExecutor::create(plan, check);
    if (!validated.ok()) return validated.status();
    vocab_size_ = (*validated)->vocab_size();
  }
  // The kernels read activations in 16-byte loads (codegen/KernelSpec.h); plan-memory aligns to 64.
  {
    const fb::Program* prog = plan.program("forward");
    for (int i = 0; i < static_cast<int>(prog->values()->size()); ++i) {
      const uint64_t offset = prog->values()->Get(i)->offset_per_row();
      if (i != prog->token_input() && i != prog->position_input() && i != prog->output() && offset % 16 != 0)
        return invalid_argument("value " + std::to_string(i) + ": arena offset " + std::to_string(offset) +
                                " per row is not a multiple of 16 bytes (the kernels' loads)");
    }
  }
  const fb::Plan& p = plan.fb();
  const fb::KvSpec* kv = p.kv();
  const fb::MemoryPlan* mem = p.memory();
  if (kv_elem_bytes(kv->dtype()) == 0)
    return failed_precondition(std::string("the CUDA kernels keep the KV cache in f32, bf16, f16, fp8 or int8; "
                                           "this plan's is ") +
                               fb::EnumNameDType(kv->dtype()));
  kv_i8_ = kv->dtype() == fb::DType::I8;
  num_layers_ = kv->num_layers();
  num_kv_heads_ = kv->num_kv_heads();
  head_dim_ = kv->head_dim();
  block_size_ = kv->block_size();
  if (opt.max_tokens_per_step < 0 || opt.max_tokens_per_step > mem->max_tokens_per_step() ||
      opt.max_seqs_per_step < 0 || opt.max_seqs_per_step > mem->max_seqs_per_step())
    return invalid_argument("step capacity beyond the plan's caps (" + std::to_string(mem->max_tokens_per_step()) +
                            " tokens, " + std::to_string(mem->max_seqs_per_step()) + " sequences)");
  max_tokens_ = opt.max_tokens_per_step ? opt.max_tokens_per_step : mem->max_tokens_per_step();
  max_seqs_ = opt.max_seqs_per_step ? opt.max_seqs_per_step : mem->max_seqs_per_step();
  max_model_len_ = mem->max_model_len() > 0 ? mem->max_model_len()
                                            : (p.model() ? p.model()->max_position_embeddings() : 0);
  table_stride_ = (max_model_len_ + block_size_ - 1) / block_size_;
  if (opt.max_grid < 1) return invalid_argument("max_grid must be >= 1");
  max_grid_ = opt.max_grid;
  graphs_enabled_ = opt.cuda_graphs;
  tiled_attention_ = opt.tiled_attention;
  tensor_core_linear_ = opt.tensor_core_linear;
  fused_quantize_ = opt.fused_quantize;
  rope_in_attention_ = opt.rope_in_attention;
  silu_in_gemv_ = opt.silu_in_gemv;
  norm_in_gemv_ = opt.norm_in_gemv;
  device_sampling_ = opt.device_sampling;

  // 2. The device, and the image each kernel loads on it.
  RETURN_IF_ERROR(driver_->use_device(opt.device));
  ASSIGN_OR_RETURN(std::vector<DeviceInfo> devices, driver_->devices());
  if (opt.device < 0 || opt.device >= static_cast<int>(devices.size()))
    return invalid_argument("no CUDA device " + std::to_string(opt.device) + " (this machine has " +
                            std::to_string(devices.size()) + ")");
  device_ = devices[static_cast<size_t>(opt.device)];
  ASSIGN_OR_RETURN(int driver_version, driver_->version());
  ASSIGN_OR_RETURN(PlanCheck images, check_plan(p, device_, driver_version));
  warnings_ = images.warnings;
  // Programmatic dependent launch: sm_90+ (griddepcontrol), launches captured into graphs from
  // CUDA 12.3 on, and cuLaunchKernelEx in the driver.
  programmatic_launch_ = opt.programmatic_launch && device_.cc_major >= 9 && driver_version >= 12030 &&
                         driver_->has_programmatic_launch();

  // 3. Steps: each one launch of its kernel.
  RETURN_IF_ERROR(decode(plan));
  // The GEMM library of the steps that ask for one; without it they run their batched kernel.
  const int wanted = static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& st) { return st.wants_library; }));
  if (wanted > 0 && opt.gemm_library) {
    StatusOr<std::unique_ptr<GemmLibrary>> lib = opt.load_gemm_library ? opt.load_gemm_library(driver_)
                                                                        : load_cublaslt(driver_);
    if (lib.ok() && *lib) {
      library_ = std::move(*lib);
      library_name_ = library_->name();
      const std::string short_name = library_name_.substr(0, library_name_.find(' '));
      for (Step& st : steps_) {
        if (!st.wants_library) continue;
        st.library = true;
        library_min_rows_ = std::min(library_min_rows_, st.library_min_rows);
        st.kernels = st.kernels.substr(0, st.kernels.find(" (")) + " (" + short_name + " from " +
                     std::to_string(st.library_min_rows) + " rows)";
      }
    } else {
      warnings_.push_back("GEMM library unavailable (" +
                          (lib.ok() ? std::string("none loaded") : std::string(lib.status().message())) + "): " +
                          std::to_string(wanted) + " linear steps run the plan's generated kernels");
    }
  } else if (wanted > 0) {
    warnings_.push_back(std::to_string(wanted) + " linear steps run the plan's generated kernels, not cuBLASLt (as asked)");
  }

  // 4. Memory: the plan's budget, then the KV blocks (all that is left, or the number asked).
  const uint64_t library_bytes = library_ ? gemm_library_bytes(p, max_tokens_, library_->workspace_bytes()) : 0;
  ASSIGN_OR_RETURN(memory_,
                   plan_device_memory(p, device_, opt.memory_utilization, max_tokens_, max_seqs_, library_bytes));
  if (opt.num_kv_blocks < 0) return invalid_argument("num_kv_blocks must be >= 0");
  if (opt.num_kv_blocks > 0) {
    if (opt.num_kv_blocks > memory_.kv_blocks)
      return resource_exhausted(std::to_string(opt.num_kv_blocks) + " KV blocks do not fit: the budget leaves " +
                                std::to_string(memory_.kv_blocks));
    memory_.kv_blocks = opt.num_kv_blocks;
    memory_.kv = memory_.kv_block_bytes * static_cast<uint64_t>(opt.num_kv_blocks);
  }
  if (memory_.kv_blocks > INT32_MAX) memory_.kv_blocks = INT32_MAX;
  num_kv_blocks_ = static_cast<int>(memory_.kv_blocks);
  // Per layer a K half and a V half, each its elements [blocks, kv_heads, block_size, head_dim]
  // (f32, bf16, f16, fp8 or int8) then, for int8, one f32 scale per [block, kv_head, slot].
  const uint64_t block_rows = static_cast<uint64_t>(num_kv_heads_) * block_size_;
  kv_block_bytes_per_layer_ = block_rows * head_dim_ * kv_elem_bytes(kv->dtype());
  kv_codes_bytes_ = align_up(kv_block_bytes_per_layer_ * static_cast<uint64_t>(num_kv_blocks_));
  kv_half_bytes_ = kv_codes_bytes_ +
                   (kv_i8_ ? align_up(block_rows * sizeof(float) * static_cast<uint64_t>(num_kv_blocks_)) : 0);
  kv_layer_bytes_ = 2 * kv_half_bytes_;

  auto allocate = [&](uint64_t bytes, DevicePtr* out) -> Status {
    ASSIGN_OR_RETURN(*out, driver_->alloc(std::max<uint64_t>(bytes, kAlign)));
    allocations_.push_back(*out);
    return ok_status();
  };
  // Weights: every tensor at a 256-byte aligned offset of one allocation.
  const auto* tensors = p.tensors();
  const int num_tensors = tensors ? static_cast<int>(tensors->size()) : 0;
  tensor_offset_.resize(static_cast<size_t>(num_tensors));
  uint64_t weight_bytes = 0;
  for (int i = 0; i < num_tensors; ++i) {
    tensor_offset_[static_cast<size_t>(i)] = weight_bytes;
    weight_bytes = align_up(weight_bytes + tensors->Get(i)->size());
  }
  RETURN_IF_ERROR(allocate(weight_bytes, &weights_));
  for (int i = 0; i < num_tensors; ++i)
    RETURN_IF_ERROR(driver_->copy_to_device(weights_ + tensor_offset_[static_cast<size_t>(i)], plan.tensor_data(i),
                                            tensors->Get(i)->size()));
  const uint64_t T = static_cast<uint64_t>(max_tokens_), S = static_cast<uint64_t>(max_seqs_);
  RETURN_IF_ERROR(allocate(mem->arena_bytes_per_token() * T, &arena_));
  RETURN_IF_ERROR(allocate(T * static_cast<uint64_t>(vocab_size_) * sizeof(float), &logits_));
  RETURN_IF_ERROR(allocate(T * 4, &tokens_));
  RETURN_IF_ERROR(allocate(T * 4, &positions_));
  RETURN_IF_ERROR(allocate(T * 8, &slots_));
  RETURN_IF_ERROR(allocate((S + 1) * 4, &query_start_));
  RETURN_IF_ERROR(allocate(S * static_cast<uint64_t>(table_stride_) * 4, &tables_));
  RETURN_IF_ERROR(allocate(T * 4, &logit_rows_));
  RETURN_IF_ERROR(allocate(T * sizeof(LogitsSummary), &summaries_));
  if (sampling_.kernel >= 0) {  // (decode() kept it unless device sampling is off)
    RETURN_IF_ERROR(allocate(kMaxDraws * sizeof(DeviceDraw), &draws_));
    RETURN_IF_ERROR(allocate(kMaxDraws * 8, &drawn_));
  }
  if (const uint64_t work = kernel_workspace_bytes(p); work > 0) {  // zero-filled once; kernels keep it so
    RETURN_IF_ERROR(allocate(work, &work_));
    const std::vector<uint8_t> zeros(std::min<uint64_t>(work, uint64_t{1} << 20), 0);
    for (uint64_t at = 0; at < work; at += zeros.size())
      RETURN_IF_ERROR(driver_->copy_to_device(work_ + at, zeros.data(), std::min<uint64_t>(zeros.size(), work - at)));
  }
  if (library_) {
    RETURN_IF_ERROR(allocate(library_->workspace_bytes(), &library_work_));
    // The input copy, then the dequantized weight (gemm_library_bytes' order).
    const uint64_t weight = gemm_library_weight_bytes(p);
    if (library_bytes > library_->workspace_bytes() + weight)
      RETURN_IF_ERROR(allocate(library_bytes - library_->workspace_bytes() - weight, &library_input_));
    if (weight > 0) RETURN_IF_ERROR(allocate(weight, &library_weight_));
  }
  if (const uint64_t q8 = quant_input_bytes(p, max_tokens_); q8 > 0) {
    RETURN_IF_ERROR(allocate(q8, &quant_input_));
    quant_input_bytes_ = q8;
  }
  RETURN_IF_ERROR(allocate(kv_layer_bytes_ * static_cast<uint64_t>(num_layers_), &kv_));
  table_staging_.assign(S * static_cast<uint64_t>(table_stride_), 0);
  graph_sizes_ = graph_batch_sizes(std::min(max_seqs_, max_tokens_));
  graphs_.assign(graph_sizes_.size(), nullptr);
  const size_t pad = static_cast<size_t>(std::min(max_seqs_, max_tokens_)) + 1;
  pad_tokens_.assign(pad, 0);
  pad_positions_.assign(pad, 0);
  pad_rows_.assign(pad, 0);
  pad_slots_.assign(pad, -1);

  // Permutations (GPTQ desc_act) in one buffer.
  const fb::Program* prog = plan.program("forward");
  std::vector<int32_t> perms;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& st = steps_[i];
    if (st.op != fb::OpKind::PermuteColumns) continue;
    const fb::Param* perm = find_param(*prog->steps()->Get(static_cast<flatbuffers::uoffset_t>(i)), "perm");
    st.perm_offset = perms.size() * sizeof(int32_t);
    for (int64_t v : *perm->ints()) perms.push_back(static_cast<int32_t>(v));  // checked by the CPU decoder
    while (perms.size() % (kAlign / sizeof(int32_t))) perms.push_back(0);
  }
  if (!perms.empty()) {
    RETURN_IF_ERROR(allocate(perms.size() * sizeof(int32_t), &perms_));
    RETURN_IF_ERROR(driver_->copy_to_device(perms_, perms.data(), perms.size() * sizeof(int32_t)));
  }

  // 5. Modules: the chosen image of every kernel a step uses.
  std::vector<FunctionHandle> functions(images.choices.size(), nullptr);
  std::vector<Launch*> all;  // every kernel a step launches
  for (Step& st : steps_) {
    all.push_back(&st.main);
    if (st.batched.kernel >= 0) all.push_back(&st.batched);
    if (st.library && st.to_bf16.kernel >= 0) all.push_back(&st.to_bf16);
    if (st.library && st.dequant.kernel >= 0) all.push_back(&st.dequant);
    if (st.quant_in.kernel >= 0) all.push_back(&st.quant_in);
    if (st.rope.kernel >= 0) all.push_back(&st.rope);
    if (st.silu.kernel >= 0) all.push_back(&st.silu);
    if (st.norm.kernel >= 0) all.push_back(&st.norm);
  }
  if (summary_.kernel >= 0) all.push_back(&summary_);
  if (sampling_.kernel >= 0) all.push_back(&sampling_);
  for (Launch* l : all) {
    const int k = l->kernel;
    if (!functions[static_cast<size_t>(k)]) {
      const fb::Kernel& kernel = *p.kernels()->Get(static_cast<flatbuffers::uoffset_t>(k));
      const ImageChoice& c = images.choices[static_cast<size_t>(k)];
      const fb::KernelImage& im = *kernel.images()->Get(static_cast<flatbuffers::uoffset_t>(c.image));
      ModuleHandle m = nullptr;
      if (c.jit) {
        std::string ptx(reinterpret_cast<const char*>(im.ptx()->data()), im.ptx()->size());  // NUL-terminated
        ASSIGN_OR_RETURN(m, driver_->load_module(ptx.c_str(), ptx.size() + 1, true));
      } else {
        ASSIGN_OR_RETURN(m, driver_->load_module(im.cubin()->data(), im.cubin()->size(), false));
      }
      modules_.push_back(m);
      ASSIGN_OR_RETURN(functions[static_cast<size_t>(k)], driver_->get_function(m, kernel.name()->str()));
    }
    l->fn = functions[static_cast<size_t>(k)];
    const ImageChoice& c = images.choices[static_cast<size_t>(k)];
    l->overlap = programmatic_launch_ && c.grid_dependency_control;
  }
  args_.reserve(32);  // the most parameters a kernel takes: split's 16 outputs + 2
  params_.reserve(32);
  return ok_status();
}

Status CudaExecutor::decode(const Plan& plan) {
  const fb::Plan& p = plan.fb();
  const fb::Program* prog = plan.program("forward");
  token_input_ = prog->token_input();
  position_input_ = prog->position_input();
  output_ = prog->output();
  const int num_values = static_cast<int>(prog->values()->size());
  value_offset_.assign(static_cast<size_t>(num_values), kNotInArena);
  for (int i = 0; i < num_values; ++i)
    if (i != token_input_ && i != position_input_ && i != output_)
      value_offset_[static_cast<size_t>(i)] =
          prog->values()->Get(i)->offset_per_row() * static_cast<uint64_t>(max_tokens_);
  const int num_kernels = p.kernels() ? static_cast<int>(p.kernels()->size()) : 0;
  const int num_steps = static_cast<int>(prog->steps()->size());
  auto launch = [&](int index, Launch* l) -> Status {
    const fb::Kernel& k = *p.kernels()->Get(static_cast<flatbuffers::uoffset_t>(index));
    ASSIGN_OR_RETURN(l->rule, parse_grid_rule(k.grid_rule()->string_view()));  // check_plan accepted it
    for (int d = 0; d < 3; ++d) l->block[d] = k.block_dim()->Get(static_cast<flatbuffers::uoffset_t>(d));
    l->shared = k.shared_mem_bytes();
    l->work = k.workspace_bytes() > 0;
    l->kernel = index;
    return ok_status();
  };
  // The logits summary kernel (the plan reader checked its index and family); none in plans
  // from before it: summaries are then made on the host from the whole rows.
  if (prog->logits_summary_kernel() >= 0) RETURN_IF_ERROR(launch(prog->logits_summary_kernel(), &summary_));
  // The sampling kernel (it reads the summaries: the plan reader checked both are there).
  if (prog->sampling_kernel() >= 0 && device_sampling_) RETURN_IF_ERROR(launch(prog->sampling_kernel(), &sampling_));
  steps_.resize(static_cast<size_t>(num_steps));
  for (int i = 0; i < num_steps; ++i) {
    const fb::Step& s = *prog->steps()->Get(i);
    Step& st = steps_[static_cast<size_t>(i)];
    st.op = s.op();
    st.where = "step " + std::to_string(i) + " (" + fb::EnumNameOpKind(s.op()) +
               (s.name() ? " '" + s.name()->str() + "'" : std::string()) + ")";
    if (s.kernel() < 0 || s.kernel() >= num_kernels)
      return failed_precondition(
          st.where + " has no GPU kernel: the plan was compiled without --target, or the step's storage has no "
                     "CUDA kernel (quantized weights need --weight-layout cuda-mma)");
    const fb::Kernel& kernel = *p.kernels()->Get(s.kernel());
    st.family = kernel.family() ? kernel.family()->str() : "";
    if (st.family != family_of(st.op))
      return invalid_argument(st.where + ": its kernel '" + (kernel.name() ? kernel.name()->str() : "?") +
                              "' is of family '" + st.family + "', expected '" + family_of(st.op) + "'");
    RETURN_IF_ERROR(launch(s.kernel(), &st.main));
    // The entry without "llm_<family>_" and its hash: the kernel's shape and storage.
    auto shape = [&](const fb::Kernel& k) {
      std::string e = k.name() ? k.name()->str() : "";
      const std::string prefix = "llm_" + st.family + "_";
      if (e.rfind(prefix, 0) == 0) e = e.substr(prefix.size());
      const size_t cut = e.rfind('_');
      return cut != std::string::npos && e.size() - cut == 13 ? e.substr(0, cut) : e;
    };
    st.kernels = shape(kernel);
    st.weight_bytes = step_weight_bytes(p, s);
    const bool gemm = st.op == fb::OpKind::Linear || st.op == fb::OpKind::Logits;
    if (s.batched_kernel() >= 0 && (st.op != fb::OpKind::PagedAttention || tiled_attention_) &&
        (!gemm || tensor_core_linear_)) {  // in range (checked)
      const fb::Kernel& b = *p.kernels()->Get(static_cast<flatbuffers::uoffset_t>(s.batched_kernel()));
      if (!b.family() || b.family()->str() != st.family)
        return invalid_argument(st.where + ": its batched kernel is of family '" +
                                (b.family() ? b.family()->str() : std::string()) + "', expected '" + st.family + "'");
      RETURN_IF_ERROR(launch(s.batched_kernel(), &st.batched));
      st.batched_min_rows = s.batched_min_rows();
      std::string extra = shape(b);  // "n64_k64_f32_tc" next to "n64_k64_f32": "tc"
      if (extra.size() > st.kernels.size() + 1 && extra.compare(0, st.kernels.size() + 1, st.kernels + "_") == 0)
        extra.erase(0, st.kernels.size() + 1);
      st.kernels += " (" + extra + " from " + std::to_string(st.batched_min_rows) + " rows)";
    }
    st.in = trimmed(s.inputs());
    st.out = trimmed(s.outputs());
    st.weights = trimmed(s.weights());
    if (s.gemm_library() != fb::GemmLibrary::None && st.batched.kernel >= 0) {  // a linear (checked)
      const fb::Tensor* w = st.weights.empty() ? nullptr : p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(st.weights[0]));
      const bool quantized = w && w->quant() && w->quant()->size() > 0;
      if (!w || !w->shape() || w->shape()->size() != 2 ||
          (quantized ? s.library_weight_kernel() < 0
                     : s.library_weight_kernel() >= 0 || (w->dtype() != fb::DType::BF16 && w->dtype() != fb::DType::F32)))
        return invalid_argument(st.where + ": a GEMM library step needs a dense bf16 or f32 weight [n, k], or a "
                                           "quantized one with its dequant_bf16 kernel");
      st.gemm.n = w->shape()->Get(0);
      st.gemm.k = w->shape()->Get(1);
      st.gemm.input = quantized || w->dtype() == fb::DType::BF16 ? GemmInput::kBf16 : GemmInput::kTf32;
      st.library_min_rows = s.library_min_rows() > 0 ? s.library_min_rows() : st.batched_min_rows;
      st.gemm.bias = st.weights.size() > 1 && st.weights[1] >= 0;
      if (st.gemm.bias && p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(st.weights[1]))->dtype() != fb::DType::F32)
        return invalid_argument(st.where + ": a GEMM library step's bias must be f32");
      if ((s.library_input_kernel() >= 0) != (st.gemm.input == GemmInput::kBf16))
        return invalid_argument(st.where + ": a GEMM library step over " + fb::EnumNameDType(w->dtype()) +
                                " weights " + (st.gemm.input == GemmInput::kBf16 ? "needs" : "takes no") +
                                " to_bf16 input kernel");
      if (s.library_input_kernel() >= 0) RETURN_IF_ERROR(launch(s.library_input_kernel(), &st.to_bf16));
      if (s.library_weight_kernel() >= 0) RETURN_IF_ERROR(launch(s.library_weight_kernel(), &st.dequant));
      st.wants_library = true;
    }
    if (s.input_quant_kernel() >= 0) {  // a linear or logits step (checked)
      RETURN_IF_ERROR(launch(s.input_quant_kernel(), &st.quant_in));
      st.kernels += " (int8 activations)";
    }
    st.quant_out = s.quantized_output();  // (checked: an op whose kernel can)
    if (const fb::Param* layer = find_param(s, "layer")) st.layer = static_cast<int>(layer->i());
    if (s.rope_kernel() >= 0) {  // (checked: a paged_attention after its rope_kv_store)
      if (steps_[static_cast<size_t>(i) - 1].layer != st.layer)
        return invalid_argument(st.where + ": its rope kernel does the work of a rope_kv_store of another layer");
      RETURN_IF_ERROR(launch(s.rope_kernel(), &st.rope));
      st.kernels += " (+rope_kv_store at decode)";
    }
    if (s.silu_kernel() >= 0) {  // (checked: a linear before the silu_mul of its output)
      RETURN_IF_ERROR(launch(s.silu_kernel(), &st.silu));
      const fb::Step* next = prog->steps()->Get(static_cast<flatbuffers::uoffset_t>(i) + 1);
      auto q8_row = [&](int id) {
        return q8_row_bytes(prog->values()->Get(static_cast<flatbuffers::uoffset_t>(id))->width());
      };
      st.silu_q8_rows[0] = q8_row(st.in[0]);
      st.silu_q8_rows[1] = q8_row(next->outputs()->Get(0));
      st.kernels += " (+silu_mul at decode)";
    }
    if (s.norm_kernel() >= 0) {  // (checked: a linear before an add_rms_norm of its output)
      RETURN_IF_ERROR(launch(s.norm_kernel(), &st.norm));
      st.kernels += " (+add_rms_norm at batch-1 decode)";
    }
    if (st.op == fb::OpKind::Embedding) {
      const fb::Tensor* table = p.tensors()->Get(static_cast<flatbuffers::uoffset_t>(st.weights[0]));
      embedding_rows_ = static_cast<int>(table->shape()->Get(0));
    }
  }
  return ok_status();
}

namespace {

using Step = CudaExecutor::Step;

// The kernel a step of `rows` rows launches (library calls aside).
const Step::Launch& kernel_for(const Step& st, int rows) {
  return st.batched.fn && rows >= st.batched_min_rows ? st.batched : st.main;
}

// Whether attention step `st` launches its rope kernel (the rope_kv_store before it inside) for
// a forward of `rows` rows (`one_row`: one per sequence; `enabled`: options.rope_in_attention):
// only in place of its per-row kernel.
bool does_rope(const Step& st, int rows, bool one_row, bool enabled) {
  return enabled && one_row && st.rope.kernel >= 0 && &kernel_for(st, rows) == &st.main;
}

// Whether step `st`, at `rows` rows, runs its GEMV over int8 rows of value `id` (not the library,
// not the batched kernel): then the step writing `id` may quantize it for it.
bool gemv_reads_int8(const Step& st, int rows, int id) {
  return st.op == fb::OpKind::Linear && st.quant_in.kernel >= 0 && !st.in.empty() && st.in[0] == id &&
         !(st.library && rows >= st.library_min_rows) && &kernel_for(st, rows) == &st.main;
}

// Whether steps[i], at `rows` rows, writes the int8 rows of its output for the GEMV of the step
// after it (its main kernel takes the q8 pointer; `fused`: CudaExecutorOptions::fused_quantize).
bool writes_int8_rows(const std::vector<Step>& steps, size_t i, int rows, bool fused) {
  const Step& st = steps[i];
  return fused && st.quant_out && &kernel_for(st, rows) == &st.main && i + 1 < steps.size() &&
         gemv_reads_int8(steps[i + 1], rows, st.out[0]);
}

}  // namespace

bool CudaExecutor::does_silu(size_t i, int rows, uint64_t* q8_at) const {
  const Step& st = steps_[i];
  if (!silu_in_gemv_ || st.silu.kernel < 0 || i + 1 >= steps_.size() || &kernel_for(st, rows) != &st.main ||
      (st.library && rows >= st.library_min_rows))
    return false;
  // The silu_mul's int8 rows (when the GEMV after it reads them) go after the GEMV's own int8
  // input rows, which the kernel reads while it writes them.
  const uint64_t at = st.quant_in.kernel >= 0 ? align_up(static_cast<uint64_t>(rows) * st.silu_q8_rows[0]) : 0;
  if (q8_at) *q8_at = at;
  return !writes_int8_rows(steps_, i + 1, rows, fused_quantize_) ||
         at + static_cast<uint64_t>(rows) * st.silu_q8_rows[1] <= quant_input_bytes_;
}

bool CudaExecutor::does_norm(size_t i, int rows) const {
  // One row: the last block does each row's add_rms_norm alone, where the add_rms_norm kernel
  // takes a block per row; past one row the saved launch no longer pays for it (estimated: a
  // row's norm costs that block about what a launch in a graph costs).
  const Step& st = steps_[i];
  return norm_in_gemv_ && st.norm.kernel >= 0 && rows == 1 && i + 1 < steps_.size() &&
         &kernel_for(st, rows) == &st.main && !(st.library && rows >= st.library_min_rows) &&
         &kernel_for(steps_[i + 1], rows) == &steps_[i + 1].main;
}

int CudaExecutor::launches_per_step(int rows) const {
  // As launch_steps() skips a quantization (decode: every GEMV runs).
  int launches = 0, quantized = -1;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    const bool logits = st.op == fb::OpKind::Logits;
    if (i + 1 < steps_.size() && does_rope(steps_[i + 1], rows, true, rope_in_attention_)) continue;  // inside it
    if (i > 0 && (does_silu(i - 1, rows) || does_norm(i - 1, rows))) {  // inside the GEMV before it
      if (writes_int8_rows(steps_, i, rows, fused_quantize_)) quantized = st.out[0];
      continue;
    }
    launches += 1 + (st.quant_in.kernel >= 0 && (logits || quantized != st.in[0]));
    quantized = st.quant_in.kernel >= 0 && !logits ? st.in[0] : -1;
    if (writes_int8_rows(steps_, i, rows, fused_quantize_)) quantized = st.out[0];
  }
  return launches;
}

int CudaExecutor::rope_in_attention_steps() const {
  return static_cast<int>(std::count_if(steps_.begin(), steps_.end(),
                                        [&](const Step& st) { return does_rope(st, 1, true, rope_in_attention_); }));
}

int CudaExecutor::silu_in_gemv_steps() const {
  int n = 0;
  for (size_t i = 0; i < steps_.size(); ++i) n += does_silu(i, 1);
  return n;
}

int CudaExecutor::norm_in_gemv_steps() const {
  int n = 0;
  for (size_t i = 0; i < steps_.size(); ++i) n += does_norm(i, 1);
  return n;
}

int CudaExecutor::overlapped_kernels() const {
  return static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& st) { return st.main.overlap; }));
}

int CudaExecutor::gemm_library_steps() const {
  return static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& st) { return st.library; }));
}

DevicePtr CudaExecutor::weight_ptr(const Step& st, size_t i) const {
  return i < st.weights.size() && st.weights[i] >= 0 ? weights_ + tensor_offset_[static_cast<size_t>(st.weights[i])]
                                                      : DevicePtr{0};
}

DevicePtr CudaExecutor::value_ptr(int id) const {
  if (id == token_input_) return tokens_;
  if (id == position_input_) return positions_;
  if (id == output_) return logits_;
  return arena_ + value_offset_[static_cast<size_t>(id)];
}

Status CudaExecutor::forward(const BatchInput& b, float* logits) { return run(b, logits, nullptr); }

Status CudaExecutor::forward_summary(const BatchInput& b, LogitsSummary* summaries) {
  if (summary_.kernel < 0) return Executor::forward_summary(b, summaries);  // a plan without the kernel
  return run(b, nullptr, summaries);
}

Status CudaExecutor::read_logits(int first, int count, float* out) {
  if (summary_.kernel < 0) return Executor::read_logits(first, count, out);
  if (first < 0 || count < 0 || first + count > summarized_rows_)
    return invalid_argument("read_logits: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                            ") outside the last step's " + std::to_string(summarized_rows_));
  if (count == 0) return ok_status();
  const uint64_t row_bytes = static_cast<uint64_t>(vocab_size_) * sizeof(float);
  return driver_->copy_to_host(out, logits_ + row_bytes * static_cast<uint64_t>(first), row_bytes * count);
}

Status CudaExecutor::run(const BatchInput& b, float* logits, LogitsSummary* summaries) {
  summarized_rows_ = 0;
  const int64_t begin_ns = profiler_ ? profiler_->begin_forward() : 0;
  if (profiler_ && !events_status_.ok()) return events_status_;
  RETURN_IF_ERROR(check_batch(b, logits ? logits : reinterpret_cast<float*>(summaries),
                              {max_tokens_, max_seqs_, max_model_len_, block_size_, num_kv_blocks_, embedding_rows_},
                              nullptr));
  const int T = static_cast<int>(b.tokens.size()), S = static_cast<int>(b.context_lens.size());
  const int L = static_cast<int>(b.logits_indices.size());
  // Block tables at a fixed stride (every context fits max_model_len, so table_stride_ blocks).
  for (int s = 0; s < S; ++s) {
    const int used = (b.context_lens[s] + block_size_ - 1) / block_size_;
    std::copy_n(b.block_tables.data() + static_cast<size_t>(s) * b.max_blocks_per_seq, used,
                table_staging_.data() + static_cast<size_t>(s) * table_stride_);
  }
  // A decode step (one row per sequence, logits for each): replay its graph.
  if (graphs_enabled_ && !profiler_ && T > 0 && T == S && L == T) {
    bool decode = true;
    for (int i = 0; i < T && decode; ++i)
      decode = b.query_start[i + 1] == i + 1 && b.logits_indices[i] == i;
    const int B = decode ? graph_bucket(graph_sizes_, T) : -1;
    if (B > 0) {
      RETURN_IF_ERROR(replay_decode(b, B));
      return fetch_logits(L, logits, summaries);
    }
  }
  bool one_row = T == S;  // every sequence one row (decode): attention steps may do their rope_kv_store
  for (int i = 0; i < S && one_row; ++i) one_row = b.query_start[i + 1] - b.query_start[i] == 1;
  RETURN_IF_ERROR(driver_->copy_to_device(tokens_, b.tokens.data(), T * 4ull));
  RETURN_IF_ERROR(driver_->copy_to_device(positions_, b.positions.data(), T * 4ull));
  RETURN_IF_ERROR(driver_->copy_to_device(slots_, b.kv_slots.data(), T * 8ull));
  RETURN_IF_ERROR(driver_->copy_to_device(query_start_, b.query_start.data(), (S + 1) * 4ull));
  if (S > 0)
    RETURN_IF_ERROR(driver_->copy_to_device(tables_, table_staging_.data(), static_cast<uint64_t>(S) * table_stride_ * 4));
  if (L > 0) RETURN_IF_ERROR(driver_->copy_to_device(logit_rows_, b.logits_indices.data(), L * 4ull));

  if (!profiler_) {
    RETURN_IF_ERROR(launch_steps(T, S, L, one_row));
    return fetch_logits(L, logits, summaries);
  }
  RETURN_IF_ERROR(driver_->record_event(events_[0]));
  RETURN_IF_ERROR(launch_steps(T, S, L, one_row, /*timed=*/true));
  RETURN_IF_ERROR(fetch_logits(L, logits, summaries));  // records the summary kernel's event
  return record_profile(T, S, L, begin_ns);
}

void CudaExecutor::set_profiler(Profiler* profiler) {
  profiler_ = profiler;
  if (!profiler) return;
  std::vector<Profiler::StepInfo> info;
  for (const Step& st : steps_) info.push_back({fb::EnumNameOpKind(st.op), st.where, st.kernels, st.weight_bytes});
  info.push_back({"LogitsSummary", "logits summary", summary_.kernel >= 0 ? "on the device" : "none in the plan"});
  profiler->set_program(std::move(info));
  events_status_ = ok_status();
  while (events_.size() < steps_.size() + 2) {
    StatusOr<EventHandle> e = driver_->create_event();
    if (!e.ok()) {
      events_status_ = failed_precondition("profiling on " + device_name() + " needs CUDA events: " +
                                           std::string(e.status().message()));
      return;
    }
    events_.push_back(*e);
  }
}

Status CudaExecutor::record_profile(int T, int S, int L, int64_t begin_ns) {
  // Each step's interval on the device, placed after the forward's start on the host clock.
  int64_t at = begin_ns;
  const int n = static_cast<int>(steps_.size());
  for (int i = 0; i <= n; ++i) {
    ASSIGN_OR_RETURN(float ms, driver_->elapsed_ms(events_[static_cast<size_t>(i)], events_[static_cast<size_t>(i) + 1]));
    const int64_t ns = static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    const bool logit_rows = i == n || steps_[static_cast<size_t>(i)].op == fb::OpKind::Logits;
    profiler_->record_step(i, logit_rows ? L : T, at, at + ns);
    at += ns;
  }
  profiler_->end_forward(T, S, begin_ns, std::max(at, Profiler::now_ns()));
  return ok_status();
}

Status CudaExecutor::fetch_logits(int L, float* logits, LogitsSummary* summaries) {
  // Profiling: the last event closes the summary kernel (no time when it does not run).
  auto closing = [&] { return profiler_ ? driver_->record_event(events_.back()) : ok_status(); };
  if (L == 0 || logits) {
    RETURN_IF_ERROR(closing());
    if (L == 0) return ok_status();
    return driver_->copy_to_host(logits, logits_, static_cast<uint64_t>(L) * vocab_size_ * 4);
  }
  // The rows' summaries (codegen/LogitsSummaryKernel.cpp), then only those come back.
  // (logits, out[, work], L): kernels that split long rows over blocks take the workspace.
  args_.assign({logits_, summaries_});
  if (summary_.work) args_.push_back(work_);
  args_.push_back(0);
  std::memcpy(&args_.back(), &L, sizeof(L));
  params_.resize(args_.size());
  for (size_t i = 0; i < args_.size(); ++i) params_[i] = &args_[i];
  const int64_t grid = grid_size(summary_.rule, L, max_grid_);
  RETURN_IF_ERROR(driver_->launch(summary_.fn, static_cast<unsigned>(grid), summary_.block, summary_.shared,
                                  params_.data())
                      .with_context("the logits summary kernel"));
  RETURN_IF_ERROR(closing());
  RETURN_IF_ERROR(driver_->copy_to_host(summaries, summaries_, static_cast<uint64_t>(L) * sizeof(LogitsSummary)));
  summarized_rows_ = L;
  return ok_status();
}

Status CudaExecutor::sample_on_device(std::span<const DeviceDraw> draws, int32_t* tokens, float* logits) {
  if (sampling_.kernel < 0) return Executor::sample_on_device(draws, tokens, logits);
  for (const DeviceDraw& d : draws)
    if (d.row < 0 || d.row >= summarized_rows_)
      return invalid_argument("sample_on_device: row " + std::to_string(d.row) + " outside the last step's " +
                              std::to_string(summarized_rows_) + " summarized rows");
  // (logits, summaries, draws, tokens, n): the kernel's records are DeviceDraw's bytes.
  for (size_t at = 0; at < draws.size(); at += kMaxDraws) {
    const int n = static_cast<int>(std::min<size_t>(kMaxDraws, draws.size() - at));
    RETURN_IF_ERROR(driver_->copy_to_device(draws_, draws.data() + at, static_cast<uint64_t>(n) * sizeof(DeviceDraw)));
    args_.assign({logits_, summaries_, draws_, drawn_, 0});
    std::memcpy(&args_.back(), &n, sizeof(n));
    params_.resize(args_.size());
    for (size_t i = 0; i < args_.size(); ++i) params_[i] = &args_[i];
    RETURN_IF_ERROR(driver_->launch(sampling_.fn, static_cast<unsigned>(std::min<int64_t>(n, max_grid_)),
                                    sampling_.block, sampling_.shared, params_.data())
                        .with_context("the sampling kernel"));
    drawn_host_.resize(2 * static_cast<size_t>(n));
    RETURN_IF_ERROR(driver_->copy_to_host(drawn_host_.data(), drawn_, static_cast<uint64_t>(n) * 8));
    for (int i = 0; i < n; ++i) {
      tokens[at + static_cast<size_t>(i)] = drawn_host_[2 * static_cast<size_t>(i)];
      std::memcpy(&logits[at + static_cast<size_t>(i)], &drawn_host_[2 * static_cast<size_t>(i) + 1], 4);
    }
  }
  return ok_status();
}

Status CudaExecutor::replay_decode(const BatchInput& b, int B) {
  const int T = static_cast<int>(b.tokens.size());
  // Padding rows: token 0, position 0, no KV write, block table row of block 0; their logits
  // are computed and dropped.
  for (int i = 0; i < B; ++i) {
    const bool real = i < T;
    pad_tokens_[i] = real ? b.tokens[i] : 0;
    pad_positions_[i] = real ? b.positions[i] : 0;
    pad_slots_[i] = real ? b.kv_slots[i] : -1;
    pad_rows_[i] = i;
    if (!real) table_staging_[static_cast<size_t>(i) * table_stride_] = 0;
  }
  // (the real rows' block tables are staged by forward())
  RETURN_IF_ERROR(driver_->copy_to_device(tokens_, pad_tokens_.data(), B * 4ull));
  RETURN_IF_ERROR(driver_->copy_to_device(positions_, pad_positions_.data(), B * 4ull));
  RETURN_IF_ERROR(driver_->copy_to_device(slots_, pad_slots_.data(), B * 8ull));
  // query_start of the padded batch is 0..B: the same values as the row indices plus B.
  pad_rows_[B] = B;
  RETURN_IF_ERROR(driver_->copy_to_device(query_start_, pad_rows_.data(), (B + 1) * 4ull));
  RETURN_IF_ERROR(driver_->copy_to_device(tables_, table_staging_.data(), static_cast<uint64_t>(B) * table_stride_ * 4));
  RETURN_IF_ERROR(driver_->copy_to_device(logit_rows_, pad_rows_.data(), B * 4ull));
  const size_t k = static_cast<size_t>(std::find(graph_sizes_.begin(), graph_sizes_.end(), B) - graph_sizes_.begin());
  if (!graphs_[k]) {
    // The library picks its algorithm and loads its kernels on a shape's first call: make that
    // call outside the capture (the forward runs once more; its KV writes are the same values).
    if (library_ && B >= library_min_rows_) RETURN_IF_ERROR(launch_steps(B, B, B, true));
    Status begun = driver_->begin_capture();
    if (!begun.ok()) {  // no graph API: launch step by step from now on
      graphs_enabled_ = false;
      warnings_.push_back("CUDA graphs unavailable (" + std::string(begun.message()) + "): steps launch one by one");
      RETURN_IF_ERROR(launch_steps(B, B, B, true));
    } else {
      Status launched = launch_steps(B, B, B, true);
      StatusOr<GraphHandle> graph = driver_->end_capture();  // ends the capture even after an error
      RETURN_IF_ERROR(launched.with_context("capturing the decode graph of batch " + std::to_string(B)));
      if (!graph.ok()) return graph.status().with_context("capturing the decode graph of batch " + std::to_string(B));
      graphs_[k] = *graph;
    }
  }
  if (graphs_[k]) RETURN_IF_ERROR(driver_->launch_graph(graphs_[k]));
  return ok_status();
}

Status CudaExecutor::library_gemm(const Step& st, int rows, int* converted) {
  DevicePtr x = value_ptr(st.in[0]);
  if (st.to_bf16.kernel >= 0) {
    if (*converted != st.in[0]) {  // consecutive library steps reading one value convert it once
      args_.assign({x, library_input_, 0});
      std::memcpy(&args_[2], &rows, sizeof(rows));
      params_.resize(3);
      for (size_t i = 0; i < 3; ++i) params_[i] = &args_[i];
      const int64_t grid = grid_size(st.to_bf16.rule, rows, max_grid_);
      RETURN_IF_ERROR(driver_->launch(st.to_bf16.fn, static_cast<unsigned>(grid), st.to_bf16.block, st.to_bf16.shared,
                                      params_.data())
                          .with_context("its to_bf16 input kernel"));
      *converted = st.in[0];
    }
    x = library_input_;
  }
  auto weight = [&](size_t i) { return weight_ptr(st, i); };
  DevicePtr w = weight(0);
  if (st.dequant.kernel >= 0) {  // the quantized weight as a bf16 matrix, rewritten at every call
    args_.assign({w, library_weight_, 0});
    const int n = static_cast<int>(st.gemm.n);
    std::memcpy(&args_[2], &n, sizeof(n));
    params_.resize(3);
    for (size_t i = 0; i < 3; ++i) params_[i] = &args_[i];
    const int64_t grid = grid_size(st.dequant.rule, st.gemm.n, max_grid_);
    RETURN_IF_ERROR(driver_->launch(st.dequant.fn, static_cast<unsigned>(grid), st.dequant.block, st.dequant.shared,
                                    params_.data())
                        .with_context("its dequant_bf16 weight kernel"));
    w = library_weight_;
  }
  return library_->matmul(st.gemm, rows, w, x, weight(1), value_ptr(st.out[0]), library_work_)
      .with_context(library_name_);
}

Status CudaExecutor::launch_steps(int T, int S, int L, bool one_row, bool timed) {
  std::vector<uint64_t>& args = args_;
  int converted = -1;  // the value whose bf16 copy library_input_ holds (-1: none)
  int quantized = -1;  // the value whose int8 rows quant_input_ holds (-1: none)
  uint64_t quantized_at = 0;  // their offset in quant_input_ (a silu kernel's are after its input's)
  bool silu_done = false;     // the last linear step's silu kernel did the silu_mul step after it
  bool norm_done = false;     // the last linear step's norm kernel did the add_rms_norm step after it
  // Whether the stream's last operation is one of the plan's kernels: only then may the next one
  // be launched overlapped with it (not after a copy, an event or a library call; not timed).
  bool after_ours = false;
  auto start = [&](const Launch& k, int64_t grid, void** params) {
    return k.overlap && after_ours && !timed
               ? driver_->launch_programmatic(k.fn, static_cast<unsigned>(grid), k.block, k.shared, params)
               : driver_->launch(k.fn, static_cast<unsigned>(grid), k.block, k.shared, params);
  };
  for (size_t index = 0; index < steps_.size(); ++index) {
    Step& st = steps_[index];
    if (timed && index > 0) RETURN_IF_ERROR(driver_->record_event(events_[index]));  // step index-1 done
    if (st.library && T >= st.library_min_rows && T > 0) {
      Status called = library_gemm(st, T, &converted);
      after_ours = false;
      if (called.ok()) continue;
      if (called.code() != StatusCode::kUnimplemented) return called.with_context(st.where);
      // No algorithm for this shape: the step runs its generated kernel from now on.
      st.library = false;
      st.kernels = st.kernels.substr(0, st.kernels.find(" (")) + " (tc from " + std::to_string(st.batched_min_rows) +
                   " rows)";
      warnings_.push_back(st.where + ": " + called.message() + "; it runs the plan's generated kernel");
    }
    // A silu_mul whose gate|up GEMV did its work (that step's silu kernel): no launch.
    if (std::exchange(silu_done, false) && st.op == fb::OpKind::SiluMul) continue;
    // An add_rms_norm whose GEMV's last block did its work (that step's norm kernel): the same.
    if (std::exchange(norm_done, false) && st.op == fb::OpKind::AddRmsNorm) continue;
    converted = -1;  // other steps may write where the converted value lived
    int rows = T;
    const int reads_quantized = quantized;
    const uint64_t reads_quantized_at = quantized_at;
    quantized = -1;
    quantized_at = 0;
    uint64_t silu_q8_at = 0;
    // (Its input's int8 rows where does_silu expects them: at the start of quant_input_.)
    const bool silu = st.op == fb::OpKind::Linear && does_silu(index, T, &silu_q8_at) &&
                      !(st.quant_in.kernel >= 0 && reads_quantized == st.in[0] && reads_quantized_at != 0);
    const bool norm = st.op == fb::OpKind::Linear && !silu && does_norm(index, T);
    // A rope_kv_store whose attention step does its work (that step's rope kernel): no launch.
    if (st.op == fb::OpKind::RopeKvStore && index + 1 < steps_.size() &&
        does_rope(steps_[index + 1], T, one_row, rope_in_attention_))
      continue;
    const bool rope = st.op == fb::OpKind::PagedAttention && does_rope(st, T, one_row, rope_in_attention_);
    args.clear();
    auto ptr = [&](DevicePtr v) { args.push_back(v); };
    // cuLaunchKernel reads each parameter's size from the kernel: an int is the first 4 bytes of
    // its 8-byte slot (little-endian hosts only).
    auto num = [&](int v) {
      uint64_t slot = 0;
      std::memcpy(&slot, &v, sizeof(v));
      args.push_back(slot);
    };
    auto weight = [&](size_t i) { return weight_ptr(st, i); };
    const DevicePtr kc = kv_ + kv_layer_bytes_ * static_cast<uint64_t>(st.layer);
    const DevicePtr vc = kc + kv_half_bytes_;
    auto scales = [&] {  // int8 caches: the K and V scales follow the caches
      if (kv_i8_) ptr(kc + kv_codes_bytes_), ptr(vc + kv_codes_bytes_);
    };
    // A step writing int8 rows of its output (Step.quant_out) does so when the next step's GEMV
    // reads them: into quant_input_, sparing that step's quantize_q8 kernel.
    const bool writes_q8 = writes_int8_rows(steps_, index, T, fused_quantize_);
    auto q8_out = [&] {  // (the main kernel's parameter; a batched kernel has none)
      if (st.quant_out && &kernel_for(st, T) == &st.main) ptr(writes_q8 ? quant_input_ : 0);
    };
    switch (st.op) {
      case fb::OpKind::Embedding:
      case fb::OpKind::RmsNorm:
        ptr(value_ptr(st.in[0])), ptr(weight(0)), ptr(value_ptr(st.out[0]));
        q8_out();  // (never an embedding's: checked)
        break;
      case fb::OpKind::AddRmsNorm:
        ptr(value_ptr(st.in[0])), ptr(value_ptr(st.in[1])), ptr(weight(0));
        ptr(value_ptr(st.out[0])), ptr(value_ptr(st.out[1]));
        q8_out();
        break;
      case fb::OpKind::Rope:
      case fb::OpKind::Add:
        ptr(value_ptr(st.in[0])), ptr(value_ptr(st.in[1])), ptr(value_ptr(st.out[0]));
        break;
      case fb::OpKind::SiluMul:
        for (int id : st.in) ptr(value_ptr(id));
        ptr(value_ptr(st.out[0]));
        q8_out();
        break;
      case fb::OpKind::Linear:
        ptr(value_ptr(st.in[0])), ptr(weight(0)), ptr(weight(1)), ptr(0);
        if (silu) {  // the silu_mul's output in place of y, then its int8 rows or null
          ptr(value_ptr(steps_[index + 1].out[0]));
          ptr(writes_int8_rows(steps_, index + 1, T, fused_quantize_) ? quant_input_ + silu_q8_at : 0);
        } else {
          ptr(value_ptr(st.out[0]));
        }
        if (norm) {  // the add_rms_norm's other input, weight, outputs, then its int8 rows or null
          const Step& next = steps_[index + 1];
          ptr(value_ptr(next.in[next.in[0] == st.out[0] ? 1 : 0]));
          ptr(weight_ptr(next, 0));
          ptr(value_ptr(next.out[0])), ptr(value_ptr(next.out[1]));
          ptr(writes_int8_rows(steps_, index + 1, T, fused_quantize_) ? quant_input_ : 0);
        }
        break;
      case fb::OpKind::Logits:
        rows = L;
        ptr(value_ptr(st.in[0])), ptr(weight(0)), ptr(0), ptr(logit_rows_), ptr(logits_);
        break;
      case fb::OpKind::PermuteColumns:
        ptr(value_ptr(st.in[0])), ptr(perms_ + st.perm_offset), ptr(value_ptr(st.out[0]));
        q8_out();
        break;
      case fb::OpKind::Split:
        ptr(value_ptr(st.in[0]));
        for (int id : st.out) ptr(value_ptr(id));
        break;
      case fb::OpKind::KvStore:
        ptr(value_ptr(st.in[0])), ptr(value_ptr(st.in[1])), ptr(slots_), ptr(kc), ptr(vc);
        scales();
        break;
      case fb::OpKind::RopeKvStore:
        ptr(value_ptr(st.in[0])), ptr(value_ptr(st.in[1])), ptr(slots_), ptr(value_ptr(st.out[0]));
        ptr(kc), ptr(vc);
        scales();
        break;
      case fb::OpKind::PagedAttention:
        // With its rope kernel: the rope_kv_store's qkv in place of q, the slots after positions.
        ptr(value_ptr(rope ? steps_[index - 1].in[0] : st.in[0])), ptr(kc), ptr(vc);
        scales();
        ptr(positions_);
        if (rope) ptr(slots_);
        ptr(query_start_), ptr(tables_);
        num(table_stride_), num(S), ptr(value_ptr(st.out[0]));
        q8_out();
        break;
      default:
        return internal_error(st.where + ": no launch for this op");
    }
    const Launch& l = rope ? st.rope : silu ? st.silu : norm ? st.norm : kernel_for(st, rows);
    if (l.work) ptr(work_);  // the kernel's workspace (codegen/KernelSpec.h), before T
    num(rows);
    const int64_t grid = grid_size(l.rule, rows, max_grid_, S);  // (S: the tiled attention's sequence tiles)
    if (grid == 0) continue;
    if ((&l == &st.main || &l == &st.silu || &l == &st.norm) && st.quant_in.kernel >= 0) {
      // The GEMV reads the input as int8 rows: quantize it first (logits: the gathered rows),
      // unless the previous step's GEMV quantized the same value.
      const bool logits = st.op == fb::OpKind::Logits;
      if (logits || reads_quantized != st.in[0]) {
        uint64_t qargs[4] = {value_ptr(st.in[0]), logits ? logit_rows_ : 0, quant_input_, 0};
        std::memcpy(&qargs[3], &rows, sizeof(rows));
        void* qparams[4] = {&qargs[0], &qargs[1], &qargs[2], &qargs[3]};
        Status q = start(st.quant_in, grid_size(st.quant_in.rule, rows, max_grid_), qparams);
        if (!q.ok()) return q.with_context(st.where + ": its quantize_q8 input kernel");
        after_ours = true;
      }
      args[0] = quant_input_ + (logits || reads_quantized != st.in[0] ? 0 : reads_quantized_at);
      if (!logits) quantized = st.in[0], quantized_at = args[0] - quant_input_;
    }
    params_.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) params_[i] = &args[i];
    Status launched = start(l, grid, params_.data());
    if (!launched.ok()) return launched.with_context(st.where);
    after_ours = true;
    if (writes_q8) quantized = st.out[0], quantized_at = 0;
    if (silu && writes_int8_rows(steps_, index + 1, T, fused_quantize_))
      quantized = steps_[index + 1].out[0], quantized_at = silu_q8_at;
    silu_done = silu;
    // (The norm kernel's int8 rows go to the start of quant_input_ once every block has read
    // the GEMV's own: its last block writes them.)
    if (norm && writes_int8_rows(steps_, index + 1, T, fused_quantize_))
      quantized = steps_[index + 1].out[0], quantized_at = 0;
    norm_done = norm;
  }
  if (timed) RETURN_IF_ERROR(driver_->record_event(events_[steps_.size()]));  // the last step done
  return ok_status();
}

Status CudaExecutor::copy_kv_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_kv_blocks_ || dst < 0 || dst >= num_kv_blocks_)
    return invalid_argument("copy_kv_block: block outside the " + std::to_string(num_kv_blocks_) + " KV blocks");
  if (src == dst) return ok_status();
  for (int l = 0; l < num_layers_; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const DevicePtr base = kv_ + kv_layer_bytes_ * static_cast<uint64_t>(l) + kv_half_bytes_ * kv;
      RETURN_IF_ERROR(driver_->copy_on_device(base + kv_block_bytes_per_layer_ * static_cast<uint64_t>(dst),
                                              base + kv_block_bytes_per_layer_ * static_cast<uint64_t>(src),
                                              kv_block_bytes_per_layer_));
      if (kv_i8_) {
        const uint64_t scale_bytes = static_cast<uint64_t>(num_kv_heads_) * block_size_ * sizeof(float);
        const DevicePtr sb = base + kv_codes_bytes_;
        RETURN_IF_ERROR(driver_->copy_on_device(sb + scale_bytes * static_cast<uint64_t>(dst),
                                                sb + scale_bytes * static_cast<uint64_t>(src), scale_bytes));
      }
    }
  return ok_status();
}

}  // namespace llmrt::cuda
