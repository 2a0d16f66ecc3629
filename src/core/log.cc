#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace myriad {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* e = std::getenv("MYRIAD_LOG_LEVEL");
    if (!e) return LogLevel::kInfo;
    if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
    if (!std::strcmp(e, "warn")) return LogLevel::kWarn;
    if (!std::strcmp(e, "error")) return LogLevel::kError;
    return LogLevel::kInfo;
  }();
  return level;
}

void log_message(LogLevel level, const std::string& message) {
  if (level < log_level()) return;
  static const char* kTag[] = {"debug", "info", "warning", "error"};
  std::fprintf(stderr, "myriad: %s: %s\n", kTag[int(level)], message.c_str());
}

}  // namespace myriad
