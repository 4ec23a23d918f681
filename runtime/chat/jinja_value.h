// Values of the Jinja-subset engine behind ChatTemplate: Python-like semantics (str(), repr(),
// truthiness, equality) and json.dumps-compatible serialization for the tojson filter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmrt::jinja {

/// A template-level error (raised while rendering); converted to a Status at the API boundary.
/// `kind` mirrors the Python exception class ("TemplateError", "UndefinedError", "TypeError", ...).
struct RenderError : std::runtime_error {
  RenderError(std::string kind, const std::string& message)
      : std::runtime_error(message), kind(std::move(kind)) {}
  std::string kind;
};

struct Value;
struct Dict;
using List = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using NativeFn = std::function<Value(std::vector<Value>& args, Kwargs& kwargs)>;

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                   // kString payload; for kUndefined the name that was missing
  std::shared_ptr<List> list;      // shared: Python reference semantics
  std::shared_ptr<Dict> dict;
  std::shared_ptr<NativeFn> fn;
  bool is_tuple = false;           // repr as (a, b)
  bool is_generator = false;       // map()/select() results: json.dumps refuses them
  bool unsafe = false;             // kUndefined standing for a sandbox-forbidden method
  bool markup = false;             // kString that is markupsafe.Markup (from |safe, |escape):
                                   // Markup + str escapes the str

  static Value undefined(std::string name = {}) { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.kind = kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value make_list(List items = {});
  static Value make_tuple(List items);
  static Value make_dict();
  static Value callable(NativeFn f);

  bool is_undefined() const { return kind == kUndefined; }
  bool is_none() const { return kind == kNone; }
  bool is_string() const { return kind == kString; }
  bool is_number() const { return kind == kInt || kind == kFloat || kind == kBool; }
  bool is_list() const { return kind == kList; }
  bool is_dict() const { return kind == kDict; }
  double as_double() const { return kind == kFloat ? f : kind == kBool ? (b ? 1 : 0) : double(i); }

  bool truthy() const;
  /// Python str(); Undefined renders as "".
  std::string str() const;
  /// Python repr().
  std::string repr() const;
  /// Python type name for error messages ("str", "dict", "NoneType", ...).
  const char* type_name() const;
};

struct Dict {
  /// Entries in insertion order. String keys are stored as-is; other keys (ints from dict
  /// literals) under an internal encoding, with the key itself in key_values.
  std::vector<std::pair<std::string, Value>> items;
  std::vector<Value> key_values;  // parallel to items
  bool is_namespace = false;
  Value* find(const std::string& key);
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
  /// Any hashable key (str, int, bool, None).
  static std::string encode_key(const Value& key);
  const Value* find_key(const Value& key) const;
  void set_key(const Value& key, Value v);
};

bool is_namespace_dict(const Value& v);
bool values_equal(const Value& a, const Value& b);
/// Python ordering for <, > and sort; throws RenderError on incomparable types.
int compare_values(const Value& a, const Value& b);

Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  int indent = -1;  // < 0: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
/// json.dumps(v, ...) exactly as Python writes it.
std::string to_json(const Value& v, const JsonOptions& opts);

/// Python float repr ("1.0", "0.1", "1e-05", "1e+16").
std::string python_float_repr(double d);

// UTF-8 helpers: Jinja strings are sequences of code points.
std::vector<std::string> utf8_chars(const std::string& s);
size_t utf8_length(const std::string& s);

}  // namespace llmrt::jinja
