// Status and StatusOr: errors from untrusted input are values, never aborts.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace llmrt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from a user or a file
  kNotFound,
  kOutOfRange,        // e.g. prompt longer than the context
  kResourceExhausted, // e.g. no free KV blocks
  kUnimplemented,     // a feature this runtime lacks
  kFailedPrecondition,
  kInternal,
  kUnavailable,       // e.g. no CUDA driver
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "INVALID_ARGUMENT: message"
  std::string to_string() const;
  /// Prefixes the message with context ("reading plan.fb: ...").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status out_of_range(std::string message);
Status resource_exhausted(std::string message);
Status unimplemented(std::string message);
Status failed_precondition(std::string message);
Status internal_error(std::string message);
Status unavailable(std::string message);

/// `text` with every byte that is not part of printable UTF-8 (control bytes, invalid or
/// truncated sequences) written as \xNN, for messages that quote untrusted bytes.
std::string printable(std::string_view text);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }
  StatusOr(T value) : v_(std::move(value)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace llmrt

#define LLMRT_CONCAT_INNER(a, b) a##b
#define LLMRT_CONCAT(a, b) LLMRT_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::llmrt::Status _st = (expr);                \
    if (!_st.ok()) return _st;                   \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(LLMRT_CONCAT(_status_or_, __LINE__), lhs, expr)
