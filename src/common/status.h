// Status: the one error type of wsync's C++ internals. It carries a code (the public
// wsync_status_t, so the C shim passes it through unchanged) and a message that names the culprit.
// Contract: a function that detects an error builds the Status with the full explanation; callers
// propagate it unchanged or add context with withContext(). Nothing inside wsync throws across the
// C boundary; code that can throw (allocation, std containers) is wrapped by the C shim.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "wsync/wsync.h"

namespace wsync {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(wsync_status_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool isOk() const { return code_ == WSYNC_SUCCESS; }
  explicit operator bool() const { return isOk(); }
  wsync_status_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this status with "context: " prepended to the message (success stays success).
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return {code_, context + ": " + message_};
  }

  // "<code name>: <message>", for logs and test failure output.
  std::string toString() const;

 private:
  wsync_status_t code_ = WSYNC_SUCCESS;
  std::string message_;
};

inline Status invalidArgument(std::string m) {
  return {WSYNC_ERR_INVALID_ARGUMENT, std::move(m)};
}
inline Status invalidUsage(std::string m) {
  return {WSYNC_ERR_INVALID_USAGE, std::move(m)};
}
inline Status mismatch(std::string m) {
  return {WSYNC_ERR_MISMATCH, std::move(m)};
}
inline Status timeoutError(std::string m) {
  return {WSYNC_ERR_TIMEOUT, std::move(m)};
}
inline Status systemError(std::string m) {
  return {WSYNC_ERR_SYSTEM, std::move(m)};
}
inline Status remoteError(std::string m) {
  return {WSYNC_ERR_REMOTE, std::move(m)};
}
inline Status protocolError(std::string m) {
  return {WSYNC_ERR_PROTOCOL, std::move(m)};
}
inline Status internalError(std::string m) {
  return {WSYNC_ERR_INTERNAL, std::move(m)};
}

// Result<T>: a value or a non-success Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).isOk() && "Result built from a success Status");
  }

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOk;
    return isOk() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace wsync

#define WSYNC_CONCAT_INNER_(a, b) a##b
#define WSYNC_CONCAT_(a, b) WSYNC_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not success.
#define WSYNC_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::wsync::Status wsync_status_ = (expr);          \
    if (!wsync_status_.isOk()) return wsync_status_; \
  } while (0)

// `lhs = value of expr` (a Result<T>), or returns its Status from the enclosing function.
// `lhs` may be a declaration, so it cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define WSYNC_ASSIGN_OR_RETURN(lhs, expr)                   \
  auto WSYNC_CONCAT_(wsync_result_, __LINE__) = (expr);     \
  if (!WSYNC_CONCAT_(wsync_result_, __LINE__).isOk())       \
    return WSYNC_CONCAT_(wsync_result_, __LINE__).status(); \
  lhs = std::move(WSYNC_CONCAT_(wsync_result_, __LINE__)).value()
// NOLINTEND(bugprone-macro-parentheses)
