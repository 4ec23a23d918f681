#include "runtime/chat/chat_template.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "runtime/chat/jinja_ast.h"
#include "runtime/chat/jinja_value.h"
#include "runtime/chat/py_builtins.h"

namespace llmrt {

using jinja::Body;
using jinja::Dict;
using jinja::Expr;
using jinja::Kwargs;
using jinja::List;
using jinja::RenderError;
using jinja::Stmt;
using jinja::Value;
using jinja::type_error;
using jinja::obj_desc;
using jinja::missing_attr;
using jinja::py_strip;
using jinja::html_escape;
using jinja::markup;
using jinja::py_lower;
using jinja::py_upper;
using jinja::py_capitalize;
using jinja::py_title;
using jinja::py_split;
using jinja::py_rsplit;
using jinja::py_replace;
using jinja::str_list;
using jinja::to_int;
using jinja::norm_index;
using jinja::slice_indices;
using jinja::iterate;
using jinja::contains;
using jinja::length_of;
using jinja::kwarg;
using jinja::arg;
using jinja::py_format;

struct ChatTemplate::Impl {
  Body body;
};

namespace {

constexpr int kMaxCallDepth = 100;
constexpr uint64_t kMaxSteps = 5'000'000;
constexpr size_t kMaxOutput = 64u << 20;
constexpr int64_t kMaxRange = 1'000'000;

[[noreturn]] void undefined_error(const Value& v) {
  if (v.unsafe) throw RenderError("SecurityError", v.s);
  throw RenderError("UndefinedError", v.s.empty() ? "value is undefined" : v.s);
}

class Renderer;

struct Scope {
  std::unordered_map<std::string, Value> vars;
};

class Renderer {
 public:
  enum Flow { kNormal, kBreak, kContinue };

  Renderer(const std::optional<std::tm>& pinned) : pinned_(pinned) {
    root_ = std::make_shared<Scope>();
    frames_.push_back(root_);
    install_builtins();
  }

  void set_global(const std::string& k, Value v) { globals_[k] = std::move(v); }

  std::string render(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  void install_builtins() {
    globals_["raise_exception"] = Value::callable([](std::vector<Value>& a, Kwargs&) -> Value {
      throw RenderError("TemplateError", a.empty() ? std::string() : a[0].str());
    });
    globals_["strftime_now"] = Value::callable([this](std::vector<Value>& a, Kwargs&) -> Value {
      if (a.empty() || !a[0].is_string()) type_error("strftime_now() takes a format string");
      std::tm tm{};
      if (pinned_) {
        tm = *pinned_;
      } else {
        std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      char buf[512];
      size_t n = a[0].s.empty() ? 0 : std::strftime(buf, sizeof buf, a[0].s.c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
    globals_["range"] = Value::callable([](std::vector<Value>& a, Kwargs&) -> Value {
      int64_t start = 0, stop = 0, step = 1;
      if (a.size() == 1) stop = to_int(a[0], "range()");
      else if (a.size() >= 2) { start = to_int(a[0], "range()"); stop = to_int(a[1], "range()"); }
      if (a.size() >= 3) step = to_int(a[2], "range()");
      if (a.empty() || a.size() > 3) type_error("range expected 1 to 3 arguments");
      if (step == 0) throw RenderError("ValueError", "range() arg 3 must not be zero");
      Value v = Value::make_list();
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (int64_t(v.list->size()) >= kMaxRange) throw RenderError("OverflowError", "range too big");
        v.list->push_back(Value::integer(k));
      }
      return v;
    });
    auto make_dict = [](bool ns) {
      return [ns](std::vector<Value>& a, Kwargs& kw) -> Value {
        Value d = Value::make_dict();
        d.dict->is_namespace = ns;
        if (!a.empty() && a[0].is_dict())
          for (size_t n = 0; n < a[0].dict->items.size(); ++n)
            d.dict->set_key(a[0].dict->key_values[n], a[0].dict->items[n].second);
        for (auto& [k, v] : kw) d.dict->set(k, v);
        return d;
      };
    };
    globals_["namespace"] = Value::callable(make_dict(true));
    globals_["dict"] = Value::callable(make_dict(false));
  }

  void step() {
    if (++steps_ > kMaxSteps) throw RenderError("RuntimeError", "template exceeded the step limit");
  }

  Value lookup(const std::string& name) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->vars.find(name);
      if (f != (*it)->vars.end()) return f->second;
    }
    auto g = globals_.find(name);
    if (g != globals_.end()) return g->second;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) { frames_.back()->vars[name] = std::move(v); }

  void assign_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size())
      throw RenderError("ValueError", "cannot unpack " + std::to_string(items.size()) + " values into " +
                                          std::to_string(targets.size()));
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
  }

  Flow exec(const Body& body, std::string& out) {
    for (auto& s : body) {
      Flow f = exec_stmt(*s, out);
      if (f != kNormal) return f;
      if (out.size() > kMaxOutput) throw RenderError("RuntimeError", "template output too large");
    }
    return kNormal;
  }

  Flow exec_stmt(const Stmt& s, std::string& out) {
    step();
    switch (s.kind) {
      case Stmt::kText: out += s.text; return kNormal;
      case Stmt::kOutput: out += eval(*s.expr).str(); return kNormal;
      case Stmt::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (eval(*s.conds[k]).truthy()) return exec(s.bodies[k], out);
        if (s.bodies.size() > s.conds.size()) return exec(s.bodies.back(), out);
        return kNormal;
      case Stmt::kFor: return exec_for(s, out);
      case Stmt::kSet: {
        Value v = eval(*s.expr);
        if (!s.attr.empty()) {
          Value ns = lookup(s.targets[0]);
          if (!jinja::is_namespace_dict(ns))
            throw RenderError("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
          ns.dict->set(s.attr, std::move(v));
        } else {
          assign_targets(s.targets, v);
        }
        return kNormal;
      }
      case Stmt::kSetBlock: {
        std::string captured;
        exec(s.body, captured);
        Value v = Value::string(std::move(captured));
        for (auto& fc : s.filters) v = apply_filter_call(fc, std::move(v));
        assign(s.targets[0], std::move(v));
        return kNormal;
      }
      case Stmt::kMacro: assign(s.targets[0], make_macro(s)); return kNormal;
      case Stmt::kBreak: return kBreak;
      case Stmt::kContinue: return kContinue;
      case Stmt::kFilterBlock: {
        std::string captured;
        Flow f = exec(s.body, captured);
        Value v = Value::string(std::move(captured));
        for (auto& fc : s.filters) v = apply_filter_call(fc, std::move(v));
        out += v.str();
        return f;
      }
      case Stmt::kPlain: return exec(s.body, out);
    }
    return kNormal;
  }

  Value apply_filter_call(const jinja::FilterCall& fc, Value v) {
    std::vector<Value> args;
    for (auto& a : fc.args) args.push_back(eval(*a));
    Kwargs kw;
    for (auto& [k, e] : fc.kwargs) kw.emplace_back(k, eval(*e));
    return apply_filter(fc.name, v, args, kw);
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    Value iterable = eval(*s.expr);
    List items = iterate(iterable);
    frames_.push_back(std::make_shared<Scope>());
    struct Pop {
      std::vector<std::shared_ptr<Scope>>& f;
      ~Pop() { f.pop_back(); }
    } pop{frames_};
    if (s.loop_filter) {
      List kept;
      for (auto& it : items) {
        assign_targets(s.targets, it);
        if (eval(*s.loop_filter).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    size_t n = items.size();
    // One loop object per loop, updated in place each iteration (as jinja2's LoopContext).
    Value loop = Value::make_dict();
    Dict& d = *loop.dict;
    auto counter = std::make_shared<size_t>(0);
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                            "depth", "depth0", "previtem", "nextitem"})
      d.set(key, Value());
    d.set("cycle", Value::callable([counter](std::vector<Value>& a, Kwargs&) -> Value {
      if (a.empty()) type_error("no items for cycling given");
      return a[*counter % a.size()];
    }));
    auto& slots = d.items;
    for (size_t k = 0; k < n; ++k) {
      step();
      *counter = k;
      slots[0].second = Value::integer(int64_t(k) + 1);
      slots[1].second = Value::integer(int64_t(k));
      slots[2].second = Value::integer(int64_t(n - k));
      slots[3].second = Value::integer(int64_t(n - k - 1));
      slots[4].second = Value::boolean(k == 0);
      slots[5].second = Value::boolean(k + 1 == n);
      slots[6].second = Value::integer(int64_t(n));
      slots[7].second = Value::integer(1);
      slots[8].second = Value::integer(0);
      slots[9].second = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
      slots[10].second = k + 1 < n ? items[k + 1] : Value::undefined("there is no next item");
      if (k == 0) assign("loop", loop);
      assign_targets(s.targets, items[k]);
      Flow f = exec(s.bodies[0], out);
      if (f == kBreak) break;
    }
    if (n == 0 && s.bodies.size() > 1) return exec(s.bodies[1], out);
    return kNormal;
  }

  Value make_macro(const Stmt& s) {
    const Stmt* m = &s;
    return Value::callable([this, m](std::vector<Value>& args, Kwargs& kw) -> Value {
      if (++call_depth_ > kMaxCallDepth) throw RenderError("RecursionError", "maximum macro recursion depth exceeded");
      if (args.size() > m->params.size())
        type_error("macro '" + m->targets[0] + "' takes not more than " + std::to_string(m->params.size()) +
                   " argument(s)");
      auto saved = std::move(frames_);
      frames_.clear();
      frames_.push_back(root_);
      frames_.push_back(std::make_shared<Scope>());
      std::string out;
      try {
        for (size_t k = 0; k < m->params.size(); ++k) {
          Value v;
          if (k < args.size()) v = args[k];
          else if (const Value* kv = kwarg(kw, m->params[k].c_str())) v = *kv;
          else if (m->defaults[k]) v = eval(*m->defaults[k]);
          else v = Value::undefined("'" + m->params[k] + "' is undefined");
          assign(m->params[k], v);
        }
        for (auto& [k, v] : kw)
          if (std::find(m->params.begin(), m->params.end(), k) == m->params.end())
            type_error("macro '" + m->targets[0] + "' takes no keyword argument '" + k + "'");
        exec(m->body, out);
      } catch (...) {
        frames_ = std::move(saved);
        --call_depth_;
        throw;
      }
      frames_ = std::move(saved);
      --call_depth_;
      return Value::string(std::move(out));
    });
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral: return e.literal;
      case Expr::kName: return lookup(e.name);
      case Expr::kList:
      case Expr::kTuple: {
        List items;
        for (auto& a : e.args) items.push_back(eval(*a));
        return e.kind == Expr::kList ? Value::make_list(std::move(items)) : Value::make_tuple(std::move(items));
      }
      case Expr::kDict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (key.is_list() || key.is_dict()) type_error(std::string("unhashable type: '") + key.type_name() + "'");
          d.dict->set_key(key, eval(*e.args[k + 1]));
        }
        return d;
      }
      case Expr::kAttr: return get_attr(eval(*e.args[0]), e.name);
      case Expr::kIndex: return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::kSlice: {
        Value obj = eval(*e.args[0]);
        Value parts[3];
        const Value* p[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k)
          if (e.args[k + 1]) { parts[k] = eval(*e.args[k + 1]); p[k] = &parts[k]; }
        return slice(obj, p[0], p[1], p[2]);
      }
      case Expr::kCall: {
        Value callee = eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
        Kwargs kw;
        for (auto& [k, x] : e.kwargs) kw.emplace_back(k, eval(*x));
        return call(callee, args, kw);
      }
      case Expr::kFilter: {
        Value v = eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
        Kwargs kw;
        for (auto& [k, x] : e.kwargs) kw.emplace_back(k, eval(*x));
        return apply_filter(e.name, v, args, kw);
      }
      case Expr::kTest: {
        Value v = eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
        bool r = apply_test(e.name, v, args);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::kUnary: {
        Value v = eval(*e.args[0]);
        if (v.is_undefined()) undefined_error(v);
        if (v.kind == Value::kFloat) return Value::number(e.name == "-" ? -v.f : v.f);
        if (v.is_number()) {
          int64_t x = v.kind == Value::kBool ? v.b : v.i;
          return Value::integer(e.name == "-" ? -x : x);
        }
        type_error(std::string("bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::kBinary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
      case Expr::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.kwargs.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!binary(e.kwargs[k].first, left, right).truthy()) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::kAnd: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? eval(*e.args[1]) : a;
      }
      case Expr::kOr: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? a : eval(*e.args[1]);
      }
      case Expr::kNot: return Value::boolean(!eval(*e.args[0]).truthy());
      case Expr::kCond:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        if (e.args[2]) return eval(*e.args[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
    }
    return Value();
  }

  Value call(const Value& callee, std::vector<Value>& args, Kwargs& kw) {
    step();
    if (callee.kind == Value::kCallable) return (*callee.fn)(args, kw);
    if (callee.is_undefined()) undefined_error(callee);
    type_error(std::string("'") + callee.type_name() + "' object is not callable");
  }

  static bool is_mutating_method(const Value& obj, const std::string& name) {
    static const char* list_m[] = {"append", "pop", "insert", "extend", "remove", "clear", "sort", "reverse"};
    static const char* dict_m[] = {"pop", "popitem", "setdefault", "update", "clear"};
    if (obj.is_list())
      for (const char* m : list_m) if (name == m) return true;
    if (obj.is_dict() && !obj.dict->is_namespace)
      for (const char* m : dict_m) if (name == m) return true;
    return false;
  }

  Value bound_method(const Value& obj, const std::string& name) {
    return Value::callable([this, obj, name](std::vector<Value>& a, Kwargs& kw) -> Value {
      return call_method(obj, name, a, kw);
    });
  }

  Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) undefined_error(obj);
    if (is_mutating_method(obj, name)) {
      Value u = Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                                 "' object is unsafe.");
      u.unsafe = true;
      return u;
    }
    if (obj.is_dict()) {
      if (!obj.dict->is_namespace && (name == "get" || name == "items" || name == "keys" || name == "values" ||
                                      name == "copy"))
        return bound_method(obj, name);
      if (const Value* v = obj.dict->find(name)) return *v;
      if (obj.dict->is_namespace) return Value::undefined(obj_desc(obj) + " has no attribute '" + name + "'");
      return missing_attr(obj, name);
    }
    if (obj.is_string()) {
      static const char* m[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                "lower", "upper", "replace", "format", "find", "rfind", "index", "count",
                                "title", "capitalize", "join", "isdigit", "isalpha", "isalnum", "isspace",
                                "islower", "isupper", "splitlines", "removeprefix", "removesuffix"};
      for (const char* x : m)
        if (name == x) return bound_method(obj, name);
    }
    if (obj.is_list() && (name == "index" || name == "count")) return bound_method(obj, name);
    return missing_attr(obj, name);
  }

  Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return get_attr(obj, key.s);
      }
      if (const Value* v = obj.dict->find_key(key)) return *v;
      return Value::undefined(obj_desc(obj) + " has no element " + key.repr());
    }
    if ((obj.is_list() || obj.is_string()) && (key.kind == Value::kInt || key.kind == Value::kBool)) {
      int64_t i = key.kind == Value::kBool ? key.b : key.i;
      if (obj.is_list()) {
        if (norm_index(i, obj.list->size())) return (*obj.list)[i];
      } else {
        auto cs = jinja::utf8_chars(obj.s);
        if (norm_index(i, cs.size())) return Value::string(cs[i]);
      }
      return Value::undefined(obj_desc(obj) + " has no element " + key.repr());
    }
    if (key.is_string()) return get_attr(obj, key.s);
    return Value::undefined(obj_desc(obj) + " has no element " + key.repr());
  }

  Value slice(const Value& obj, const Value* a, const Value* b, const Value* c) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_list()) {
      List out;
      for (int64_t k : slice_indices(obj.list->size(), a, b, c)) out.push_back((*obj.list)[k]);
      Value v = Value::make_list(std::move(out));
      v.is_tuple = obj.is_tuple;
      return v;
    }
    if (obj.is_string()) {
      auto cs = jinja::utf8_chars(obj.s);
      std::string out;
      for (int64_t k : slice_indices(cs.size(), a, b, c)) out += cs[k];
      return Value::string(out);
    }
    type_error(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value::boolean(jinja::values_equal(a, b));
    if (op == "!=") return Value::boolean(!jinja::values_equal(a, b));
    if (op == "in") return Value::boolean(contains(b, a));
    if (op == "not in") return Value::boolean(!contains(b, a));
    if (op == "~") {
      std::string r = a.str();
      r += b.str();
      if (r.size() > kMaxOutput) throw RenderError("MemoryError", "value too large");
      return Value::string(std::move(r));
    }
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (!((a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) || (a.is_list() && b.is_list())))
        type_error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
      int c = jinja::compare_values(a, b);
      bool r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      return Value::boolean(r);
    }
    bool ints = (a.kind == Value::kInt || a.kind == Value::kBool) && (b.kind == Value::kInt || b.kind == Value::kBool);
    auto iv = [](const Value& v) { return v.kind == Value::kBool ? int64_t(v.b) : v.i; };
    if (op == "+") {
      if (a.is_number() && b.is_number())
        return ints ? Value::integer(iv(a) + iv(b)) : Value::number(a.as_double() + b.as_double());
      if ((a.is_string() && b.is_string() && a.s.size() + b.s.size() > kMaxOutput) ||
          (a.is_list() && b.is_list() && int64_t(a.list->size() + b.list->size()) > kMaxRange))
        throw RenderError("MemoryError", "value too large");
      if (a.is_string() && b.is_string()) {
        if (a.markup || b.markup)  // markupsafe: the plain operand is escaped
          return markup((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)));
        return Value::string(a.s + b.s);
      }
      if (a.is_list() && b.is_list()) {
        List out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        Value v = Value::make_list(std::move(out));
        v.is_tuple = a.is_tuple;
        return v;
      }
      if (a.is_string() || a.is_list())
        type_error(std::string("can only concatenate ") + a.type_name() + " (not \"" + b.type_name() + "\") to " +
                   a.type_name());
      type_error(std::string("unsupported operand type(s) for +: '") + a.type_name() + "' and '" + b.type_name() + "'");
    }
    if (op == "*") {
      if (a.is_number() && b.is_number())
        return ints ? Value::integer(iv(a) * iv(b)) : Value::number(a.as_double() * b.as_double());
      const Value* seq = a.is_string() || a.is_list() ? &a : &b;
      const Value* cnt = seq == &a ? &b : &a;
      if ((seq->is_string() || seq->is_list()) && (cnt->kind == Value::kInt || cnt->kind == Value::kBool)) {
        int64_t n = iv(*cnt);
        if (n > 0 && (n > int64_t(kMaxOutput) ||
                      n * int64_t(seq->is_string() ? seq->s.size() : seq->list->size()) >
                          (seq->is_string() ? int64_t(kMaxOutput) : kMaxRange)))
          throw RenderError("MemoryError", "repeat count too large");
        if (seq->is_string()) {
          std::string out;
          for (int64_t k = 0; k < n; ++k) out += seq->s;
          return Value::string(out);
        }
        List out;
        for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
        return Value::make_list(std::move(out));
      }
    }
    if (a.is_number() && b.is_number()) {
      if (op == "-") return ints ? Value::integer(iv(a) - iv(b)) : Value::number(a.as_double() - b.as_double());
      if (op == "/") {
        if (b.as_double() == 0) throw RenderError("ZeroDivisionError", "division by zero");
        return Value::number(a.as_double() / b.as_double());
      }
      if (op == "//" || op == "%") {
        if (b.as_double() == 0) throw RenderError("ZeroDivisionError", "integer division or modulo by zero");
        if (ints) {
          int64_t x = iv(a), y = iv(b);
          int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return Value::integer(op == "//" ? q : x - q * y);
        }
        double x = a.as_double(), y = b.as_double();
        double q = std::floor(x / y);
        return Value::number(op == "//" ? q : x - q * y);
      }
      if (op == "**") {
        if (ints && iv(b) >= 0) {
          int64_t r = 1;
          for (int64_t k = 0; k < iv(b) && k < 64; ++k) r *= iv(a);
          return Value::integer(r);
        }
        return Value::number(std::pow(a.as_double(), b.as_double()));
      }
    }
    if (op == "%" && a.is_string()) {
      // printf-style formatting: %s and %d with one value or a tuple.
      List vals = b.is_list() && b.is_tuple ? *b.list : List{b};
      std::string out;
      size_t vi = 0;
      for (size_t k = 0; k < a.s.size(); ++k) {
        if (a.s[k] != '%' || k + 1 >= a.s.size()) { out += a.s[k]; continue; }
        char f = a.s[++k];
        if (f == '%') { out += '%'; continue; }
        if (vi >= vals.size()) type_error("not enough arguments for format string");
        const Value& v = vals[vi++];
        if (f == 's') out += v.str();
        else if (f == 'r') out += v.repr();
        else if (f == 'd' || f == 'i') out += std::to_string(v.kind == Value::kFloat ? int64_t(v.f) : to_int(v, "%d"));
        else type_error(std::string("unsupported format character '") + f + "'");
      }
      return Value::string(out);
    }
    type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  }

  Value call_method(const Value& obj, const std::string& name, std::vector<Value>& a, Kwargs& kw) {
    if (obj.is_dict()) {
      if (name == "get") {
        if (a.empty()) type_error("get expected at least 1 argument, got 0");
        if (const Value* v = obj.dict->find_key(a[0])) return *v;
        return a.size() > 1 ? a[1] : Value::none();
      }
      if (name == "copy") {
        Value d = Value::make_dict();
        *d.dict = *obj.dict;
        d.dict->is_namespace = false;
        return d;
      }
      Value out = Value::make_list();
      for (size_t n = 0; n < obj.dict->items.size(); ++n) {
        const Value& k = obj.dict->key_values[n];
        const Value& v = obj.dict->items[n].second;
        if (name == "items") out.list->push_back(Value::make_tuple({k, v}));
        else if (name == "keys") out.list->push_back(k);
        else out.list->push_back(v);
      }
      return out;
    }
    if (obj.is_list()) {
      if (a.empty()) type_error(name + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->size(); ++k) {
        if (jinja::values_equal((*obj.list)[k], a[0])) {
          if (name == "index") return Value::integer(int64_t(k));
          ++n;
        }
      }
      if (name == "index") throw RenderError("ValueError", a[0].repr() + " is not in list");
      return Value::integer(n);
    }
    const std::string& s = obj.s;
    const Value* a0 = arg(a, 0, kw, "");
    auto need_str = [&](const Value* v) -> const std::string& {
      if (!v || !v->is_string())
        type_error(name + "() argument must be str, not " + std::string(v ? v->type_name() : "nothing"));
      return v->s;
    };
    if (name == "strip") return Value::string(py_strip(s, a0, true, true));
    if (name == "lstrip") return Value::string(py_strip(s, a0, true, false));
    if (name == "rstrip") return Value::string(py_strip(s, a0, false, true));
    if (name == "split" || name == "rsplit") {
      const Value* sep = arg(a, 0, kw, "sep");
      const Value* ms = arg(a, 1, kw, "maxsplit");
      int64_t maxsplit = ms ? to_int(*ms, "maxsplit") : -1;
      return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
    }
    if (name == "startswith" || name == "endswith") {
      if (!a0) type_error(name + "() takes at least 1 argument");
      std::vector<std::string> cands;
      if (a0->is_list()) for (auto& x : *a0->list) cands.push_back(need_str(&x));
      else cands.push_back(need_str(a0));
      for (auto& c : cands) {
        if (name == "startswith" ? s.compare(0, c.size(), c) == 0
                                 : (s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "lower") return Value::string(py_lower(s));
    if (name == "upper") return Value::string(py_upper(s));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(py_capitalize(s));
    if (name == "replace") {
      if (a.size() < 2) type_error("replace expected at least 2 arguments");
      int64_t count = a.size() > 2 ? to_int(a[2], "count") : -1;
      return Value::string(py_replace(s, need_str(&a[0]), need_str(&a[1]), count));
    }
    if (name == "format") return Value::string(py_format(s, a, kw));
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string& sub = need_str(a0);
      size_t f = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (f == std::string::npos) {
        if (name == "index") throw RenderError("ValueError", "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(int64_t(jinja::utf8_length(s.substr(0, f))));
    }
    if (name == "count") {
      const std::string& sub = need_str(a0);
      if (sub.empty()) return Value::integer(int64_t(jinja::utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      if (!a0) type_error("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (auto& x : iterate(*a0)) {
        if (!first) out += s;
        first = false;
        out += need_str(&x);
      }
      return Value::string(out);
    }
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t st = 0;
      for (size_t k = 0; k < s.size(); ++k)
        if (s[k] == '\n') { lines.push_back(s.substr(st, k - st)); st = k + 1; }
      if (st < s.size()) lines.push_back(s.substr(st));
      return str_list(lines);
    }
    if (name == "removeprefix") {
      const std::string& p = need_str(a0);
      return Value::string(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
    }
    if (name == "removesuffix") {
      const std::string& p = need_str(a0);
      bool ends = s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      return Value::string(ends && !p.empty() ? s.substr(0, s.size() - p.size()) : s);
    }
    auto all_of = [&](auto pred) {
      if (s.empty()) return Value::boolean(false);
      for (unsigned char c : s)
        if (!pred(c)) return Value::boolean(false);
      return Value::boolean(true);
    };
    if (name == "isdigit") return all_of([](unsigned char c) { return std::isdigit(c) != 0; });
    if (name == "isalpha") return all_of([](unsigned char c) { return std::isalpha(c) != 0; });
    if (name == "isalnum") return all_of([](unsigned char c) { return std::isalnum(c) != 0; });
    if (name == "isspace") return all_of([](unsigned char c) { return std::isspace(c) != 0; });
    bool has_alpha = std::any_of(s.begin(), s.end(), [](unsigned char c) { return std::isalpha(c) != 0; });
    if (name == "islower")
      return Value::boolean(has_alpha && std::none_of(s.begin(), s.end(), [](unsigned char c) { return std::isupper(c) != 0; }));
    if (name == "isupper")
      return Value::boolean(has_alpha && std::none_of(s.begin(), s.end(), [](unsigned char c) { return std::islower(c) != 0; }));
    throw RenderError("UndefinedError", "'str object' has no attribute '" + name + "'");
  }

  // Dotted attribute path ("function.name") as used by map/selectattr/sort.
  Value attr_path(const Value& v, const std::string& path) {
    Value cur = v;
    size_t st = 0;
    while (true) {
      size_t dot = path.find('.', st);
      std::string part = path.substr(st, dot == std::string::npos ? std::string::npos : dot - st);
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); });
      cur = numeric ? get_item(cur, Value::integer(std::strtoll(part.c_str(), nullptr, 10)))
                    : get_item(cur, Value::string(part));
      if (dot == std::string::npos) return cur;
      st = dot + 1;
    }
  }

  bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
    auto need = [&](size_t n) {
      if (args.size() < n) type_error("test '" + name + "' takes an argument");
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::kInt;
    if (name == "float") return v.kind == Value::kFloat;
    if (name == "boolean") return v.kind == Value::kBool;
    if (name == "true") return v.kind == Value::kBool && v.b;
    if (name == "false") return v.kind == Value::kBool && !v.b;
    if (name == "callable") return v.kind == Value::kCallable;
    if (name == "lower") return v.is_string() && py_lower(v.s) == v.s;
    if (name == "upper") return v.is_string() && py_upper(v.s) == v.s;
    if (name == "escaped") return false;
    if (name == "odd" || name == "even") {
      int64_t x = to_int(v, "value");
      return (((x % 2) + 2) % 2 == 1) == (name == "odd");
    }
    need(1);
    if (name == "in") return contains(args[0], v);
    if (name == "eq" || name == "equalto" || name == "==") return jinja::values_equal(v, args[0]);
    if (name == "ne" || name == "!=") return !jinja::values_equal(v, args[0]);
    if (name == "sameas") {
      if (v.kind != args[0].kind) return false;
      if (v.is_list()) return v.list == args[0].list;
      if (v.is_dict()) return v.dict == args[0].dict;
      return jinja::values_equal(v, args[0]);
    }
    if (name == "divisibleby") {
      int64_t d = to_int(args[0], "divisor");
      if (d == 0) throw RenderError("ZeroDivisionError", "integer division or modulo by zero");
      return to_int(v, "value") % d == 0;
    }
    std::string op = name == "lt" || name == "lessthan" ? "<" : name == "gt" || name == "greaterthan" ? ">"
                   : name == "le" ? "<=" : name == "ge" ? ">=" : name;
    if (op == "<" || op == ">" || op == "<=" || op == ">=") return binary(op, v, args[0]).truthy();
    throw RenderError("TemplateRuntimeError", "test '" + name + "' is not supported");
  }

  // select/reject/selectattr/rejectattr
  Value filter_items(const Value& v, std::vector<Value>& args, bool by_attr, bool keep) {
    size_t k = 0;
    std::string attr;
    if (by_attr) {
      if (args.empty() || !args[0].is_string()) type_error("selectattr needs an attribute name");
      attr = args[0].s;
      k = 1;
    }
    std::string test = k < args.size() ? args[k].str() : "";
    std::vector<Value> targs(args.begin() + std::min(args.size(), k + 1), args.end());
    if (!test.empty() && !jinja::is_known_test(test))
      throw RenderError("TemplateRuntimeError", "No test named '" + test + "'.");
    Value out = Value::make_list();
    out.is_generator = true;
    if (!v.truthy()) return out;  // jinja2: "if seq:"
    for (auto& item : iterate(v)) {
      Value x = by_attr ? attr_path(item, attr) : item;
      bool r = test.empty() ? x.truthy() : apply_test(test, x, targs);
      if (r == keep) out.list->push_back(item);
    }
    return out;
  }

  Value apply_filter(const std::string& name, const Value& v, std::vector<Value>& args, Kwargs& kw) {
    step();
    if (name == "tojson") {
      // transformers' override: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
      jinja::JsonOptions o;
      const Value* ea = arg(args, 0, kw, "ensure_ascii");
      const Value* ind = arg(args, 1, kw, "indent");
      const Value* sep = arg(args, 2, kw, "separators");
      const Value* sk = arg(args, 3, kw, "sort_keys");
      o.ensure_ascii = ea && ea->truthy();
      o.sort_keys = sk && sk->truthy();
      if (ind && !ind->is_none()) {
        if (ind->is_string()) type_error("string indents are not supported");
        o.indent = int(std::clamp<int64_t>(to_int(*ind, "indent"), 0, 64));
        o.item_sep = ",";
      }
      if (sep && !sep->is_none()) {
        if (!sep->is_list() || sep->list->size() != 2) type_error("separators must be a pair of strings");
        o.item_sep = (*sep->list)[0].str();
        o.key_sep = (*sep->list)[1].str();
      }
      return Value::string(jinja::to_json(v, o));
    }
    if (name == "length" || name == "count") return Value::integer(length_of(v));
    if (name == "string") return v.is_string() ? v : Value::string(v.str());
    if (name == "safe") return markup(v.str());
    if (name == "trim") {
      Value r = Value::string(py_strip(v.str(), arg(args, 0, kw, "chars"), true, true));
      r.markup = v.markup;
      return r;
    }
    if (name == "upper") return Value::string(py_upper(v.str()));
    if (name == "lower") return Value::string(py_lower(v.str()));
    if (name == "title") return Value::string(py_title(v.str()));
    if (name == "capitalize") {
      return Value::string(py_capitalize(v.str()));
    }
    if (name == "default" || name == "d") {
      const Value* def = arg(args, 0, kw, "default_value");
      const Value* boolean = arg(args, 1, kw, "boolean");
      bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
      return use ? (def ? *def : Value::string("")) : v;
    }
    if (name == "join") {
      const Value* sep = arg(args, 0, kw, "d");
      const Value* attr = arg(args, 1, kw, "attribute");
      std::string out;
      bool first = true;
      for (auto& x : iterate(v)) {
        if (!first) out += sep ? sep->str() : "";
        first = false;
        out += (attr ? attr_path(x, attr->str()) : x).str();
      }
      return Value::string(out);
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::make_list();
      if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
      Value out = Value::make_list();
      for (size_t n = 0; n < v.dict->items.size(); ++n)
        out.list->push_back(Value::make_tuple({v.dict->key_values[n], v.dict->items[n].second}));
      return out;
    }
    if (name == "dictsort") {
      if (!v.is_dict()) type_error("You can only sort by either \"key\" or \"value\"");
      const Value* cs = arg(args, 0, kw, "case_sensitive");
      const Value* by = arg(args, 1, kw, "by");
      const Value* rev = arg(args, 2, kw, "reverse");
      bool by_value = by && by->str() == "value";
      List items;
      for (size_t n = 0; n < v.dict->items.size(); ++n)
        items.push_back(Value::make_tuple({v.dict->key_values[n], v.dict->items[n].second}));
      bool sensitive = cs && cs->truthy();
      sort_values(items, [&](const Value& t) {
        Value key = (*t.list)[by_value ? 1 : 0];
        return (!sensitive && key.is_string()) ? Value::string(py_lower(key.s)) : key;
      }, rev && rev->truthy());
      return Value::make_list(std::move(items));
    }
    if (name == "replace") {
      if (args.size() < 2) type_error("replace filter needs old and new");
      const Value* cnt = arg(args, 2, kw, "count");
      return Value::string(py_replace(v.str(), args[0].str(), args[1].str(), cnt && !cnt->is_none() ? to_int(*cnt, "count") : -1));
    }
    if (name == "list") return Value::make_list(iterate(v));
    if (name == "first" || name == "last") {
      List items = iterate(v);
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
      if (v.is_string()) {
        auto cs = jinja::utf8_chars(v.s);
        std::string out;
        for (auto it = cs.rbegin(); it != cs.rend(); ++it) out += *it;
        return Value::string(out);
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      Value out = Value::make_list(std::move(items));
      out.is_generator = true;
      return out;
    }
    if (name == "selectattr" || name == "rejectattr") return filter_items(v, args, true, name == "selectattr");
    if (name == "select" || name == "reject") return filter_items(v, args, false, name == "select");
    if (name == "map") {
      Value out = Value::make_list();
      out.is_generator = true;
      if (!v.truthy()) return out;  // jinja2: "if seq:"
      const Value* attr = kwarg(kw, "attribute");
      if (attr) {
        const Value* def = kwarg(kw, "default");
        for (auto& x : iterate(v)) {
          Value r = attr_path(x, attr->str());
          if (r.is_undefined() && def) r = *def;
          out.list->push_back(r);
        }
        return out;
      }
      if (args.empty()) type_error("map requires a filter name or attribute=");
      std::string f = args[0].str();
      if (!jinja::is_known_filter(f)) throw RenderError("TemplateRuntimeError", "No filter named '" + f + "'.");
      std::vector<Value> rest(args.begin() + 1, args.end());
      for (auto& x : iterate(v)) {
        std::vector<Value> a2 = rest;
        Kwargs kw2 = kw;
        out.list->push_back(apply_filter(f, x, a2, kw2));
      }
      return out;
    }
    if (name == "unique") {
      const Value* cs = arg(args, 0, kw, "case_sensitive");
      const Value* attr = arg(args, 1, kw, "attribute");
      Value out = Value::make_list();
      out.is_generator = true;
      List seen;
      for (auto& x : iterate(v)) {
        Value key = attr ? attr_path(x, attr->str()) : x;
        if (!(cs && cs->truthy()) && key.is_string()) key = Value::string(py_lower(key.s));
        bool dup = false;
        for (auto& s : seen) if (jinja::values_equal(s, key)) { dup = true; break; }
        if (!dup) { seen.push_back(key); out.list->push_back(x); }
      }
      return out;
    }
    if (name == "sort") {
      const Value* rev = arg(args, 0, kw, "reverse");
      const Value* cs = arg(args, 1, kw, "case_sensitive");
      const Value* attr = arg(args, 2, kw, "attribute");
      List items = iterate(v);
      bool sensitive = cs && cs->truthy();
      sort_values(items, [&](const Value& x) {
        Value key = attr ? attr_path(x, attr->str()) : x;
        return (!sensitive && key.is_string()) ? Value::string(py_lower(key.s)) : key;
      }, rev && rev->truthy());
      return Value::make_list(std::move(items));
    }
    if (name == "min" || name == "max") {
      List items = iterate(v);
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      Value best = items[0];
      for (auto& x : items) {
        int c = jinja::compare_values(x, best);
        if (name == "min" ? c < 0 : c > 0) best = x;
      }
      return best;
    }
    if (name == "sum") {
      const Value* attr = kwarg(kw, "attribute");
      Value total = Value::integer(0);
      for (auto& x : iterate(v)) total = binary("+", total, attr ? attr_path(x, attr->str()) : x);
      return total;
    }
    if (name == "int") {
      const Value* def = arg(args, 0, kw, "default");
      Value d = def ? *def : Value::integer(0);
      if (v.kind == Value::kInt) return v;
      if (v.kind == Value::kBool) return Value::integer(v.b);
      if (v.kind == Value::kFloat) return std::isfinite(v.f) ? Value::integer(int64_t(v.f)) : d;
      if (v.is_string()) {
        std::string s = py_strip(v.s, nullptr, true, true);
        char* end = nullptr;
        long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end && *end == 0) return Value::integer(x);
        double f = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0 && std::isfinite(f)) return Value::integer(int64_t(f));
      }
      return d;
    }
    if (name == "float") {
      const Value* def = arg(args, 0, kw, "default");
      if (v.is_number()) return Value::number(v.as_double());
      if (v.is_string()) {
        std::string s = py_strip(v.s, nullptr, true, true);
        char* end = nullptr;
        double f = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0) return Value::number(f);
      }
      return def ? *def : Value::number(0.0);
    }
    if (name == "abs") {
      if (v.kind == Value::kFloat) return Value::number(std::fabs(v.f));
      return Value::integer(std::abs(to_int(v, "abs()")));
    }
    if (name == "round") {
      const Value* prec = arg(args, 0, kw, "precision");
      const Value* method = arg(args, 1, kw, "method");
      int64_t p = prec ? to_int(*prec, "precision") : 0;
      std::string m = method ? method->str() : "common";
      if (m == "common" && p >= 0 && p <= 300) {
        // Python's round(): correctly rounded, ties to even on the exact binary value.
        char buf[400];
        std::snprintf(buf, sizeof buf, "%.*f", int(p), v.as_double());
        return Value::number(std::strtod(buf, nullptr));
      }
      double scale = std::pow(10.0, double(p));
      double x = v.as_double() * scale;
      double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::round(x);
      return Value::number(r / scale);
    }
    if (name == "indent") {
      const Value* w = arg(args, 0, kw, "width");
      const Value* first = arg(args, 1, kw, "first");
      const Value* blank = arg(args, 2, kw, "blank");
      std::string ind = w ? (w->is_string() ? w->s : std::string(size_t(std::clamp<int64_t>(to_int(*w, "width"), 0, 1024)), ' '))
                          : std::string(4, ' ');
      std::string s = v.str() + "\n";
      std::vector<std::string> lines;
      size_t st = 0;
      for (size_t k = 0; k < s.size(); ++k)
        if (s[k] == '\n') { lines.push_back(s.substr(st, k - st)); st = k + 1; }
      std::string rv;
      if (blank && blank->truthy()) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
      } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
      }
      if (first && first->truthy()) rv = ind + rv;
      return Value::string(rv);
    }
    if (name == "wordcount") return Value::integer(int64_t(py_split(v.str(), nullptr, -1).size()));
    if (name == "escape" || name == "e") return v.markup ? v : markup(html_escape(v.str()));
    if (name == "attr") {
      if (args.empty()) type_error("attr needs a name");
      return get_attr(v, args[0].str());
    }
    throw RenderError("TemplateRuntimeError", "No filter named '" + name + "'.");
  }

  template <typename KeyFn>
  void sort_values(List& items, KeyFn key, bool reverse) {
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key(items[k]), k);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      int c = jinja::compare_values(x.first, y.first);
      return reverse ? c > 0 : c < 0;
    });
    List out;
    for (auto& [_, k] : keyed) out.push_back(items[k]);
    items = std::move(out);
  }

  std::optional<std::tm> pinned_;
  std::unordered_map<std::string, Value> globals_;
  std::shared_ptr<Scope> root_;
  std::vector<std::shared_ptr<Scope>> frames_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

ChatTemplate::~ChatTemplate() = default;

StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::parse(std::string_view source) {
  auto body = jinja::parse_template(source);
  if (!body.ok()) return body.status();
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->impl_ = std::make_unique<Impl>();
  t->impl_->body = std::move(body).value();
  return t;
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) return invalid_argument("chat template: messages must be a JSON array");
  if (!extra.is_object()) return invalid_argument("chat template: extra context must be a JSON object");
  try {
    Renderer r(pinned_time_);
    for (auto it = extra.begin(); it != extra.end(); ++it) r.set_global(it.key(), jinja::from_json(it.value()));
    r.set_global("messages", jinja::from_json(messages));
    r.set_global("add_generation_prompt", Value::boolean(add_generation_prompt));
    return r.render(impl_->body);
  } catch (const RenderError& e) {
    return invalid_argument("chat template error: " + e.kind + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory while rendering");
  }
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                           const nlohmann::json& extra) const {
  return render(nlohmann::ordered_json::parse(messages.dump()), add_generation_prompt,
                nlohmann::ordered_json::parse(extra.dump()));
}

}  // namespace llmrt
