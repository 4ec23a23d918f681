// llmc: the ahead-of-time compiler. `llmc compile MODEL -o plan.fb`, `llmc inspect plan.fb`.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"
#include "compiler/Driver.h"
#include "compiler/PlanWriter.h"
#include "compiler/tokenizer/TokenizeCommand.h"
#include "compiler/tokenizer/TokenizerSource.h"
#include "runtime/chat/chat_template.h"
#include "runtime/plan/plan_inspect.h"

namespace {

std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty())
      out.push_back(item);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

llmrt::Status writeBytes(const std::filesystem::path &path, const void *data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
  if (!out)
    return llmrt::invalid_argument("cannot write '" + path.string() + "'");
  return llmrt::ok_status();
}

/// Writes each kernel's source and images so external tools (ptxas, llvm-readelf) can check them.
llmrt::Status extractKernels(const llmrt::fb::Plan &plan, const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!plan.kernels())
    return llmrt::ok_status();
  for (const auto *k : *plan.kernels()) {
    std::string entry = k->name()->str();
    if (entry.find('/') != std::string::npos || entry.find("..") != std::string::npos)
      return llmrt::invalid_argument("kernel entry '" + entry + "' is not a plain name");
    std::filesystem::path base = std::filesystem::path(dir) / entry;
    if (k->source())
      RETURN_IF_ERROR(writeBytes(base.string() + ".cu", k->source()->data(), k->source()->size()));
    if (!k->images())
      continue;
    for (const auto *im : *k->images()) {
      std::string t = im->target()->str();
      if (im->ptx())
        RETURN_IF_ERROR(writeBytes(base.string() + "." + t + ".ptx", im->ptx()->data(), im->ptx()->size()));
      if (im->cubin())
        RETURN_IF_ERROR(writeBytes(base.string() + "." + t + ".cubin", im->cubin()->data(), im->cubin()->size()));
    }
  }
  return llmrt::ok_status();
}

int fail(const llmrt::Status &s) {
  std::fprintf(stderr, "llmc: error: %s\n", llmrt::printable(s.to_string()).c_str());
  return 1;
}

/// `llmc chat-template`: the template, bos/eos texts and special tokens come from the tokenizer.
int renderChatTemplate(const std::string &tokenizerPath, const std::string &messagesPath, bool addGenerationPrompt) {
  auto data = llmc::loadTokenizerFrom(tokenizerPath);
  if (!data.ok())
    return fail(data.status());
  if (data->chat_template.empty())
    return fail(llmrt::not_found("'" + tokenizerPath + "' has no chat template"));
  auto tmpl = llmrt::ChatTemplate::parse(data->chat_template);
  if (!tmpl.ok())
    return fail(tmpl.status().with_context("chat template"));
  std::ifstream in(messagesPath);
  if (!in)
    return fail(llmrt::not_found("cannot read '" + messagesPath + "'"));
  nlohmann::ordered_json input = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded())
    return fail(llmrt::invalid_argument("'" + messagesPath + "' is not valid JSON"));
  nlohmann::ordered_json messages = input, extra = nlohmann::ordered_json::object();
  if (input.is_object()) {
    if (!input.contains("messages") || !input["messages"].is_array())
      return fail(llmrt::invalid_argument("'" + messagesPath + "' has no \"messages\" array"));
    messages = input["messages"];
    for (auto &[k, v] : input.items())
      if (k != "messages")
        extra[k] = v;
  } else if (!input.is_array()) {
    return fail(llmrt::invalid_argument("'" + messagesPath + "': expected an array of messages"));
  }
  auto tokenText = [&](int32_t id) {
    return id >= 0 && id < static_cast<int32_t>(data->tokens.size()) ? data->tokens[id] : std::string();
  };
  if (!extra.contains("bos_token"))
    extra["bos_token"] = tokenText(data->bos_id);
  if (!extra.contains("eos_token"))
    extra["eos_token"] = tokenText(data->eos_id);
  auto text = (*tmpl)->render(messages, addGenerationPrompt, extra);
  if (!text.ok())
    return fail(text.status());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"llmc: compiles a Hugging Face checkpoint or a GGUF file into a plan for llmrt"};
  app.set_version_flag("--version", std::string(llmc::kCompilerVersion));
  app.require_subcommand(1);

  llmc::CompileOptions copts;
  std::string targets = "default";
  auto *compile = app.add_subcommand("compile", "compile a model folder or .gguf into plan.fb");
  compile->add_option("model", copts.modelPath,
                      "Hugging Face folder or .gguf file (with --synthetic-weights: a config.json or its folder)")
      ->required();
  std::string kernelCache;
  compile->add_option("--kernel-cache", kernelCache,
                      "directory of the NVRTC compile cache, or 'off' (default: $LLMC_KERNEL_CACHE, else "
                      "~/.cache/llmc/kernels)");
  uint64_t syntheticSeed = 0;
  CLI::Option *synthetic = compile->add_option(
      "--synthetic-weights", syntheticSeed,
      "build the plan from the config alone: no weights in the file, llmrt generates them at load "
      "from this seed (for benchmarks of big shapes; outputs are meaningless)");
  compile->add_option("-o,--output", copts.outputPath, "plan file to write")->required();
  compile->add_option("--dump-ir", copts.dumpIrDir, "write the IR after import and after each pass here");
  compile->add_option("--disable-pass", copts.disabledPasses, "skip a pass (repeatable): pack-weights, fuse-qkv, fuse-gate-up, fuse-add-rmsnorm, kv-cache-layout, fuse-rope-kv-store, plan-memory");
  compile->add_option("--from-ir", copts.fromIr, "compile this edited .mlir against the model's tensors");
  compile->add_option("--target", targets, "GPU targets for kernel images, comma separated (sm_80,sm_90), 'default' or 'none'");
  compile->add_option("--kv-block-size", copts.kvBlockSize, "tokens per KV block")->check(CLI::Range(1, 4096));
  compile->add_option("--max-model-len", copts.maxModelLen, "cap the context below the model's")->check(CLI::NonNegativeNumber);
  compile->add_option("--max-tokens-per-step", copts.maxTokensPerStep, "largest batch (tokens) a step may hold")->check(CLI::Range(1, 1 << 20));
  compile->add_option("--max-seqs-per-step", copts.maxSeqsPerStep, "most sequences a step may hold")->check(CLI::Range(1, 1 << 16));
  compile->add_option("--quantize", copts.quantize,
                      "round-to-nearest quantization of float weights: int8 | int5 | int4, then [-gN|-gNsM|-row]"
                      "[-sym|-asym] (int8: g32 sym, int5: g32 asym, int4: g128 asym), or a format name "
                      "(int4-g128-f16-min); quantized checkpoint tensors stay as they are");
  compile->add_flag("!--no-quantize-embeddings", copts.quantizeEmbeddings,
                    "with --quantize, keep the embedding table and lm_head in f32");
  compile->add_flag("--dequantize", copts.dequantize,
                    "store every weight as f32 (the float baseline of a quantized checkpoint); with --quantize: re-quantize from the dequantized weights");
  compile->add_option("--weight-dtype", copts.weightDtype,
                      "storage of weight matrices that are not quantized (linear, embedding, lm_head): "
                      "f32 (default), bf16 or f16, rounded to nearest even; norms and biases stay f32")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  compile->add_flag("!--no-tensor-cores", copts.tensorCores,
                    "GPU linear/logits kernels: keep steps of 16+ rows off the tensor cores (TF32 mma), every "
                    "product in f32 on CUDA cores");
  compile->add_option("--dense-gemm", copts.denseGemm,
                      "GPU linear steps of 16+ rows with dense bf16 or f32 weights: cublaslt (default; "
                      "libcublasLt at run time, bf16 x bf16 or TF32 with f32 accumulation, the generated "
                      "kernel as fallback) or generated (the plan's TF32 tensor-core kernels)")
      ->check(CLI::IsMember({"cublaslt", "generated"}));
  compile->add_option("--quant-gemm", copts.quantGemm,
                      "GPU linear steps of 16+ rows with quantized weights (cuda-mma layout): cublaslt "
                      "(default; the weight dequantized to a bf16 buffer, then a bf16 x bf16 cuBLASLt GEMM "
                      "with f32 accumulation; the generated kernels as fallback) or generated (the plan's "
                      "GEMV up to 32 rows, TF32 tensor-core tiles from 33)")
      ->check(CLI::IsMember({"cublaslt", "generated"}));
  compile->add_option("--quant-gemv", copts.quantGemv,
                      "GPU linear steps below the tensor-core / library threshold (decode) with quantized "
                      "weights: int8 (default; the input quantized per 32 values as the CPU's fast contract "
                      "does, then exact integer block sums in dp4a) or f32 (the f32 input times the "
                      "dequantized weights)")
      ->check(CLI::IsMember({"int8", "f32"}));
  compile->add_option("--gemv-l2-prefetch", copts.gemvL2PrefetchMiB,
                      "MiB of weights a GPU decode GEMV asks the L2 for before its wait on the kernel "
                      "before it (sm_90+, launched overlapped with that kernel: the fetch runs while a norm "
                      "or the attention leaves the memory bus idle); 0 turns it off (default 16)")
      ->check(CLI::Range(0, 4096));
  compile->add_option("--weight-layout", copts.weightLayout,
                      "layout of quantized weights: interleaved8 (8 rows per SIMD load, what the fast CPU "
                      "kernels read), row-groups (the checkpoint's blocks row by row; scalar fast kernels) "
                      "or cuda-mma (tiles of mma.sync B fragments for the CUDA kernels; the CPU runs it "
                      "with scalar kernels)")
      ->check(CLI::IsMember({"interleaved8", "row-groups", "cuda-mma"}));
  compile->add_option("--kv-cache-dtype", copts.kvCacheDtype,
                      "KV cache element type: auto (default: the --weight-dtype, f32 unless told), f32, bf16 or "
                      "f16 (rounded to nearest even; half the bytes of f32), fp8 (E4M3, rounded to nearest "
                      "even and saturating at +-448, unscaled; a quarter of f32's bytes), or int8 (one f32 "
                      "scale per token and head)")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "f16", "fp8", "int8"}));
  compile->add_option("--cpu-kernels", copts.cpuKernels,
                      "numerical contract of quantized CPU kernels recorded in the plan: fast (int8 "
                      "activations, integer dot products) or reference (dequantize to f32)")
      ->check(CLI::IsMember({"fast", "reference"}));
  compile->add_flag("-q,--quiet", copts.quiet, "print nothing on success");

  std::string planPath, memory;
  bool json = false;
  auto *inspect = app.add_subcommand("inspect", "describe a plan: model, options, tensors, kernels, KV cache, memory fit");
  inspect->add_option("plan", planPath, "plan file")->required();
  inspect->add_flag("--json", json, "machine-readable output");
  inspect->add_option("--memory", memory, "memory budget (e.g. 8GiB): KV blocks and sequences that fit");
  std::string kernelDir;
  inspect->add_option("--extract-kernels", kernelDir, "write every kernel image as DIR/<entry>.<target>.{ptx,cubin} and its source as DIR/<entry>.cu");

  llmc::TokenizeOptions topts;
  std::string inputSep;
  bool noParseSpecial = false;
  auto *tokenize = app.add_subcommand("tokenize", "encode stdin to token ids (or --decode ids to text)");
  tokenize->add_option("--tokenizer", topts.tokenizerPath,
                       "tokenizer.json, a folder with it (or GPT-2 encoder.json + vocab.bpe), a .gguf or a plan")
      ->required();
  tokenize->add_flag("--no-bos", topts.noBos, "do not add the BOS token");
  tokenize->add_flag("--decode", topts.decode, "read ids, print text");
  tokenize->add_flag("--no-parse-special", noParseSpecial, "treat special-token text as plain text");
  auto *sepOpt = tokenize->add_option("--input-sep", inputSep, "split stdin on STR; one line of ids per piece");

  std::string chatTokenizer, messagesPath;
  bool addGenerationPrompt = false;
  auto *chat = app.add_subcommand("chat-template", "render the tokenizer's chat template for a conversation");
  chat->add_option("--tokenizer", chatTokenizer, "tokenizer.json, a folder with it, a .gguf or a plan")->required();
  chat->add_option("--messages", messagesPath,
                   "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...], ...}")
      ->required();
  chat->add_flag("--add-generation-prompt", addGenerationPrompt, "end with the assistant turn's opening");

  CLI11_PARSE(app, argc, argv);

  if (*chat)
    return renderChatTemplate(chatTokenizer, messagesPath, addGenerationPrompt);
  if (*tokenize) {
    topts.parseSpecial = !noParseSpecial;
    if (*sepOpt)
      topts.inputSep = inputSep;
    return llmc::runTokenizeCommand(topts, std::cin, std::cout, std::cerr);
  }

  if (*compile) {
    for (int i = 0; i < argc; ++i)
      copts.commandLine.push_back(argv[i]);
    if (*synthetic)
      copts.syntheticSeed = syntheticSeed;
    if (!kernelCache.empty())
      llmc::setKernelCacheDir(kernelCache);
    if (targets == "default")
      copts.targets = llmc::nvrtcAvailable() ? llmc::defaultTargets() : std::vector<std::string>{};
    else if (targets != "none")
      copts.targets = splitList(targets);
    copts.targetsGiven = targets != "default" && targets != "none";
    for (const std::string &t : copts.targets)
      if (auto s = llmc::validateTarget(t); !s.ok())
        return fail(s);
    if (auto s = llmc::compile(copts); !s.ok())
      return fail(s);
    return 0;
  }
  if (*inspect) {
    std::optional<uint64_t> budget;
    if (!memory.empty()) {
      budget = llmrt::parse_bytes(memory);
      if (!budget)
        return fail(llmrt::invalid_argument("--memory: cannot parse '" + memory + "' (e.g. 8GiB, 512MiB)"));
    }
    // The FlatBuffer is all inspect reads: synthetic weights are not generated.
    auto plan = llmrt::Plan::open(planPath, /*generate_synthetic=*/false);
    if (!plan.ok())
      return fail(plan.status());
    std::fputs(llmrt::inspect_plan(**plan, json, budget).c_str(), stdout);
    if (!kernelDir.empty())
      if (auto s = extractKernels((*plan)->fb(), kernelDir); !s.ok())
        return fail(s);
    return 0;
  }
  return 0;
}
