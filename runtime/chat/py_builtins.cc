// Python built-ins of the chat template engine; see py_builtins.h.
#include "runtime/chat/py_builtins.h"

#include <algorithm>
#include <cmath>

namespace llmrt::jinja {

[[noreturn]] void type_error(const std::string& m) { throw RenderError("TypeError", m); }

std::string obj_desc(const Value& v) { return std::string("'") + v.type_name() + " object'"; }

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(obj_desc(obj) + " has no attribute '" + name + "'");
}

static bool is_py_space(const std::string& ch) {
  if (ch.size() == 1) {
    unsigned char c = ch[0];
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  static const char* spaces[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                 "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85",
                                 "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89",
                                 "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                 "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* s : spaces)
    if (ch == s) return true;
  return false;
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> cs = jinja::utf8_chars(s);
  std::vector<std::string> set;
  bool custom = chars && chars->is_string();
  if (custom) set = jinja::utf8_chars(chars->s);
  auto strip_it = [&](const std::string& c) {
    return custom ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
  };
  size_t b = 0, e = cs.size();
  if (left) while (b < e && strip_it(cs[b])) ++b;
  if (right) while (e > b && strip_it(cs[e - 1])) --e;
  std::string out;
  for (size_t k = b; k < e; ++k) out += cs[k];
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value markup(std::string s) {
  Value v = Value::string(std::move(s));
  v.markup = true;
  return v;
}

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what chat templates
// meet in practice); other scripts pass through unchanged.
static uint32_t map_case(uint32_t c, bool upper) {
  if (c < 0x80) return upper ? uint32_t(std::toupper(int(c))) : uint32_t(std::tolower(int(c)));
  if (upper) {
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 0x20;
    if (c == 0xff) return 0x178;
    if (c >= 0x100 && c <= 0x137 && (c & 1)) return c - 1;
    if (c >= 0x139 && c <= 0x148 && !(c & 1)) return c - 1;
    if (c >= 0x14a && c <= 0x177 && (c & 1)) return c - 1;
    if (c == 0x17a || c == 0x17c || c == 0x17e) return c - 1;
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 0x20;
    if (c == 0x3c2) return 0x3a3;
    if (c >= 0x430 && c <= 0x44f) return c - 0x20;
    if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  } else {
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 0x20;
    if (c == 0x178) return 0xff;
    if (c >= 0x100 && c <= 0x137 && !(c & 1)) return c + 1;
    if (c >= 0x139 && c <= 0x148 && (c & 1)) return c + 1;
    if (c >= 0x14a && c <= 0x177 && !(c & 1)) return c + 1;
    if (c == 0x179 || c == 0x17b || c == 0x17d) return c + 1;
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
    if (c >= 0x410 && c <= 0x42f) return c + 0x20;
    if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  }
  return c;
}

static void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += char(cp);
  else if (cp < 0x800) { out += char(0xc0 | (cp >> 6)); out += char(0x80 | (cp & 0x3f)); }
  else if (cp < 0x10000) { out += char(0xe0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3f)); out += char(0x80 | (cp & 0x3f)); }
  else { out += char(0xf0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3f)); out += char(0x80 | ((cp >> 6) & 0x3f)); out += char(0x80 | (cp & 0x3f)); }
}

static std::string change_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (const std::string& ch : jinja::utf8_chars(s)) {
    unsigned char c0 = ch[0];
    if (ch.size() == 1) { out += c0 < 0x80 ? char(map_case(c0, upper)) : ch[0]; continue; }
    if (ch.size() == 2 && (c0 >> 5) == 6) {
      uint32_t cp = ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(ch[1]) & 0x3fu);
      if (upper && cp == 0xdf) { out += "SS"; continue; }  // ß
      append_utf8(out, map_case(cp, upper));
      continue;
    }
    out += ch;
  }
  return out;
}
std::string py_lower(const std::string& s) { return change_case(s, false); }
std::string py_upper(const std::string& s) { return change_case(s, true); }
std::string py_capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t first = jinja::utf8_chars(s.substr(0, std::min<size_t>(4, s.size())))[0].size();
  return py_upper(s.substr(0, first)) + py_lower(s.substr(first));
}

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    unsigned char u = c;
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    size_t k = 0;
    while (true) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > k && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
        out.push_back(s.substr(k, e - k));
        break;
      }
      size_t st = k;
      while (k < s.size() && !std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      out.push_back(s.substr(st, k - st));
    }
    return out;
  }
  if (!sep->is_string()) type_error("must be str or None, not " + std::string(sep->type_name()));
  if (sep->s.empty()) throw RenderError("ValueError", "empty separator");
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) break;
    size_t f = s.find(sep->s, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + sep->s.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const Value* sep, int64_t maxsplit) {
  if (maxsplit < 0 || !sep || sep->is_none()) {
    if (!sep || sep->is_none()) {
      if (maxsplit < 0) return py_split(s, sep, -1);
    } else {
      return py_split(s, sep, -1);
    }
  }
  if (!sep || sep->is_none()) {
    std::vector<std::string> out;
    size_t e = s.size();
    while (true) {
      while (e > 0 && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
      if (e == 0) break;
      if (int64_t(out.size()) == maxsplit) {
        size_t b = 0;
        while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
        out.push_back(s.substr(b, e - b));
        break;
      }
      size_t st = e;
      while (st > 0 && !std::isspace(static_cast<unsigned char>(s[st - 1]))) --st;
      out.push_back(s.substr(st, e - st));
      e = st;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (!sep->is_string()) type_error("must be str or None");
  if (sep->s.empty()) throw RenderError("ValueError", "empty separator");
  std::vector<std::string> out;
  size_t end = s.size();
  while (int64_t(out.size()) < maxsplit) {
    if (end < sep->s.size()) break;
    size_t f = s.rfind(sep->s, end - sep->s.size());
    if (f == std::string::npos) break;
    out.push_back(s.substr(f + sep->s.size(), end - f - sep->s.size()));
    end = f;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    auto cs = jinja::utf8_chars(s);
    int64_t n = 0;
    for (auto& c : cs) {
      if (count < 0 || n < count) { out += to; ++n; }
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    ++n;
  }
  return out + s.substr(pos);
}

Value str_list(const std::vector<std::string>& parts) {
  Value v = Value::make_list();
  for (auto& p : parts) v.list->push_back(Value::string(p));
  return v;
}

int64_t to_int(const Value& v, const char* what) {
  if (v.kind == Value::kInt) return v.i;
  if (v.kind == Value::kBool) return v.b;
  type_error(std::string(what) + " must be an integer, not " + v.type_name());
}

// Normalizes a Python index (negative counts from the end); false when out of range.
bool norm_index(int64_t& i, size_t n) {
  if (i < 0) i += int64_t(n);
  return i >= 0 && i < int64_t(n);
}

std::vector<int64_t> slice_indices(size_t n, const Value* a, const Value* b, const Value* c) {
  int64_t len = int64_t(n);
  int64_t step = (c && !c->is_none()) ? to_int(*c, "slice step") : 1;
  if (step == 0) throw RenderError("ValueError", "slice step cannot be zero");
  int64_t start, stop;
  auto clamp = [&](const Value* v, int64_t def, bool is_start) {
    if (!v || v->is_none()) return def;
    int64_t x = to_int(*v, "slice index");
    if (x < 0) x += len;
    if (step > 0) return std::clamp<int64_t>(x, 0, len);
    (void)is_start;
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  start = clamp(a, step > 0 ? 0 : len - 1, true);
  stop = clamp(b, step > 0 ? len : -1, false);
  std::vector<int64_t> out;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) out.push_back(k);
  else
    for (int64_t k = start; k > stop; k += step) out.push_back(k);
  return out;
}

// Items a for loop (or a filter) iterates over.
List iterate(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return {};
    case Value::kList: return *v.list;
    case Value::kDict: {
      List out;
      return v.dict->key_values;
    }
    case Value::kString: {
      List out;
      for (auto& c : jinja::utf8_chars(v.s)) out.push_back(Value::string(c));
      return out;
    }
    default: type_error(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::kString:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
      return container.s.find(item.s) != std::string::npos;
    case Value::kList:
      for (auto& e : *container.list)
        if (jinja::values_equal(e, item)) return true;
      return false;
    case Value::kDict:
      return container.dict->find_key(item) != nullptr;
    case Value::kUndefined: return false;
    default: type_error(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined: return 0;
    case Value::kString: return int64_t(jinja::utf8_length(v.s));
    case Value::kList:
      if (v.is_generator) type_error("object of type 'generator' has no len()");
      return int64_t(v.list->size());
    case Value::kDict: return int64_t(v.dict->items.size());
    default: type_error(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

const Value* kwarg(const Kwargs& kw, const char* name) {
  for (auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

// Positional-or-keyword argument lookup (index among the arguments after the subject).
const Value* arg(const std::vector<Value>& args, size_t i, const Kwargs& kw, const char* name) {
  if (i < args.size()) return &args[i];
  return kwarg(kw, name);
}

std::string py_format(const std::string& fmt, const std::vector<Value>& args, const Kwargs& kw) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '{') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '{') { out += '{'; ++k; continue; }
      size_t e = fmt.find('}', k);
      if (e == std::string::npos) throw RenderError("ValueError", "Single '{' encountered in format string");
      std::string field = fmt.substr(k + 1, e - k - 1);
      k = e;
      std::string conv;
      size_t colon = field.find(':');
      if (colon != std::string::npos) field = field.substr(0, colon);
      size_t bang = field.find('!');
      if (bang != std::string::npos) { conv = field.substr(bang + 1); field = field.substr(0, bang); }
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_idx >= args.size()) throw RenderError("IndexError", "Replacement index out of range");
        v = &args[auto_idx++];
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        size_t idx = std::strtoul(field.c_str(), nullptr, 10);
        if (idx >= args.size()) throw RenderError("IndexError", "Replacement index out of range");
        v = &args[idx];
      } else {
        v = kwarg(kw, field.c_str());
        if (!v) throw RenderError("KeyError", "'" + field + "'");
      }
      out += conv == "r" ? v->repr() : v->str();
    } else if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') ++k;
      out += '}';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace llmrt::jinja
