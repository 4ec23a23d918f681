//===- QuantCheckpoint.cpp - GPTQ and AWQ checkpoints as plain weights ----===//

#include "compiler/frontend/QuantCheckpoint.h"

#include "compiler/frontend/Dequant.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace llmc {

using llmrt::invalid_argument;
using llmrt::Status;
using llmrt::StatusOr;
using json = nlohmann::json;
namespace quant = llmrt::quant;

namespace {

std::string inQuotes(std::string_view s) {
  std::string r(1, '\'');
  r.append(s);
  r.push_back('\'');
  return r;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint32_t load32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string lower(std::string s) {
  for (char &c : s)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return s;
}

/// AWQ GEMM packs the 8 columns 8c..8c+7 of one input into a word with
/// column 8c + {0,2,4,6,1,3,5,7}[p] in nibble p (AutoAWQ's WQLinear_GEMM
/// order_map); this is the nibble of column 8c + j.
constexpr int kAwqNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

StatusOr<std::optional<QuantConfig>>
parseQuantConfig(std::string_view text, const std::string &where) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded() || !root.is_object())
    return invalid_argument(where + ": not a JSON object");
  auto qcIt = root.find("quantization_config");
  if (qcIt == root.end() || qcIt->is_null())
    return std::optional<QuantConfig>();
  const json &qc = *qcIt;
  const std::string field = "quantization_config.";
  if (!qc.is_object())
    return invalid_argument(where + ": field 'quantization_config' must be an object");
  auto bad = [&](const std::string &key, const std::string &why) {
    return invalid_argument(where + ": field '" + field + key + "' " + why);
  };
  auto unsupported = [&](const std::string &what) {
    return llmrt::unimplemented(where + ": quantization_config: " + what);
  };
  auto getString = [&](const char *key, std::string &out) -> Status {
    auto it = qc.find(key);
    if (it == qc.end() || it->is_null())
      return llmrt::ok_status();
    if (!it->is_string())
      return bad(key, "must be a string");
    out = it->get<std::string>();
    return llmrt::ok_status();
  };
  auto getBool = [&](const char *key, bool &out) -> Status {
    auto it = qc.find(key);
    if (it == qc.end() || it->is_null())
      return llmrt::ok_status();
    if (!it->is_boolean())
      return bad(key, "must be a boolean");
    out = it->get<bool>();
    return llmrt::ok_status();
  };
  auto getInt = [&](const char *key, int64_t &out, bool &found) -> Status {
    found = false;
    auto it = qc.find(key);
    if (it == qc.end() || it->is_null())
      return llmrt::ok_status();
    if (!it->is_number_integer())
      return bad(key, "must be an integer");
    if (it->is_number_unsigned() && it->get<uint64_t>() > (uint64_t(1) << 40))
      return bad(key, "is out of range");
    out = it->get<int64_t>();
    found = true;
    return llmrt::ok_status();
  };

  std::string method;
  RETURN_IF_ERROR(getString("quant_method", method));
  if (method.empty())
    return bad("quant_method", "is missing");
  method = lower(method);
  QuantConfig c;
  if (method == "gptq")
    c.method = QuantConfig::Method::Gptq;
  else if (method == "awq")
    c.method = QuantConfig::Method::Awq;
  else
    return unsupported("quant_method '" + method + "' is not supported (gptq, awq)");

  int64_t bits = 0;
  bool found = false;
  RETURN_IF_ERROR(getInt("bits", bits, found));
  if (!found && c.method == QuantConfig::Method::Awq)
    RETURN_IF_ERROR(getInt("w_bit", bits, found));
  if (!found)
    return bad("bits", "is missing");
  if (c.method == QuantConfig::Method::Gptq ? (bits != 4 && bits != 8) : bits != 4)
    return unsupported(std::to_string(bits) + "-bit " + method + " is not supported (" +
                       (c.method == QuantConfig::Method::Gptq ? "4, 8" : "4") + ")");
  c.bits = static_cast<int>(bits);

  int64_t group = -1;
  RETURN_IF_ERROR(getInt("group_size", group, found));
  if (!found && c.method == QuantConfig::Method::Awq)
    RETURN_IF_ERROR(getInt("q_group_size", group, found));
  if (!found)
    return bad("group_size", "is missing");
  if (group == 0 || group < -1)
    return bad("group_size", "must be positive or -1, got " + std::to_string(group));
  c.groupSize = group;

  std::string packDtype;
  RETURN_IF_ERROR(getString("pack_dtype", packDtype));
  if (!packDtype.empty() && lower(packDtype) != "int32")
    return unsupported("pack_dtype '" + packDtype + "' is not supported (int32)");

  if (c.method == QuantConfig::Method::Gptq) {
    RETURN_IF_ERROR(getBool("sym", c.sym));
    RETURN_IF_ERROR(getBool("desc_act", c.descAct));
    // transformers/optimum write checkpoint_format, GPTQModel also format;
    // absent means the original (v1) layout.
    std::string format = "gptq";
    RETURN_IF_ERROR(getString("checkpoint_format", format));
    if (qc.contains("format") && !qc["format"].is_null() && !qc.contains("checkpoint_format"))
      RETURN_IF_ERROR(getString("format", format));
    format = lower(format);
    if (format == "gptq")
      c.zerosMinusOne = true;
    else if (format == "gptq_v2")
      c.zerosMinusOne = false;
    else
      return unsupported("GPTQ checkpoint format '" + format +
                         "' is not supported (gptq, gptq_v2)");
    auto dyn = qc.find("dynamic");
    if (dyn != qc.end() && !dyn->is_null() && !(dyn->is_object() && dyn->empty()))
      return unsupported("per-module overrides ('dynamic') are not supported");
  } else {
    c.sym = false;
    std::string version = "gemm";
    RETURN_IF_ERROR(getString("version", version));
    if (lower(version) != "gemm")
      return unsupported("AWQ version '" + version + "' is not supported (gemm)");
    bool zeroPoint = true;
    RETURN_IF_ERROR(getBool("zero_point", zeroPoint));
    if (!zeroPoint)
      return unsupported("AWQ without zero points is not supported");
  }
  return std::optional<QuantConfig>(c);
}

StatusOr<std::unique_ptr<QuantCheckpointSource>>
QuantCheckpointSource::create(std::unique_ptr<SafetensorsSource> base,
                              const QuantConfig &config) {
  std::unique_ptr<QuantCheckpointSource> src(new QuantCheckpointSource());
  src->config_ = config;
  const bool gptq = config.method == QuantConfig::Method::Gptq;
  const int bits = config.bits;
  const int64_t perWord = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  std::unordered_set<std::string> hidden;

  const std::vector<std::string> names = base->allNames();
  for (const std::string &name : names) {
    if (!endsWith(name, ".qweight"))
      continue;
    Linear l;
    l.prefix = name.substr(0, name.size() - 8);
    const std::string where = "quantized linear " + inQuotes(l.prefix + ".weight");
    auto fail = [&](const std::string &tensor, const std::string &why) {
      return invalid_argument(where + ": tensor " + inQuotes(tensor) + " " + why);
    };
    auto get = [&](const std::string &suffix, bool required,
                   std::optional<SafetensorsSource::Raw> &out) -> Status {
      out = base->raw(l.prefix + suffix);
      if (!out && required)
        return invalid_argument(where + ": tensor " + inQuotes(l.prefix + suffix) +
                                " is missing");
      return llmrt::ok_status();
    };
    std::optional<SafetensorsSource::Raw> qw, qz, sc, gi;
    RETURN_IF_ERROR(get(".qweight", true, qw));
    RETURN_IF_ERROR(get(".qzeros", true, qz));
    RETURN_IF_ERROR(get(".scales", true, sc));
    if (gptq)
      RETURN_IF_ERROR(get(".g_idx", false, gi));
    if (base->raw(l.prefix + ".weight"))
      return fail(l.prefix + ".weight", "exists next to " + inQuotes(name));

    const SafetensorsTensor &tw = *qw->tensor, &tz = *qz->tensor, &ts = *sc->tensor;
    if (tw.dtype != SafetensorsDType::I32)
      return fail(tw.name, std::string("has dtype ") + safetensorsDTypeName(tw.dtype) +
                               ", expected I32");
    if (tz.dtype != SafetensorsDType::I32)
      return fail(tz.name, std::string("has dtype ") + safetensorsDTypeName(tz.dtype) +
                               ", expected I32");
    if (ts.dtype != SafetensorsDType::F16 && ts.dtype != SafetensorsDType::BF16 &&
        ts.dtype != SafetensorsDType::F32)
      return fail(ts.name, std::string("has dtype ") + safetensorsDTypeName(ts.dtype) +
                               ", expected F16, BF16 or F32");
    for (const SafetensorsTensor *t : {&tw, &tz, &ts})
      if (t->shape.size() != 2 || t->shape[0] <= 0 || t->shape[1] <= 0)
        return fail(t->name, "has shape " + shapeText(t->shape) +
                                 ", expected two positive dimensions");
    l.out = ts.shape[1];
    l.groups = ts.shape[0];
    if (l.out % perWord != 0)
      return fail(ts.name, "has " + std::to_string(l.out) + " output columns, not a multiple of " +
                               std::to_string(perWord) + " (" + std::to_string(bits) +
                               "-bit codes per int32)");
    const int64_t outWords = l.out / perWord;
    if (gptq) {
      // [in * bits / 32, out]
      if (tw.shape[1] != l.out)
        return fail(tw.name, "has shape " + shapeText(tw.shape) + ", expected [in * " +
                                 std::to_string(bits) + " / 32, " + std::to_string(l.out) +
                                 "] (out from " + inQuotes(ts.name) + ")");
      l.in = tw.shape[0] * perWord;
    } else {
      // [in, out / 8]
      if (tw.shape[1] != outWords)
        return fail(tw.name, "has shape " + shapeText(tw.shape) + ", expected [in, " +
                                 std::to_string(outWords) + "] (out " + std::to_string(l.out) +
                                 " from " + inQuotes(ts.name) + ", 8 codes per int32)");
      l.in = tw.shape[0];
    }
    const int64_t group = config.groupSize == -1 ? l.in : config.groupSize;
    if (!gptq && l.in % group != 0)
      return fail(tw.name, "has " + std::to_string(l.in) + " inputs, not a multiple of group_size " +
                               std::to_string(group));
    const int64_t wantGroups = (l.in + group - 1) / group;
    if (l.groups != wantGroups)
      return fail(ts.name, "has " + std::to_string(l.groups) + " groups (rows), but " +
                               std::to_string(l.in) + " inputs in groups of " +
                               std::to_string(group) + " make " + std::to_string(wantGroups));
    if (tz.shape[0] != l.groups || tz.shape[1] != outWords)
      return fail(tz.name, "has shape " + shapeText(tz.shape) + ", expected " +
                               shapeText({l.groups, outWords}) + " (" + std::to_string(l.groups) +
                               " groups, " + std::to_string(l.out) + " outputs)");

    l.gIdx.resize(l.in);
    if (gi) {
      const SafetensorsTensor &tg = *gi->tensor;
      if (tg.dtype != SafetensorsDType::I32)
        return fail(tg.name, std::string("has dtype ") + safetensorsDTypeName(tg.dtype) +
                                 ", expected I32");
      if (tg.shape != std::vector<int64_t>{l.in})
        return fail(tg.name, "has shape " + shapeText(tg.shape) + ", expected [" +
                                 std::to_string(l.in) + "] (one group index per input)");
      for (int64_t i = 0; i < l.in; ++i) {
        int32_t g = static_cast<int32_t>(load32(gi->data + 4 * i));
        if (g < 0 || g >= l.groups)
          return fail(tg.name, "maps input " + std::to_string(i) + " to group " +
                                   std::to_string(g) + ", outside [0, " +
                                   std::to_string(l.groups) + ")");
        l.gIdx[i] = g;
      }
      hidden.insert(tg.name);
    } else {
      if (config.descAct)
        return invalid_argument(where + ": tensor " + inQuotes(l.prefix + ".g_idx") +
                                " is missing (desc_act needs it)");
      for (int64_t i = 0; i < l.in; ++i)
        l.gIdx[i] = static_cast<int32_t>(i / group);
    }

    // Zero points, decoded. GPTQ v1 subtracted 1 from every field of the
    // packed word as one integer (GPTQModel's convert_gptq_v2_to_v1_format),
    // so adding the constant back to the whole word undoes it exactly, borrows
    // included (its convert_gptq_v1_to_v2_format).
    l.zeros.resize(l.groups * l.out);
    const uint32_t v1Fix = !config.zerosMinusOne ? 0u : bits == 4 ? 0x11111111u : 0x01010101u;
    for (int64_t g = 0; g < l.groups; ++g)
      for (int64_t w = 0; w < outWords; ++w) {
        uint32_t word = load32(qz->data + 4 * (g * outWords + w)) + v1Fix;
        for (int64_t j = 0; j < perWord; ++j) {
          int64_t o = w * perWord + j;
          int64_t field = gptq ? j : kAwqNibbleOfColumn[j];
          l.zeros[g * l.out + o] = static_cast<uint8_t>((word >> (bits * field)) & mask);
        }
      }
    l.qweight = qw->data;
    l.scales = sc->data;
    l.scaleType = ts.dtype;

    // The cpu_row_groups form needs groups that are contiguous runs of the
    // input dim, in order. A permuted g_idx (desc_act) whose groups each hold
    // group_size inputs becomes so by reordering the columns by group (stable
    // sort, inputPermutation); uneven groups fall back to f32 (readF32).
    bool contiguous = l.in % group == 0;
    for (int64_t i = 0; contiguous && i < l.in; ++i)
      contiguous = l.gIdx[i] == i / group;
    if (!contiguous && l.in % group == 0) {
      std::vector<int64_t> count(l.groups, 0);
      for (int32_t g : l.gIdx)
        ++count[g];
      if (std::all_of(count.begin(), count.end(), [&](int64_t c) { return c == group; })) {
        l.perm.resize(l.in);
        for (int64_t i = 0; i < l.in; ++i)
          l.perm[i] = i;
        std::stable_sort(l.perm.begin(), l.perm.end(),
                         [&](int64_t a, int64_t b) { return l.gIdx[a] < l.gIdx[b]; });
        contiguous = true;
      }
    }
    if (contiguous) {
      quant::Format f;
      f.bits = bits;
      f.group = config.groupSize == -1 ? 0 : group;
      f.scale = ts.dtype == SafetensorsDType::F16    ? quant::ScaleType::kF16
                : ts.dtype == SafetensorsDType::BF16 ? quant::ScaleType::kBF16
                                                     : quant::ScaleType::kF32;
      const uint8_t mid = static_cast<uint8_t>(1u << (bits - 1));
      bool allMid = std::all_of(l.zeros.begin(), l.zeros.end(),
                                [&](uint8_t z) { return z == mid; });
      f.offset = config.sym && allMid ? quant::Offset::kSym : quant::Offset::kZeroPoint;
      if (quant::row_bytes(f, l.in).ok())
        l.native = f;
    }

    hidden.insert(tw.name);
    hidden.insert(tz.name);
    hidden.insert(ts.name);
    src->byWeightName_.emplace(l.prefix + ".weight", src->linears_.size());
    src->linears_.push_back(std::move(l));
  }

  for (const std::string &name : names) {
    if (endsWith(name, ".qweight")) {
      const Linear &l = src->linears_[src->byWeightName_.at(
          name.substr(0, name.size() - 8) + ".weight")];
      src->tensors_.push_back(
          SourceTensor{l.prefix + ".weight", SourceDType::Packed, {l.out, l.in}});
      continue;
    }
    if (hidden.count(name))
      continue;
    if (const SourceTensor *t = base->find(name)) {
      src->tensors_.push_back(*t);
      continue;
    }
    auto r = base->raw(name);
    return invalid_argument("tensor " + inQuotes(name) + " has dtype " +
                            safetensorsDTypeName(r->tensor->dtype) +
                            " but is not the qweight, qzeros or g_idx of a "
                            "quantized linear");
  }
  src->base_ = std::move(base);
  return src;
}

uint32_t QuantCheckpointSource::code(const Linear &l, int64_t o, int64_t i) const {
  const int bits = config_.bits;
  const int64_t perWord = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  if (config_.method == QuantConfig::Method::Gptq) {
    uint32_t word = load32(l.qweight + 4 * ((i / perWord) * l.out + o));
    return (word >> (bits * (i % perWord))) & mask;
  }
  uint32_t word = load32(l.qweight + 4 * (i * (l.out / 8) + o / 8));
  return (word >> (4 * kAwqNibbleOfColumn[o % 8])) & mask;
}

float QuantCheckpointSource::scale(const Linear &l, int64_t g, int64_t o) const {
  const int64_t index = g * l.out + o;
  switch (l.scaleType) {
  case SafetensorsDType::F16: {
    uint16_t h;
    std::memcpy(&h, l.scales + 2 * index, 2);
    return halfToFloat(h);
  }
  case SafetensorsDType::BF16: {
    uint16_t h;
    std::memcpy(&h, l.scales + 2 * index, 2);
    return bf16ToFloat(h);
  }
  default: {
    float f;
    std::memcpy(&f, l.scales + 4 * index, 4);
    return f;
  }
  }
}

Status QuantCheckpointSource::readF32(std::string_view name, float *out) const {
  auto it = byWeightName_.find(std::string(name));
  if (it == byWeightName_.end()) {
    if (!find(name) && base_->raw(name))
      return invalid_argument("tensor " + inQuotes(name) +
                              " is part of a quantized linear; read its .weight");
    return base_->readF32(name, out);
  }
  const Linear &l = linears_[it->second];
  // scale * (q - z): the integer difference and its product with an f16, bf16
  // or f32 scale are exact in f32. Column j is input perm[j] (or j).
  for (int64_t o = 0; o < l.out; ++o)
    for (int64_t j = 0; j < l.in; ++j) {
      const int64_t i = l.perm.empty() ? j : l.perm[j];
      const int64_t g = l.gIdx[i];
      const int diff = static_cast<int>(code(l, o, i)) - l.zeros[g * l.out + o];
      out[o * l.in + j] = scale(l, g, o) * static_cast<float>(diff);
    }
  return llmrt::ok_status();
}

std::optional<std::vector<int64_t>>
QuantCheckpointSource::inputPermutation(std::string_view name) const {
  auto it = byWeightName_.find(std::string(name));
  if (it == byWeightName_.end() || linears_[it->second].perm.empty())
    return std::nullopt;
  return linears_[it->second].perm;
}

std::optional<quant::Format>
QuantCheckpointSource::nativeFormat(std::string_view name) const {
  auto it = byWeightName_.find(std::string(name));
  if (it == byWeightName_.end())
    return base_->nativeFormat(name);
  return linears_[it->second].native;
}

Status QuantCheckpointSource::readPacked(std::string_view name, uint8_t *out) const {
  auto it = byWeightName_.find(std::string(name));
  if (it == byWeightName_.end())
    return base_->readPacked(name, out);
  const Linear &l = linears_[it->second];
  if (!l.native)
    return TensorSource::readPacked(name, out);
  const quant::Format &f = *l.native;
  const int64_t g = quant::group_elems(f, l.in);
  const int sb = quant::scale_bytes(f.scale);
  const int64_t hb = quant::header_bytes(f), gb = quant::group_bytes(f, g);
  std::vector<uint8_t> codes(g);
  for (int64_t o = 0; o < l.out; ++o) {
    for (int64_t gi = 0; gi < l.in / g; ++gi, out += gb) {
      // The scale's stored bits, unchanged.
      std::memcpy(out, l.scales + sb * (gi * l.out + o), sb);
      if (f.offset == quant::Offset::kZeroPoint)
        out[sb] = l.zeros[gi * l.out + o];
      for (int64_t j = 0; j < g; ++j) {
        const int64_t c = gi * g + j;  // column; input perm[c] when permuted
        codes[j] = static_cast<uint8_t>(code(l, o, l.perm.empty() ? c : l.perm[c]));
      }
      uint8_t *q = out + hb;
      if (f.bits == 8) {
        // sym int8 is d * q with q signed: the stored q - 128.
        for (int64_t j = 0; j < g; ++j)
          q[j] = f.offset == quant::Offset::kSym ? static_cast<uint8_t>(codes[j] ^ 0x80u)
                                                 : codes[j];
      } else {
        for (int64_t s = 0; s < g; s += quant::kSubBlock, q += quant::kSubBlock / 2)
          for (int j = 0; j < 16; ++j)
            q[j] = static_cast<uint8_t>(codes[s + j] | (codes[s + j + 16] << 4));
      }
    }
  }
  return llmrt::ok_status();
}

} // namespace llmc
