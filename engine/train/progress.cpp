#include "engine/train/progress.h"

#include <unistd.h>

#include <cstdio>

#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace dpb {

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "auto") return ProgressMode::automatic;
  if (s == "bar") return ProgressMode::bar;
  if (s == "plain") return ProgressMode::plain;
  if (s == "none") return ProgressMode::none;
  DPB_FAIL() << "unknown progress mode '" << s << "' (valid: auto, bar, plain, none)";
}

Progress::Progress(ProgressMode mode, int64_t total_steps, int64_t samples_per_step)
    : mode_(mode), total_(total_steps), samples_per_step_(samples_per_step), start_ns_(now_ns()) {
  if (mode_ == ProgressMode::automatic) mode_ = ::isatty(STDERR_FILENO) ? ProgressMode::bar : ProgressMode::plain;
}

Progress::~Progress() { finish(); }

namespace {
std::string clock_text(double s) {
  const auto t = static_cast<int64_t>(s + 0.5);
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof(b), "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60), (long long)(t % 60));
  else std::snprintf(b, sizeof(b), "%02lld:%02lld", (long long)(t / 60), (long long)(t % 60));
  return b;
}
}  // namespace

void Progress::update(int64_t step, double loss) {
  if (mode_ == ProgressMode::none || total_ <= 0) return;
  const int64_t now = now_ns();
  const double elapsed = ns_to_s(now - start_ns_);
  const double rate = elapsed > 0 ? static_cast<double>(step * samples_per_step_) / elapsed : 0.0;
  const double eta = step > 0 ? elapsed * static_cast<double>(total_ - step) / static_cast<double>(step) : 0.0;
  if (mode_ == ProgressMode::bar) {
    if (step < total_ && now - last_draw_ns_ < 100'000'000) return;  // at most 10 redraws a second
    last_draw_ns_ = now;
    const int width = 30;
    const int filled = static_cast<int>(width * step / total_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "\r%3d%% |%s| %lld/%lld [%s<%s, %.1f samples/s, loss %.4f]  ",
                 static_cast<int>(100 * step / total_), bar.c_str(), (long long)step, (long long)total_,
                 clock_text(elapsed).c_str(), clock_text(eta).c_str(), rate, loss);
    std::fflush(stderr);
    drawn_ = true;
  } else if (step >= next_plain_ || step == total_) {
    std::fprintf(stderr, "step %lld/%lld  loss %.4f  %.1f samples/s  elapsed %s  eta %s\n", (long long)step,
                 (long long)total_, loss, rate, clock_text(elapsed).c_str(), clock_text(eta).c_str());
    next_plain_ = step + std::max<int64_t>(1, total_ / 10);
  }
}

void Progress::note(const std::string& line) {
  if (mode_ == ProgressMode::none) return;
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace dpb
