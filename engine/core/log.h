#pragma once
// Logging to stderr (results go to stdout). Level from DPB_LOG_LEVEL=debug|info|warn|error.
// A process-wide prefix (e.g. "[rank 1] ") can be set once ranks are known.
#include <fmt/format.h>

#include <string>

namespace dpb::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

Level level();
void set_level(Level l);
void set_prefix(std::string prefix);
void write(Level l, const std::string& message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dpb::log
