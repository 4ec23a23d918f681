// libFuzzer target: GGUF reader, metadata accessors, tokenizer extraction, every tensor's
// conversion (to f32 and to its held quantized format, row by row, model or not), the GGUF →
// model mapping and its tensors' conversion. Any input must give a Status,
// never a crash, a hang or an ASan report.

#include "compiler/frontend/Dequant.h"
#include "compiler/frontend/Gguf.h"
#include "runtime/quant/quant_format.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace llmc;
  auto file = GgufFile::parse(data, size, "fuzz.gguf");
  if (!file.ok())
    return 0;
  const GgufFile &f = **file;
  for (const auto &[key, value] : f.metadata()) {
    (void)f.getString(key);
    (void)f.getInt(key);
    (void)f.getFloat(key);
    (void)f.getBool(key);
    (void)f.getStringArray(key);
    (void)f.getIntArray(key);
    (void)f.getFloatArray(key);
    (void)value.size();
  }
  (void)readGgufTokenizer(f);
  std::vector<float> buffer;
  std::vector<uint8_t> held;
  for (const GgufTensorInfo &t : f.tensors()) {
    (void)ggufToHfTensorName(t.name);
    // Every tensor of a block type we read, model or not: to f32 and, per row, to its held format.
    auto dtype = ggmlToSourceDType(t.type);
    if (!dtype || t.numElements <= 0 || t.numElements > (1 << 20))
      continue;
    buffer.assign(static_cast<size_t>(t.numElements), 0.0f);
    (void)dequantize(*dtype, f.tensorData(t), t.numBytes, t.numElements, buffer.data());
    auto format = heldFormat(*dtype);
    if (!format || t.dims.empty() || storageBytes(*dtype, t.numElements) != static_cast<int64_t>(t.numBytes))
      continue;
    const int64_t k = static_cast<int64_t>(t.dims[0]), rowBytes = storageBytes(*dtype, k);
    auto heldRow = llmrt::quant::row_bytes(*format, k);
    if (rowBytes <= 0 || !heldRow.ok() || t.numElements % k != 0)
      continue;
    held.assign(static_cast<size_t>(*heldRow), 0);
    // Sub-scale formats (k-quants): the expansion to groups of `sub` has the same values, bit for bit.
    const llmrt::quant::Format wide = llmrt::quant::expanded_format(*format);
    std::vector<uint8_t> expanded(static_cast<size_t>(*llmrt::quant::row_bytes(wide, k)));
    std::vector<float> check(static_cast<size_t>(k));
    for (int64_t r = 0; r < t.numElements / k; ++r) {
      repackBlocks(*dtype, f.tensorData(t) + r * rowBytes, k / blockElements(*dtype), held.data());
      (void)llmrt::quant::check_row(*format, held.data(), k);
      llmrt::quant::dequantize_row(*format, held.data(), k, buffer.data());
      if (format->sub == 0)
        continue;
      llmrt::quant::expand_row(*format, held.data(), k, expanded.data());
      llmrt::quant::dequantize_row(wide, expanded.data(), k, check.data());
      if (std::memcmp(check.data(), buffer.data(), static_cast<size_t>(k) * sizeof(float)) != 0)
        __builtin_trap(); // the sub-scales' products must be exact
    }
  }

  auto model = loadGgufModel(std::move(file).value(), "fuzz.gguf");
  if (!model.ok())
    return 0;
  std::vector<uint8_t> packed;
  for (const SourceTensor &t : model->tensors->tensors()) {
    int64_t n = t.numElements();
    if (n > (1 << 20))
      continue;
    buffer.assign(static_cast<size_t>(n), 0.0f);
    (void)model->tensors->readF32(t.name, buffer.data());
    // Quantized blocks kept as they are or widened (Q5_0 ... Q6_K) into their held format.
    if (auto format = model->tensors->nativeFormat(t.name); format && t.shape.size() == 2) {
      auto rowBytes = llmrt::quant::row_bytes(*format, t.shape[1]);
      if (!rowBytes.ok())
        continue;
      packed.assign(static_cast<size_t>(*rowBytes * t.shape[0]), 0);
      (void)model->tensors->readPacked(t.name, packed.data());
    }
  }
  return 0;
}
