//===- Gguf.cpp - GGUF v2/v3 reader ---------------------------------------===//

#include "compiler/frontend/Gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;

namespace {

constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;

struct GgmlTypeInfo {
  uint32_t type;
  const char *name;
  int64_t blockElements;
  int64_t blockBytes;
};
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},
    {2, "Q4_0", 32, 18},       {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},       {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},     {11, "Q3_K", 256, 110},
    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},
    {16, "IQ2_XXS", 256, 66},  {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98},  {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},    {23, "IQ4_XS", 256, 136},
    {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},
    {28, "F64", 1, 8},         {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},        {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},
};

const GgmlTypeInfo *ggmlTypeInfo(uint32_t type) {
  for (const GgmlTypeInfo &info : kGgmlTypes)
    if (info.type == type)
      return &info;
  return nullptr;
}

std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
  }
  if (s.size() > 200)
    out += "...";
  return out;
}

/// Bounds-checked little-endian cursor over the file bytes.
class Reader {
public:
  Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T> bool read(T &out) {
    if (remaining() < sizeof(T))
      return false;
    std::memcpy(&out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool readString(std::string &out) {
    uint64_t len;
    if (!read(len) || len > remaining())
      return false;
    out.assign(reinterpret_cast<const char *>(data_ + pos_), len);
    pos_ += len;
    return true;
  }

private:
  const uint8_t *data_;
  size_t size_;
  size_t pos_ = 0;
};

int64_t scalarSize(GgufValueType t) {
  switch (t) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::Bool:
    return 1;
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
    return 2;
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::Float32:
    return 4;
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
  case GgufValueType::Float64:
    return 8;
  case GgufValueType::String:
    return 8; // at least the length
  case GgufValueType::Array:
    return 12; // at least type + count
  }
  return 1;
}

bool isIntegerType(GgufValueType t) {
  switch (t) {
  case GgufValueType::UInt8:
  case GgufValueType::Int8:
  case GgufValueType::UInt16:
  case GgufValueType::Int16:
  case GgufValueType::UInt32:
  case GgufValueType::Int32:
  case GgufValueType::UInt64:
  case GgufValueType::Int64:
    return true;
  default:
    return false;
  }
}

bool isKnownType(uint32_t t) { return t <= 12; }

/// Reads one element of scalar type `t` into `value`'s vectors.
bool readScalar(Reader &r, GgufValueType t, GgufValue &value) {
  switch (t) {
  case GgufValueType::UInt8: {
    uint8_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::Int8: {
    int8_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::UInt16: {
    uint16_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::Int16: {
    int16_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::UInt32: {
    uint32_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::Int32: {
    int32_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::UInt64: {
    uint64_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(static_cast<int64_t>(v));
    return true;
  }
  case GgufValueType::Int64: {
    int64_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v);
    return true;
  }
  case GgufValueType::Float32: {
    float v;
    if (!r.read(v)) return false;
    value.floats.push_back(v);
    return true;
  }
  case GgufValueType::Float64: {
    double v;
    if (!r.read(v)) return false;
    value.floats.push_back(v);
    return true;
  }
  case GgufValueType::Bool: {
    uint8_t v;
    if (!r.read(v)) return false;
    value.ints.push_back(v != 0);
    return true;
  }
  case GgufValueType::String: {
    std::string s;
    if (!r.readString(s)) return false;
    value.strings.push_back(std::move(s));
    return true;
  }
  case GgufValueType::Array:
    return false;
  }
  return false;
}

/// Reads a value of type `t` (scalar or array). On failure returns a message.
std::optional<std::string> readValue(Reader &r, GgufValueType t,
                                     GgufValue &value, int depth) {
  value.type = t;
  if (t != GgufValueType::Array) {
    value.elementType = t;
    if (!readScalar(r, t, value))
      return std::string("value of type ") + ggufValueTypeName(t) +
             " runs past the end of the file";
    return std::nullopt;
  }
  if (depth >= kMaxArrayNesting)
    return std::string("arrays nested deeper than ") +
           std::to_string(kMaxArrayNesting);
  uint32_t elemType;
  uint64_t count;
  if (!r.read(elemType) || !r.read(count))
    return std::string("array header runs past the end of the file");
  if (!isKnownType(elemType))
    return "array has unknown element type " + std::to_string(elemType);
  value.elementType = static_cast<GgufValueType>(elemType);
  int64_t minSize = scalarSize(value.elementType);
  if (count > r.remaining() / static_cast<uint64_t>(minSize))
    return "array count " + std::to_string(count) + " of " +
           ggufValueTypeName(value.elementType) +
           " exceeds the bytes left in the file (" +
           std::to_string(r.remaining()) + ")";
  if (value.elementType == GgufValueType::Array) {
    for (uint64_t i = 0; i < count; ++i) {
      GgufValue inner;
      if (auto err = readValue(r, GgufValueType::Array, inner, depth + 1))
        return err;
      value.arrays.push_back(std::move(inner));
    }
    return std::nullopt;
  }
  if (value.elementType == GgufValueType::String)
    value.strings.reserve(count);
  else if (value.elementType == GgufValueType::Float32 ||
           value.elementType == GgufValueType::Float64)
    value.floats.reserve(count);
  else
    value.ints.reserve(count);
  for (uint64_t i = 0; i < count; ++i)
    if (!readScalar(r, value.elementType, value))
      return "array element " + std::to_string(i) + " of " +
             ggufValueTypeName(value.elementType) +
             " runs past the end of the file";
  return std::nullopt;
}

} // namespace

const char *ggufValueTypeName(GgufValueType type) {
  switch (type) {
  case GgufValueType::UInt8: return "uint8";
  case GgufValueType::Int8: return "int8";
  case GgufValueType::UInt16: return "uint16";
  case GgufValueType::Int16: return "int16";
  case GgufValueType::UInt32: return "uint32";
  case GgufValueType::Int32: return "int32";
  case GgufValueType::Float32: return "float32";
  case GgufValueType::Bool: return "bool";
  case GgufValueType::String: return "string";
  case GgufValueType::Array: return "array";
  case GgufValueType::UInt64: return "uint64";
  case GgufValueType::Int64: return "int64";
  case GgufValueType::Float64: return "float64";
  }
  return "?";
}

size_t GgufValue::size() const {
  if (!isArray())
    return 1;
  switch (elementType) {
  case GgufValueType::String:
    return strings.size();
  case GgufValueType::Array:
    return arrays.size();
  case GgufValueType::Float32:
  case GgufValueType::Float64:
    return floats.size();
  default:
    return ints.size();
  }
}

const char *ggmlTypeName(uint32_t type) {
  const GgmlTypeInfo *info = ggmlTypeInfo(type);
  return info ? info->name : nullptr;
}

std::optional<SourceDType> ggmlToSourceDType(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
  case GgmlType::F32: return SourceDType::F32;
  case GgmlType::F16: return SourceDType::F16;
  case GgmlType::BF16: return SourceDType::BF16;
  case GgmlType::Q8_0: return SourceDType::Q8_0;
  case GgmlType::Q4_0: return SourceDType::Q4_0;
  case GgmlType::Q4_1: return SourceDType::Q4_1;
  case GgmlType::Q5_0: return SourceDType::Q5_0;
  case GgmlType::Q5_1: return SourceDType::Q5_1;
  case GgmlType::Q4_K: return SourceDType::Q4_K;
  case GgmlType::Q5_K: return SourceDType::Q5_K;
  case GgmlType::Q6_K: return SourceDType::Q6_K;
  case GgmlType::Q3_K: return SourceDType::Q3_K;
  case GgmlType::Q2_K: return SourceDType::Q2_K;
  case GgmlType::IQ4_NL: return SourceDType::IQ4_NL;
  case GgmlType::IQ4_XS: return SourceDType::IQ4_XS;
  default: return std::nullopt;
  }
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string &path) {
  ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::open(path));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                   parse(mapped->data(), mapped->size(), path));
  file->file_ = std::move(mapped);
  return file;
}

StatusOr<std::unique_ptr<GgufFile>>
GgufFile::parse(const uint8_t *data, size_t size,
                const std::string &nameForErrors) {
  auto fail = [&](const std::string &message) -> Status {
    return invalid_argument(nameForErrors + ": " + message);
  };
  Reader r(data, size);
  uint32_t magic;
  if (!r.read(magic))
    return fail("file is " + std::to_string(size) +
                " bytes, too short for a GGUF header");
  if (std::memcmp(data, "GGUF", 4) != 0)
    return fail("bad magic (not a GGUF file)");
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->name_ = nameForErrors;
  uint64_t tensorCount, kvCount;
  if (!r.read(file->version_))
    return fail("truncated header (no version)");
  if ((file->version_ == 0x02000000u || file->version_ == 0x03000000u))
    return fail("big-endian GGUF files are not supported");
  if (file->version_ != 2 && file->version_ != 3)
    return fail("unsupported GGUF version " + std::to_string(file->version_) +
                " (supported: 2, 3)");
  if (!r.read(tensorCount) || !r.read(kvCount))
    return fail("truncated header (no tensor/metadata counts)");
  // Each metadata entry needs at least a key length, a type and one byte;
  // each tensor info at least a name length, n_dims, type and offset.
  if (kvCount > r.remaining() / 13)
    return fail("metadata count " + std::to_string(kvCount) +
                " exceeds what the file can hold");
  if (tensorCount > r.remaining() / 24)
    return fail("tensor count " + std::to_string(tensorCount) +
                " exceeds what the file can hold");

  for (uint64_t i = 0; i < kvCount; ++i) {
    std::string key;
    if (!r.readString(key))
      return fail("metadata entry " + std::to_string(i) +
                  ": key runs past the end of the file");
    uint32_t type;
    if (!r.read(type))
      return fail("metadata '" + printable(key) +
                  "': value type runs past the end of the file");
    if (!isKnownType(type))
      return fail("metadata '" + printable(key) + "': unknown value type " +
                  std::to_string(type));
    GgufValue value;
    if (auto err = readValue(r, static_cast<GgufValueType>(type), value, 0))
      return fail("metadata '" + printable(key) + "': " + *err);
    if (!file->metadata_.emplace(key, std::move(value)).second)
      return fail("duplicate metadata key '" + printable(key) + "'");
  }

  if (const GgufValue *align = file->findValue("general.alignment")) {
    if (align->isArray() || !isIntegerType(align->type))
      return fail("general.alignment must be an integer");
    int64_t a = align->ints[0];
    if (a <= 0 || (a & (a - 1)) != 0 || a > (1 << 30))
      return fail("general.alignment " + std::to_string(a) +
                  " is not a power of two");
    file->alignment_ = static_cast<uint64_t>(a);
  }

  file->tensors_.reserve(tensorCount);
  for (uint64_t i = 0; i < tensorCount; ++i) {
    GgufTensorInfo info;
    if (!r.readString(info.name))
      return fail("tensor info " + std::to_string(i) +
                  ": name runs past the end of the file");
    std::string where = "tensor '" + printable(info.name) + "': ";
    uint32_t nDims;
    if (!r.read(nDims))
      return fail(where + "truncated tensor info");
    if (nDims == 0 || nDims > kMaxDims)
      return fail(where + "has " + std::to_string(nDims) +
                  " dimensions (1 to 4 allowed)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < nDims; ++d) {
      uint64_t ne;
      if (!r.read(ne))
        return fail(where + "truncated tensor info");
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(where + "dimension " + std::to_string(ne) + " too large");
      int64_t ned = static_cast<int64_t>(ne);
      if (ned != 0 && numel > std::numeric_limits<int64_t>::max() / ned)
        return fail(where + "element count overflows");
      numel *= ned;
      info.dims.push_back(ned);
    }
    info.numElements = numel;
    if (!r.read(info.type) || !r.read(info.offset))
      return fail(where + "truncated tensor info");
    const GgmlTypeInfo *typeInfo = ggmlTypeInfo(info.type);
    if (!typeInfo)
      return fail(where + "unknown ggml type " + std::to_string(info.type));
    if (info.dims[0] % typeInfo->blockElements != 0)
      return fail(where + "innermost dimension " + std::to_string(info.dims[0]) +
                  " is not a multiple of the " + typeInfo->name +
                  " block size " + std::to_string(typeInfo->blockElements));
    int64_t blocks = numel / typeInfo->blockElements;
    if (blocks > std::numeric_limits<int64_t>::max() / typeInfo->blockBytes)
      return fail(where + "byte size overflows");
    info.numBytes = static_cast<uint64_t>(blocks * typeInfo->blockBytes);
    if (info.offset % file->alignment_ != 0)
      return fail(where + "data offset " + std::to_string(info.offset) +
                  " is not a multiple of the alignment " +
                  std::to_string(file->alignment_));
    if (!file->tensorByName_.emplace(info.name, file->tensors_.size()).second)
      return fail("duplicate tensor name '" + printable(info.name) + "'");
    file->tensors_.push_back(std::move(info));
  }

  uint64_t dataStart = (r.pos() + file->alignment_ - 1) / file->alignment_ *
                       file->alignment_;
  uint64_t dataSize = dataStart <= size ? size - dataStart : 0;
  file->dataSection_ = data + std::min<uint64_t>(dataStart, size);
  std::vector<const GgufTensorInfo *> byOffset;
  for (const GgufTensorInfo &t : file->tensors_) {
    if (t.offset > dataSize || t.numBytes > dataSize - t.offset)
      return fail("tensor '" + printable(t.name) + "': data [" +
                  std::to_string(t.offset) + ", +" +
                  std::to_string(t.numBytes) + ") lies outside the data "
                  "section (" + std::to_string(dataSize) +
                  " bytes); truncated file?");
    if (t.numBytes > 0)
      byOffset.push_back(&t);
  }
  std::sort(byOffset.begin(), byOffset.end(),
            [](const GgufTensorInfo *a, const GgufTensorInfo *b) {
              return a->offset < b->offset;
            });
  for (size_t i = 1; i < byOffset.size(); ++i)
    if (byOffset[i]->offset < byOffset[i - 1]->offset + byOffset[i - 1]->numBytes)
      return fail("data of tensors '" + printable(byOffset[i - 1]->name) +
                  "' and '" + printable(byOffset[i]->name) + "' overlap");
  return file;
}

bool GgufFile::has(std::string_view key) const {
  return findValue(key) != nullptr;
}

const GgufValue *GgufFile::findValue(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
Status missingKey(const std::string &file, std::string_view key) {
  return llmrt::not_found(file + ": metadata key '" + std::string(key) +
                          "' is missing");
}
Status wrongType(const std::string &file, std::string_view key,
                 const GgufValue &v, const char *wanted) {
  std::string got = v.isArray() ? std::string("array of ") +
                                      ggufValueTypeName(v.elementType)
                                : ggufValueTypeName(v.type);
  return invalid_argument(file + ": metadata key '" + std::string(key) +
                          "' is " + got + ", expected " + wanted);
}
} // namespace

StatusOr<std::string> GgufFile::getString(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (v->type != GgufValueType::String)
    return wrongType(name_, key, *v, "string");
  return v->strings[0];
}

StatusOr<int64_t> GgufFile::getInt(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (!isIntegerType(v->type))
    return wrongType(name_, key, *v, "an integer");
  if (v->type == GgufValueType::UInt64 && v->ints[0] < 0)
    return invalid_argument(name_ + ": metadata key '" + std::string(key) +
                            "' is out of range");
  return v->ints[0];
}

StatusOr<double> GgufFile::getFloat(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (v->type == GgufValueType::Float32 || v->type == GgufValueType::Float64)
    return v->floats[0];
  if (isIntegerType(v->type))
    return v->type == GgufValueType::UInt64
               ? static_cast<double>(static_cast<uint64_t>(v->ints[0]))
               : static_cast<double>(v->ints[0]);
  return wrongType(name_, key, *v, "a number");
}

StatusOr<bool> GgufFile::getBool(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (v->type != GgufValueType::Bool)
    return wrongType(name_, key, *v, "bool");
  return v->ints[0] != 0;
}

StatusOr<std::vector<std::string>>
GgufFile::getStringArray(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (!v->isArray() || v->elementType != GgufValueType::String)
    return wrongType(name_, key, *v, "array of string");
  return v->strings;
}

StatusOr<std::vector<int64_t>>
GgufFile::getIntArray(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (!v->isArray() || !isIntegerType(v->elementType))
    return wrongType(name_, key, *v, "array of integers");
  if (v->elementType == GgufValueType::UInt64)
    for (int64_t x : v->ints)
      if (x < 0)
        return invalid_argument(name_ + ": metadata key '" + std::string(key) +
                                "' has an element out of range");
  return v->ints;
}

StatusOr<std::vector<double>>
GgufFile::getFloatArray(std::string_view key) const {
  const GgufValue *v = findValue(key);
  if (!v)
    return missingKey(name_, key);
  if (!v->isArray())
    return wrongType(name_, key, *v, "array of numbers");
  if (v->elementType == GgufValueType::Float32 ||
      v->elementType == GgufValueType::Float64)
    return v->floats;
  if (isIntegerType(v->elementType)) {
    std::vector<double> out;
    out.reserve(v->ints.size());
    for (int64_t x : v->ints)
      out.push_back(static_cast<double>(x));
    return out;
  }
  return wrongType(name_, key, *v, "array of numbers");
}

const GgufTensorInfo *GgufFile::findTensor(std::string_view name) const {
  auto it = tensorByName_.find(std::string(name));
  return it == tensorByName_.end() ? nullptr : &tensors_[it->second];
}

} // namespace llmc
