#include "core/error.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace myriad {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kShape:
      return "shape error";
    case ErrorKind::kValue:
      return "value error";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kFormat:
      return "format error";
    case ErrorKind::kConfig:
      return "config error";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kOutOfMemory:
      return "out of memory";
    case ErrorKind::kBusy:
      return "busy";
  }
  return "error";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
void default_check_handler(const char* file, int line, const char* cond, const std::string& message) {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, cond, message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}
std::atomic<CheckHandler> g_handler{default_check_handler};
}  // namespace

CheckHandler set_check_handler(CheckHandler handler) {
  return g_handler.exchange(handler ? handler : default_check_handler);
}

void check_failed(const char* file, int line, const char* cond, const std::string& message) {
  g_handler.load()(file, line, cond, message);
  std::abort();  // a handler that returns still ends here
}

}  // namespace myriad
