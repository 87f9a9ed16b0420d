// Status and StatusOr: how the public API reports bad input and failures.
// Inner kernels assert their preconditions and never return errors; every
// entry point a user can reach validates and returns a Status that names the
// offending field and its value.
#ifndef ATTNKIT_RUNTIME_STATUS_H_
#define ATTNKIT_RUNTIME_STATUS_H_

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "runtime/enum_table.h"

namespace attnkit {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kOutOfRange,
  kFailedPrecondition,
  kResourceExhausted,
  kUnimplemented,
  kNotFound,
  kInternal,
};

inline constexpr auto kStatusCodeNames = MakeEnumTable<StatusCode>({
    {StatusCode::kOk, "OK"},
    {StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
    {StatusCode::kOutOfRange, "OUT_OF_RANGE"},
    {StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
    {StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
    {StatusCode::kUnimplemented, "UNIMPLEMENTED"},
    {StatusCode::kNotFound, "NOT_FOUND"},
    {StatusCode::kInternal, "INTERNAL"},
});
static_assert(kStatusCodeNames.RoundTrips());
inline std::string_view StatusCodeName(StatusCode code) {
  return kStatusCodeNames.Name(code);
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status OutOfRange(std::string m) {
    return {StatusCode::kOutOfRange, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unimplemented(std::string m) {
    return {StatusCode::kUnimplemented, std::move(m)};
  }
  static Status NotFound(std::string m) {
    return {StatusCode::kNotFound, std::move(m)};
  }
  static Status Internal(std::string m) {
    return {StatusCode::kInternal, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: kv_heads=3 does not divide q_heads=8", or "OK".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT: implicit
    assert(!std::get<Status>(v_).ok() && "StatusOr needs an error or a value");
  }
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace attnkit

#define ATTNKIT_STATUS_CONCAT_INNER_(a, b) a##b
#define ATTNKIT_STATUS_CONCAT_(a, b) ATTNKIT_STATUS_CONCAT_INNER_(a, b)

// Returns early from the enclosing function with the error of `expr`.
#define ATTNKIT_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::attnkit::Status attnkit_status_ = (expr);        \
    if (!attnkit_status_.ok()) return attnkit_status_; \
  } while (0)

// `ATTNKIT_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or
// returns its error.
#define ATTNKIT_ASSIGN_OR_RETURN(lhs, expr) \
  ATTNKIT_ASSIGN_OR_RETURN_IMPL_(           \
      ATTNKIT_STATUS_CONCAT_(attnkit_statusor_, __LINE__), lhs, expr)
#define ATTNKIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // ATTNKIT_RUNTIME_STATUS_H_
