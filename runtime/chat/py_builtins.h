// Python built-ins the chat template engine needs (runtime/chat/chat_template.cc): str methods
// (strip, split, replace, title, format ...), slicing, iteration, `in`, len(), argument lookup and
// the TypeError / missing-attribute conventions, with Python's semantics. Internal to runtime/chat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/chat/jinja_value.h"

namespace llmrt::jinja {

/// Raises TypeError (as a RenderError) with message m.
[[noreturn]] void type_error(const std::string& m);
/// "'int object'": how Python names a value's type in messages.
std::string obj_desc(const Value& v);

Value missing_attr(const Value& obj, const std::string& name);
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string html_escape(const std::string& s);
Value markup(std::string s);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const Value* sep, int64_t maxsplit);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
Value str_list(const std::vector<std::string>& parts);
int64_t to_int(const Value& v, const char* what);
bool norm_index(int64_t& i, size_t n);
std::vector<int64_t> slice_indices(size_t n, const Value* a, const Value* b, const Value* c);
List iterate(const Value& v);
bool contains(const Value& container, const Value& item);
int64_t length_of(const Value& v);
const Value* kwarg(const Kwargs& kw, const char* name);
const Value* arg(const std::vector<Value>& args, size_t i, const Kwargs& kw, const char* name);
std::string py_format(const std::string& fmt, const std::vector<Value>& args, const Kwargs& kw);

}  // namespace llmrt::jinja
