// Minimal leveled logging to stderr. Warnings are for things a user should see once (e.g. unknown config
// fields); info for progress. MYRIAD_LOG_LEVEL=warn|info|debug.
#pragma once

#include <string>

#include "core/error.h"

namespace myriad {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

template <class... Args>
void log_warn(const Args&... args) {
  log_message(LogLevel::kWarn, str(args...));
}
template <class... Args>
void log_info(const Args&... args) {
  log_message(LogLevel::kInfo, str(args...));
}

}  // namespace myriad
