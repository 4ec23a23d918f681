//===- Safetensors.cpp - safetensors reader (single and sharded) ----------===//

#include "compiler/frontend/Safetensors.h"

#include "compiler/frontend/Dequant.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;
using json = nlohmann::json;

namespace {
struct DTypeInfo {
  SafetensorsDType type;
  const char *name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::BOOL, "BOOL", 1},  {SafetensorsDType::U8, "U8", 1},
    {SafetensorsDType::I8, "I8", 1},      {SafetensorsDType::F8_E4M3, "F8_E4M3", 1},
    {SafetensorsDType::F8_E5M2, "F8_E5M2", 1}, {SafetensorsDType::U16, "U16", 2},
    {SafetensorsDType::I16, "I16", 2},    {SafetensorsDType::F16, "F16", 2},
    {SafetensorsDType::BF16, "BF16", 2},  {SafetensorsDType::U32, "U32", 4},
    {SafetensorsDType::I32, "I32", 4},    {SafetensorsDType::F32, "F32", 4},
    {SafetensorsDType::U64, "U64", 8},    {SafetensorsDType::I64, "I64", 8},
    {SafetensorsDType::F64, "F64", 8},
};

/// The safetensors reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;

std::string quoteName(std::string_view s) {
  std::string out = "'";
  // Keep error messages printable and short even for hostile names.
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
  }
  if (s.size() > 200)
    out += "...";
  return out + "'";
}

/// A JSON integer >= 0 as uint64, or nullopt.
std::optional<uint64_t> asUnsigned(const json &v) {
  if (v.is_number_unsigned())
    return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}
} // namespace

std::optional<SafetensorsDType> parseSafetensorsDType(std::string_view name) {
  for (const DTypeInfo &info : kDTypes)
    if (name == info.name)
      return info.type;
  return std::nullopt;
}

const char *safetensorsDTypeName(SafetensorsDType type) {
  for (const DTypeInfo &info : kDTypes)
    if (info.type == type)
      return info.name;
  return "?";
}

int64_t safetensorsDTypeSize(SafetensorsDType type) {
  for (const DTypeInfo &info : kDTypes)
    if (info.type == type)
      return info.size;
  return 1;
}

StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(const std::string &path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::open(path));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                   parse(mapped->data(), mapped->size(), path));
  file->file_ = std::move(mapped);
  return file;
}

StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::parse(const uint8_t *data, size_t size,
                       const std::string &nameForErrors) {
  auto fail = [&](const std::string &message) -> Status {
    return invalid_argument(nameForErrors + ": " + message);
  };
  if (size < 8)
    return fail("file is " + std::to_string(size) +
                " bytes, too short for the 8-byte safetensors header length");
  uint64_t headerLen;
  std::memcpy(&headerLen, data, 8);
  if (headerLen > size - 8)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the file (" + std::to_string(size - 8) +
                " bytes after the length field); truncated or not a "
                "safetensors file");
  if (headerLen > kMaxHeaderBytes)
    return fail("header length " + std::to_string(headerLen) +
                " exceeds the 100 MB limit");
  if (headerLen < 2 || data[8] != '{')
    return fail("header is not a JSON object (does not start with '{')");

  const char *headerBegin = reinterpret_cast<const char *>(data + 8);
  json header = json::parse(headerBegin, headerBegin + headerLen, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded())
    return fail("header is not valid JSON");
  if (!header.is_object())
    return fail("header is not a JSON object");

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->name_ = nameForErrors;
  file->dataSection_ = data + 8 + headerLen;
  const uint64_t dataSize = size - 8 - headerLen;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &key = it.key();
    const json &entry = it.value();
    if (key == "__metadata__") {
      if (!entry.is_object())
        return fail("'__metadata__' must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return fail("'__metadata__' value for " + quoteName(m.key()) +
                      " is not a string");
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string where = "tensor " + quoteName(key) + ": ";
    if (!entry.is_object())
      return fail(where + "entry is not an object");
    auto dtypeIt = entry.find("dtype");
    if (dtypeIt == entry.end() || !dtypeIt->is_string())
      return fail(where + "missing or non-string 'dtype'");
    std::string dtypeName = dtypeIt->get<std::string>();
    std::optional<SafetensorsDType> dtype = parseSafetensorsDType(dtypeName);
    if (!dtype)
      return fail(where + "unknown dtype " + quoteName(dtypeName));

    auto shapeIt = entry.find("shape");
    if (shapeIt == entry.end() || !shapeIt->is_array())
      return fail(where + "missing or non-array 'shape'");
    SafetensorsTensor tensor;
    tensor.name = key;
    tensor.dtype = *dtype;
    int64_t numel = 1;
    for (const json &dim : *shapeIt) {
      std::optional<uint64_t> d = asUnsigned(dim);
      if (!d || *d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(where + "shape entries must be non-negative integers");
      int64_t di = static_cast<int64_t>(*d);
      if (di != 0 && numel > std::numeric_limits<int64_t>::max() / di)
        return fail(where + "element count overflows");
      numel *= di;
      tensor.shape.push_back(di);
    }
    tensor.numElements = numel;

    auto offIt = entry.find("data_offsets");
    if (offIt == entry.end() || !offIt->is_array() || offIt->size() != 2)
      return fail(where + "'data_offsets' must be an array [begin, end]");
    std::optional<uint64_t> begin = asUnsigned((*offIt)[0]);
    std::optional<uint64_t> end = asUnsigned((*offIt)[1]);
    if (!begin || !end)
      return fail(where + "'data_offsets' must be non-negative integers");
    if (*begin > *end)
      return fail(where + "data_offsets begin " + std::to_string(*begin) +
                  " is after end " + std::to_string(*end));
    if (*end > dataSize)
      return fail(where + "data_offsets [" + std::to_string(*begin) + ", " +
                  std::to_string(*end) + ") out of range: the data section "
                  "has " + std::to_string(dataSize) + " bytes");
    int64_t elemSize = safetensorsDTypeSize(*dtype);
    if (numel > std::numeric_limits<int64_t>::max() / elemSize ||
        static_cast<uint64_t>(numel * elemSize) != *end - *begin)
      return fail(where + "shape has " + std::to_string(numel) +
                  " elements of " + dtypeName + " (" +
                  std::to_string(elemSize) + " bytes each) but data_offsets "
                  "span " + std::to_string(*end - *begin) + " bytes");
    tensor.begin = *begin;
    tensor.end = *end;
    file->tensors_.push_back(std::move(tensor));
  }

  std::sort(file->tensors_.begin(), file->tensors_.end(),
            [](const SafetensorsTensor &a, const SafetensorsTensor &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < file->tensors_.size(); ++i) {
    const SafetensorsTensor &prev = file->tensors_[i - 1];
    const SafetensorsTensor &cur = file->tensors_[i];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (cur.begin < prev.end && cur.begin != cur.end && prev.begin != prev.end)
      return fail("data of tensors " + quoteName(prev.name) + " [" +
                  std::to_string(prev.begin) + ", " + std::to_string(prev.end) +
                  ") and " + quoteName(cur.name) + " [" +
                  std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                  ") overlap");
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i)
    file->byName_.emplace(file->tensors_[i].name, i);
  return file;
}

const SafetensorsTensor *SafetensorsFile::find(std::string_view name) const {
  auto it = byName_.find(std::string(name));
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<std::map<std::string, std::string>>
parseSafetensorsIndex(std::string_view text, const std::string &where) {
  json index = json::parse(text.begin(), text.end(), nullptr, false);
  if (index.is_discarded() || !index.is_object())
    return invalid_argument(where + ": not a JSON object");
  auto mapIt = index.find("weight_map");
  if (mapIt == index.end() || !mapIt->is_object())
    return invalid_argument(where + ": missing or non-object 'weight_map'");
  std::map<std::string, std::string> weightMap;
  for (auto it = mapIt->begin(); it != mapIt->end(); ++it) {
    if (!it.value().is_string())
      return invalid_argument(where + ": weight_map entry " + quoteName(it.key()) +
                              " is not a string");
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos ||
        shard.find('\0') != std::string::npos)
      return invalid_argument(where + ": weight_map entry " + quoteName(it.key()) +
                              " names shard " + quoteName(shard) +
                              ", which is not a plain file name");
    weightMap.emplace(it.key(), std::move(shard));
  }
  if (weightMap.empty())
    return invalid_argument(where + ": 'weight_map' is empty");
  return weightMap;
}

StatusOr<std::unique_ptr<SafetensorsSource>>
SafetensorsSource::openFile(const std::string &path, bool keepInt32) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::open(path));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file));
  return fromFiles(std::move(files), keepInt32);
}

StatusOr<std::unique_ptr<SafetensorsSource>>
SafetensorsSource::openIndex(const std::string &indexPath, bool keepInt32) {
  ASSIGN_OR_RETURN(std::string text, readTextFile(indexPath));
  ASSIGN_OR_RETURN(auto weightMap, parseSafetensorsIndex(text, indexPath));
  std::string folder;
  if (size_t slash = indexPath.rfind('/'); slash != std::string::npos)
    folder = indexPath.substr(0, slash + 1);
  std::set<std::string> shardNames;
  for (const auto &[tensor, shard] : weightMap)
    shardNames.insert(shard);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile *> byShard;
  for (const std::string &shard : shardNames) {
    auto file = SafetensorsFile::open(folder + shard);
    if (!file.ok())
      return file.status().with_context(indexPath + ": shard " + quoteName(shard));
    byShard[shard] = file->get();
    files.push_back(std::move(file).value());
  }
  for (const auto &[tensor, shard] : weightMap)
    if (!byShard[shard]->find(tensor))
      return invalid_argument(indexPath + ": weight_map puts tensor " +
                              quoteName(tensor) + " in shard " + quoteName(shard) +
                              ", which does not contain it");
  return fromFiles(std::move(files), keepInt32);
}

StatusOr<std::unique_ptr<SafetensorsSource>>
SafetensorsSource::fromFiles(std::vector<std::unique_ptr<SafetensorsFile>> files,
                             bool keepInt32) {
  std::unique_ptr<SafetensorsSource> source(new SafetensorsSource());
  for (const auto &file : files) {
    for (const SafetensorsTensor &t : file->tensors()) {
      SourceDType dtype;
      bool listed = true;
      switch (t.dtype) {
      case SafetensorsDType::F32:
        dtype = SourceDType::F32;
        break;
      case SafetensorsDType::F16:
        dtype = SourceDType::F16;
        break;
      case SafetensorsDType::BF16:
        dtype = SourceDType::BF16;
        break;
      case SafetensorsDType::I32:
        if (keepInt32) { // raw quantized data, see raw()
          dtype = SourceDType::F32;
          listed = false;
          break;
        }
        [[fallthrough]];
      default:
        return invalid_argument(file->name() + ": tensor " + quoteName(t.name) +
                                " has dtype " + safetensorsDTypeName(t.dtype) +
                                "; supported: F32, F16, BF16");
      }
      auto [it, inserted] =
          source->locations_.emplace(t.name, Location{file.get(), &t});
      if (!inserted)
        return invalid_argument("tensor " + quoteName(t.name) + " appears in both " +
                                it->second.file->name() + " and " + file->name());
      if (listed)
        source->tensors_.push_back(SourceTensor{t.name, dtype, t.shape});
    }
  }
  source->files_ = std::move(files);
  return source;
}

Status SafetensorsSource::readF32(std::string_view name, float *out) const {
  auto it = locations_.find(std::string(name));
  if (it == locations_.end())
    return llmrt::not_found("no tensor " + quoteName(name) + " in the checkpoint");
  const SafetensorsTensor &t = *it->second.tensor;
  if (t.dtype != SafetensorsDType::F32 && t.dtype != SafetensorsDType::F16 &&
      t.dtype != SafetensorsDType::BF16)
    return invalid_argument(it->second.file->name() + ": tensor " + quoteName(name) +
                            " has dtype " + safetensorsDTypeName(t.dtype) +
                            " and cannot be read as floats");
  SourceDType dtype = t.dtype == SafetensorsDType::F32   ? SourceDType::F32
                      : t.dtype == SafetensorsDType::F16 ? SourceDType::F16
                                                         : SourceDType::BF16;
  Status st = dequantize(dtype, it->second.file->tensorData(t), t.end - t.begin,
                         t.numElements, out);
  if (!st.ok())
    return st.with_context(it->second.file->name() + ": tensor " + quoteName(name));
  return st;
}

std::optional<SafetensorsSource::Raw>
SafetensorsSource::raw(std::string_view name) const {
  auto it = locations_.find(std::string(name));
  if (it == locations_.end())
    return std::nullopt;
  return Raw{it->second.tensor, it->second.file->tensorData(*it->second.tensor),
             &it->second.file->name()};
}

std::vector<std::string> SafetensorsSource::allNames() const {
  std::vector<std::string> names;
  for (const auto &file : files_)
    for (const SafetensorsTensor &t : file->tensors())
      names.push_back(t.name);
  return names;
}

} // namespace llmc
