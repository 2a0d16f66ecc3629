// Errors. Two kinds, kept apart on purpose:
//  - invariants (programmer errors) abort with file:line through MYRIAD_CHECK; tests may install a handler
//    that throws instead, so a violated invariant can itself be tested;
//  - user-facing errors (bad shapes given to an op, bad files, bad configs, bad CLI input) are thrown as one
//    typed Error whose message names the op or field, the value and the rule. The CLI catches it at the
//    boundary, prints it once and exits non-zero.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace myriad {

enum class ErrorKind { kShape, kValue, kIo, kFormat, kConfig, kUnsupported, kOutOfMemory, kBusy };

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Concatenates any streamable values into one string: str("op ", name, ": ", n).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// "[2, 3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);

template <class... Args>
[[noreturn]] void throw_error(ErrorKind kind, const Args&... args) {
  throw Error(kind, str(args...));
}

// Invariant failures. The default handler prints "file:line: check failed: cond: message" and aborts.
using CheckHandler = void (*)(const char* file, int line, const char* cond, const std::string& message);
CheckHandler set_check_handler(CheckHandler handler);  // returns the previous one
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& message);

}  // namespace myriad

#define MYRIAD_CHECK(cond, ...)                                                                        \
  do {                                                                                                 \
    if (!(cond)) [[unlikely]] {                                                                        \
      ::myriad::check_failed(__FILE__, __LINE__, #cond, ::myriad::str("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                                  \
  } while (0)

// User-facing errors with a kind: MYRIAD_REQUIRE(ok, kShape, "matmul: ", ...).
#define MYRIAD_REQUIRE(cond, kind, ...)                              \
  do {                                                               \
    if (!(cond)) [[unlikely]] {                                      \
      ::myriad::throw_error(::myriad::ErrorKind::kind, __VA_ARGS__); \
    }                                                                \
  } while (0)
