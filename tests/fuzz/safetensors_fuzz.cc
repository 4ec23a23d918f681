// libFuzzer target: safetensors header parsing and validation, and f32
// conversion of every tensor it accepts.

#include "compiler/frontend/Safetensors.h"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace llmc;
  auto file = SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!file.ok())
    return 0;
  for (const SafetensorsTensor &t : (*file)->tensors())
    (void)(*file)->find(t.name);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file).value());
  auto source = SafetensorsSource::fromFiles(std::move(files));
  if (!source.ok())
    return 0;
  std::vector<float> buffer;
  for (const SourceTensor &t : (*source)->tensors()) {
    int64_t n = t.numElements();
    if (n > (1 << 20))
      continue;
    buffer.assign(static_cast<size_t>(n), 0.0f);
    (void)(*source)->readF32(t.name, buffer.data());
  }
  return 0;
}
