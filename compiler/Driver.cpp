//===- Driver.cpp - llmc compile ------------------------------------------===//
#include "compiler/Driver.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "codegen/NvrtcCompiler.h"
#include "compiler/Importer.h"
#include "compiler/PlanWriter.h"
#include "compiler/frontend/Dequant.h"
#include "compiler/frontend/HfModel.h"
#include "compiler/frontend/Model.h"
#include "compiler/tokenizer/HfTokenizer.h"
#include "runtime/chat/chat_template.h"
#include "ir/LLMDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Pipeline.h"
#include "runtime/quant/quant_format.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace fs = std::filesystem;

namespace llmc {
namespace {

llmrt::Status dumpIr(mlir::ModuleOp module, const std::string &dir, int index,
                     const std::string &stage) {
  char name[64];
  std::snprintf(name, sizeof(name), "%02d-%s.mlir", index, stage.c_str());
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string path = (fs::path(dir) / name).string();
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  std::ofstream out(path);
  out << os.str();
  if (!out)
    return llmrt::invalid_argument("cannot write IR dump '" + path + "'");
  return llmrt::ok_status();
}

/// Collects MLIR diagnostics so errors reach the user as one Status.
struct DiagnosticCollector {
  explicit DiagnosticCollector(mlir::MLIRContext &ctx)
      : handler(&ctx, [this](mlir::Diagnostic &d) {
          std::string s;
          llvm::raw_string_ostream os(s);
          os << d.getLocation() << ": " << d;
          text += (text.empty() ? "" : "\n") + os.str();
          return mlir::success();
        }) {}
  mlir::ScopedDiagnosticHandler handler;
  std::string text;
};

} // namespace

llmrt::StatusOr<std::string> expandQuantizeSpec(const std::string &spec) {
  if (llmrt::quant::parse_format(spec).ok())
    return spec;
  auto bad = [&] {
    return llmrt::invalid_argument(
        "--quantize '" + spec +
        "': expected int8 | int5 | int4[-gN|-gNsM|-row][-sym|-asym] or a format name like int4-g128-f16-min");
  };
  std::string rest = spec;
  int bits = 0;
  if (rest.rfind("int8", 0) == 0)
    bits = 8;
  else if (rest.rfind("int5", 0) == 0)
    bits = 5;
  else if (rest.rfind("int4", 0) == 0)
    bits = 4;
  else
    return bad();
  rest = rest.substr(4);
  // int8: Q8_0's format; int5: Q5_1's (-sym: Q5_0's); int4: GPTQ-like groups of 128 with a min.
  std::string group = bits == 4 ? "g128" : "g32";
  std::string offset = bits == 8 ? "sym" : "min";
  while (!rest.empty()) {
    if (rest[0] != '-')
      return bad();
    size_t end = rest.find('-', 1);
    std::string part = rest.substr(1, end == std::string::npos ? std::string::npos : end - 1);
    rest = end == std::string::npos ? "" : rest.substr(end);
    if (part == "sym")
      offset = "sym";
    else if (part == "asym")
      offset = "min";
    else if (part == "row" || (part.size() > 1 && part[0] == 'g'))
      group = part;
    else
      return bad();
  }
  std::string name = "int" + std::to_string(bits) + "-" + group + "-" +
                     (group == "row" ? "f32" : "f16") + "-" + offset;
  auto f = llmrt::quant::parse_format(name);
  if (!f.ok())
    return f.status().with_context("--quantize '" + spec + "'");
  return name;
}

llmrt::Status compile(const CompileOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  llmrt::StatusOr<LoadedModel> loaded =
      opts.syntheticSeed ? loadSyntheticModel(opts.modelPath) : loadModel(opts.modelPath);
  if (!loaded.ok())
    return loaded.status();
  LoadedModel &model = loaded.value();
  if ((model.sourceKind == "hf" || model.sourceKind == "synthetic") && !model.tokenizer) {
    fs::path tj = fs::path(model.path) / "tokenizer.json";
    if (fs::exists(tj)) {
      ASSIGN_OR_RETURN(llmrt::TokenizerData tok, loadHfTokenizer(tj.string()));
      model.tokenizer = std::move(tok);
    }
  }
  RETURN_IF_ERROR(validateModelTensors(model.config, *model.tensors));
  // The chat template ships in the plan: syntax our engine cannot render fails here, at compile
  // time, not on the first request.
  if (model.tokenizer && !model.tokenizer->chat_template.empty()) {
    auto tmpl = llmrt::ChatTemplate::parse(model.tokenizer->chat_template);
    if (!tmpl.ok())
      return tmpl.status().with_context("the model's chat template");
  }
  if (model.tokenizer &&
      static_cast<int64_t>(model.tokenizer->tokens.size()) > model.config.vocabSize)
    return llmrt::invalid_argument(
        "the tokenizer has " + std::to_string(model.tokenizer->tokens.size()) +
        " tokens but the model's vocabulary is " + std::to_string(model.config.vocabSize) +
        ": tokenizer and weights do not belong together");

  mlir::MLIRContext context;
  context.loadDialect<llm::LLMDialect, mlir::func::FuncDialect>();
  DiagnosticCollector diags(context);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  if (!opts.fromIr.empty()) {
    llvm::SourceMgr sm;
    std::string err;
    auto buffer = llvm::MemoryBuffer::getFile(opts.fromIr);
    if (!buffer)
      return llmrt::not_found("cannot read IR file '" + opts.fromIr + "'");
    sm.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
    module = mlir::parseSourceFile<mlir::ModuleOp>(sm, &context);
    if (!module)
      return llmrt::invalid_argument("cannot parse '" + opts.fromIr + "':\n" + diags.text);
  } else {
    auto imported = importModel(context, model);
    if (!imported.ok())
      return llmrt::Status(imported.status().code(),
                           imported.status().message() +
                               (diags.text.empty() ? "" : ":\n" + diags.text));
    module = std::move(imported.value());
  }
  int dumpIndex = 0;
  if (!opts.dumpIrDir.empty())
    RETURN_IF_ERROR(dumpIr(*module, opts.dumpIrDir, dumpIndex++, opts.fromIr.empty() ? "import" : "input"));

  std::set<std::string> disabled(opts.disabledPasses.begin(), opts.disabledPasses.end());
  std::vector<std::string> all = pipelinePassNames();
  for (const std::string &d : disabled)
    if (std::find(all.begin(), all.end(), d) == all.end()) {
      std::string list;
      for (auto &n : all)
        list += (list.empty() ? "" : ", ") + n;
      return llmrt::invalid_argument("--disable-pass: unknown pass '" + d + "' (passes: " + list + ")");
    }
  std::string quantizeFormat;
  if (!opts.quantize.empty()) {
    ASSIGN_OR_RETURN(quantizeFormat, expandQuantizeSpec(opts.quantize));
  }
  if (opts.cpuKernels != "fast" && opts.cpuKernels != "reference")
    return llmrt::invalid_argument("--cpu-kernels '" + opts.cpuKernels +
                                   "': expected reference or fast");
  std::vector<std::string> ran;
  for (const std::string &name : all) {
    if (disabled.count(name))
      continue;
    PipelineOptions popts;
    popts.kvBlockSize = opts.kvBlockSize;
    popts.kvDtype = opts.kvCacheDtype == "auto" ? opts.weightDtype : opts.kvCacheDtype;
    popts.quantize = quantizeFormat;
    popts.quantizeEmbeddings = opts.quantizeEmbeddings;
    popts.dequantize = opts.dequantize;
    popts.denseDtype = opts.weightDtype;
    popts.weightLayout = opts.weightLayout;
    for (const std::string &other : all)
      if (other != name)
        popts.disabled.insert(other);
    mlir::PassManager pm(&context);
    buildPipeline(pm, popts);
    if (mlir::failed(pm.run(*module)))
      return llmrt::invalid_argument("pass " + name + " failed:\n" + diags.text);
    ran.push_back(name);
    if (!opts.dumpIrDir.empty())
      RETURN_IF_ERROR(dumpIr(*module, opts.dumpIrDir, dumpIndex++, name));
  }
  if (mlir::failed(mlir::verify(*module)))
    return llmrt::internal_error("IR failed verification after the passes:\n" + diags.text);

  PlanWriterOptions wopts;
  wopts.commandLine = opts.commandLine;
  wopts.passes = ran;
  wopts.targets = opts.targets;
  wopts.maxModelLen = opts.maxModelLen;
  wopts.maxTokensPerStep = opts.maxTokensPerStep;
  wopts.maxSeqsPerStep = opts.maxSeqsPerStep;
  wopts.cpuKernels = opts.cpuKernels;
  wopts.syntheticSeed = opts.syntheticSeed;
  if (!opts.tensorCores) // read by codegen (KernelEmitter.h): linear kernels without the mma path
    (*module)->setAttr("llm.gpu_tensor_cores", mlir::BoolAttr::get(&context, false));
  if (opts.denseGemm != "cublaslt" && opts.denseGemm != "generated")
    return llmrt::invalid_argument("--dense-gemm '" + opts.denseGemm + "': expected cublaslt or generated");
  if (opts.denseGemm == "generated") // read by codegen (KernelEmitter.h): no GEMM library steps
    (*module)->setAttr("llm.gpu_dense_gemm", mlir::StringAttr::get(&context, "generated"));
  if (opts.quantGemm != "cublaslt" && opts.quantGemm != "generated")
    return llmrt::invalid_argument("--quant-gemm '" + opts.quantGemm + "': expected cublaslt or generated");
  if (opts.quantGemm == "generated") // the same for linear steps over quantized weights
    (*module)->setAttr("llm.gpu_quant_gemm", mlir::StringAttr::get(&context, "generated"));
  if (opts.quantGemv != "int8" && opts.quantGemv != "f32")
    return llmrt::invalid_argument("--quant-gemv '" + opts.quantGemv + "': expected int8 or f32");
  if (opts.quantGemv == "f32") // read by codegen (KernelEmitter.h): the GEMV over f32 activations
    (*module)->setAttr("llm.gpu_quant_gemv", mlir::StringAttr::get(&context, "f32"));
  if (opts.gemvL2PrefetchMiB < 0 || opts.gemvL2PrefetchMiB > 4096)
    return llmrt::invalid_argument("--gemv-l2-prefetch " + std::to_string(opts.gemvL2PrefetchMiB) +
                                   ": expected 0 to 4096 MiB");
  // read by codegen (KernelEmitter.h)
  (*module)->setAttr("llm.gpu_gemv_l2_prefetch_bytes",
                     mlir::IntegerAttr::get(mlir::IntegerType::get(&context, 64),
                                            opts.gemvL2PrefetchMiB * (int64_t(1) << 20)));
  auto stats = writePlan(*module, model, wopts, opts.outputPath);
  if (!stats.ok()) {
    std::error_code ec;
    fs::remove(opts.outputPath, ec); // never leave a half-written plan behind
    return stats.status();
  }
  if (!stats->stepsWithoutKernel.empty()) {
    // A warning where --target asked for GPUs, printed even with --quiet; a note for the default
    // targets (the plan is then meant for the CPU as much as for a GPU).
    std::map<std::string, int> byOp;
    for (const std::string &op : stats->stepsWithoutKernel)
      ++byOp[op];
    std::string list;
    for (const auto &[op, n] : byOp)
      list += (list.empty() ? "" : ", ") + std::to_string(n) + " " + op;
    const bool quantized = byOp.count("llm.linear") || byOp.count("llm.logits") || byOp.count("llm.embedding");
    const std::string hint = quantized && opts.weightLayout != "cuda-mma"
                                 ? "; quantized weights in the " + opts.weightLayout +
                                       " layout are read by the CPU only: compile with --weight-layout cuda-mma "
                                       "for GPUs"
                                 : std::string();
    if (opts.targetsGiven || !opts.quiet)
      std::fprintf(stderr,
                   "llmc: %s: %zu of %zu steps have no GPU kernel (%s), so `llmrt --device cuda` refuses this "
                   "plan and --device auto runs it on the CPU%s\n",
                   opts.targetsGiven ? "warning" : "note", stats->stepsWithoutKernel.size(), stats->steps,
                   list.c_str(), hint.c_str());
  }
  if (!opts.quiet && !opts.dequantize) {
    // GGUF blocks held in a wider format of ours (Dequant.h): say what they cost.
    std::set<std::string> types;
    uint64_t fileBytes = 0, planBytes = 0;
    int widened = 0;
    for (const SourceTensor &t : model.tensors->tensors()) {
      auto format = model.tensors->nativeFormat(t.name);
      if (!format || t.shape.size() != 2 || t.dtype == SourceDType::Packed)
        continue;
      auto rowBytes = llmrt::quant::row_bytes(*format, t.shape[1]);
      const int64_t file = storageBytes(t.dtype, t.numElements());
      if (!rowBytes.ok() || file < 0)
        continue;
      const int64_t plan = *rowBytes * t.shape[0];
      if (plan <= file)
        continue;
      ++widened;
      types.insert(sourceDTypeName(t.dtype));
      fileBytes += static_cast<uint64_t>(file);
      planBytes += static_cast<uint64_t>(plan);
    }
    if (widened > 0) {
      std::string list;
      for (const std::string &type : types)
        list += (list.empty() ? "" : ", ") + type;
      std::fprintf(stderr,
                   "llmc: note: %d tensors of GGUF %s blocks are held with the same values in wider formats: "
                   "%.1f MiB in the file, %.1f MiB in the plan (README: Quantized weights)\n",
                   widened, list.c_str(), fileBytes / 1048576.0, planBytes / 1048576.0);
    }
  }
  if (!opts.quiet) {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "llmc: wrote %s: %s (%s), %zu tensors, %.1f MiB weights%s, %zu steps, %zu "
                 "kernels, %zu targets (%d images compiled, %d from the kernel cache); %.2f s, "
                 "peak RSS %.1f MiB\n",
                 opts.outputPath.c_str(), model.config.name.c_str(),
                 model.config.architecture.c_str(), stats->tensors,
                 stats->weightBytes / 1048576.0,
                 opts.syntheticSeed ? " (synthetic: generated at load)" : "", stats->steps, stats->kernels,
                 opts.targets.size(), kernelCacheStats().misses, kernelCacheStats().hits, secs,
                 ru.ru_maxrss / 1024.0);
  }
  return llmrt::ok_status();
}

} // namespace llmc
