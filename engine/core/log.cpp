#include "engine/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dpb::log {

namespace {
Level level_from_env() {
  const char* v = std::getenv("DPB_LOG_LEVEL");
  if (!v) return Level::info;
  if (!std::strcmp(v, "debug")) return Level::debug;
  if (!std::strcmp(v, "warn")) return Level::warn;
  if (!std::strcmp(v, "error")) return Level::error;
  return Level::info;
}
std::atomic<Level>& current() {
  static std::atomic<Level> l{level_from_env()};
  return l;
}
std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::string& prefix_storage() {
  static std::string p;
  return p;
}
}  // namespace

Level level() { return current().load(std::memory_order_relaxed); }
void set_level(Level l) { current().store(l); }
void set_prefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(mu());
  prefix_storage() = std::move(prefix);
}

void write(Level l, const std::string& message) {
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(mu());
  std::fprintf(stderr, "%s%s: %s\n", prefix_storage().c_str(), names[static_cast<int>(l)], message.c_str());
}

}  // namespace dpb::log
