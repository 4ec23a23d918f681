// libFuzzer target: config.json, generation_config.json and
// model.safetensors.index.json parsing.

#include "compiler/frontend/Model.h"
#include "compiler/frontend/Safetensors.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  (void)llmc::parseHfConfig(text, "config.json");
  (void)llmc::parseGenerationConfig(text, "generation_config.json");
  (void)llmc::parseSafetensorsIndex(text, "model.safetensors.index.json");
  return 0;
}
