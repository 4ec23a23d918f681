#include "runtime/base/status.h"

namespace llmrt {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

}  // namespace llmrt
