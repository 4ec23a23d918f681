#include "runtime/chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llmrt::jinja {

Value Value::make_list(List items) {
  Value v;
  v.kind = kList;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::make_tuple(List items) {
  Value v = make_list(std::move(items));
  v.is_tuple = true;
  return v;
}

Value Value::make_dict() {
  Value v;
  v.kind = kDict;
  v.dict = std::make_shared<Dict>();
  return v;
}

Value Value::callable(NativeFn f) {
  Value v;
  v.kind = kCallable;
  v.fn = std::make_shared<NativeFn>(std::move(f));
  return v;
}

Value* Dict::find(const std::string& key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* slot = find(key)) {
    *slot = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
    key_values.push_back(Value::string(key));
  }
}

std::string Dict::encode_key(const Value& key) {
  if (key.is_string()) return key.s;
  if (key.kind == Value::kBool) return std::string(1, '\x01').append(key.b ? "1" : "0");  // True == 1
  if (key.kind == Value::kFloat && key.f == std::floor(key.f) && std::fabs(key.f) < 9e18)
    return std::string(1, '\x01').append(std::to_string(int64_t(key.f)));
  return std::string(1, '\x01').append(key.repr());
}

const Value* Dict::find_key(const Value& key) const { return find(encode_key(key)); }

void Dict::set_key(const Value& key, Value v) {
  if (key.is_string()) return set(key.s, std::move(v));
  std::string k = encode_key(key);
  if (Value* slot = find(k)) {
    *slot = std::move(v);
  } else {
    items.emplace_back(k, std::move(v));
    key_values.push_back(key);
  }
}

bool Value::truthy() const {
  switch (kind) {
    case kUndefined: case kNone: return false;
    case kBool: return b;
    case kInt: return i != 0;
    case kFloat: return f != 0;
    case kString: return !s.empty();
    case kList: return !list->empty();
    case kDict: return !dict->items.empty();
    case kCallable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind) {
    case kUndefined: return "Undefined";
    case kNone: return "NoneType";
    case kBool: return "bool";
    case kInt: return "int";
    case kFloat: return "float";
    case kString: return "str";
    case kList: return is_tuple ? "tuple" : "list";
    case kDict: return is_namespace_dict(*this) ? "Namespace" : "dict";
    case kCallable: return "function";
  }
  return "object";
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf = "[-]d.ddde[+-]XX"
  std::string m(buf);
  bool neg = m[0] == '-';
  if (neg) m = m.substr(1);
  size_t epos = m.find('e');
  int exp = std::atoi(m.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (m[k] != '.') digits += m[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string intpart = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (int(intpart.size()) < exp + 1) intpart += '0';
      std::string frac = digits.size() > size_t(exp + 1) ? digits.substr(exp + 1) : "0";
      out = intpart;
      out.append(".").append(frac);
    } else {
      out = "0.";
      out.append(size_t(-exp - 1), '0').append(digits);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == q || c == '\\') { out += '\\'; out += char(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  out += q;
  return out;
}

std::string Value::str() const {
  switch (kind) {
    case kUndefined: return "";
    case kNone: return "None";
    case kBool: return b ? "True" : "False";
    case kInt: return std::to_string(i);
    case kFloat: return python_float_repr(f);
    case kString: return s;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind) {
    case kString: return repr_string(s);
    case kList: {
      if (is_generator) return "<generator object at 0x0>";
      std::string out = is_tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) {
        if (k) out += ", ";
        out += (*list)[k].repr();
      }
      if (is_tuple && list->size() == 1) out += ",";
      out += is_tuple ? ")" : "]";
      return out;
    }
    case kDict: {
      std::string out = dict->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (size_t n = 0; n < dict->items.size(); ++n) {
        if (!first) out += ", ";
        first = false;
        out += dict->key_values[n].repr() + ": " + dict->items[n].second.repr();
      }
      return out + (dict->is_namespace ? "}>" : "}");
    }
    case kCallable: return "<function>";
    case kUndefined: return "Undefined";
    default: return str();
  }
}

bool is_namespace_dict(const Value& v) { return v.kind == Value::kDict && v.dict->is_namespace; }

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::kFloat || b.kind == Value::kFloat) return a.as_double() == b.as_double();
    int64_t x = a.kind == Value::kBool ? a.b : a.i;
    int64_t y = b.kind == Value::kBool ? b.b : b.i;
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kUndefined: case Value::kNone: return true;
    case Value::kString: return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!values_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::kDict:
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    case Value::kCallable: return a.fn == b.fn;
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      int c = compare_values((*a.list)[k], (*b.list)[k]);
      if (c) return c;
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw RenderError("TypeError", std::string("'<' not supported between instances of '") +
                                     a.type_name() + "' and '" + b.type_name() + "'");
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value v = Value::make_list();
      for (auto& e : j) v.list->push_back(from_json(e));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) v.dict->set(it.key(), from_json(it.value()));
      return v;
    }
    default: return Value::none();
  }
}

static uint32_t decode_utf8(const std::string& s, size_t& k) {
  unsigned char c = s[k];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (k + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int m = 1; m < n; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3f);
  k += n;
  return cp;
}

static void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t k = 0; k < s.size();) {
    unsigned char c = s[k];
    char b[16];
    if (c == '"') { out += "\\\""; ++k; }
    else if (c == '\\') { out += "\\\\"; ++k; }
    else if (c == '\n') { out += "\\n"; ++k; }
    else if (c == '\r') { out += "\\r"; ++k; }
    else if (c == '\t') { out += "\\t"; ++k; }
    else if (c == '\b') { out += "\\b"; ++k; }
    else if (c == '\f') { out += "\\f"; ++k; }
    else if (c < 0x20) { std::snprintf(b, sizeof b, "\\u%04x", c); out += b; ++k; }
    else if (c < 0x80 || !ensure_ascii) { out += char(c); ++k; }
    else {
      uint32_t cp = decode_utf8(s, k);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
    }
  }
  out += '"';
}

static void json_value(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  if (depth > 512) throw RenderError("ValueError", "Circular reference detected");
  auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(o.indent) * d, ' ');
  };
  switch (v.kind) {
    case Value::kNone: out += "null"; return;
    case Value::kBool: out += v.b ? "true" : "false"; return;
    case Value::kInt: out += std::to_string(v.i); return;
    case Value::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(v.f);
      return;
    case Value::kString: json_string(v.s, o.ensure_ascii, out); return;
    case Value::kList: {
      if (v.is_generator)
        throw RenderError("TypeError", "Object of type generator is not JSON serializable");
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_sep;
        if (o.indent >= 0) newline(depth + 1);
        json_value((*v.list)[k], o, depth + 1, out);
      }
      if (o.indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::kDict: {
      if (v.dict->is_namespace)
        throw RenderError("TypeError", "Object of type Namespace is not JSON serializable");
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (auto* kv : items) {
        if (!first) out += o.item_sep;
        first = false;
        if (o.indent >= 0) newline(depth + 1);
        const Value& key = v.dict->key_values[kv - v.dict->items.data()];
        if (key.is_string()) json_string(key.s, o.ensure_ascii, out);
        else if (key.kind == Value::kBool) out += key.b ? "\"true\"" : "\"false\"";
        else if (key.is_none()) out += "\"null\"";
        else out += "\"" + key.str() + "\"";
        out += o.key_sep;
        json_value(kv->second, o, depth + 1, out);
      }
      if (o.indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::kUndefined:
      throw RenderError("TypeError", "Object of type Undefined is not JSON serializable");
    case Value::kCallable:
      throw RenderError("TypeError", "Object of type function is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_value(v, opts, 0, out);
  return out;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    size_t start = k;
    decode_utf8(s, k);
    out.push_back(s.substr(start, k - start));
  }
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xc0) != 0x80) ++n;
  return n;
}

}  // namespace llmrt::jinja
