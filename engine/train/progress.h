#pragma once
// Training progress on stderr: a tqdm-like bar (step, samples/s, loss, ETA) redrawn in
// place on a terminal, or a plain line about every 10% of the run otherwise. Only the
// process that owns the console (rank 0) creates one.
#include <cstdint>
#include <string>

namespace dpb {

enum class ProgressMode { automatic, bar, plain, none };
// "auto" | "bar" | "plain" | "none"; throws dpb::Error listing them otherwise.
ProgressMode parse_progress_mode(const std::string& s);

class Progress {
 public:
  Progress(ProgressMode mode, int64_t total_steps, int64_t samples_per_step);
  ~Progress();
  void update(int64_t step, double loss);
  void note(const std::string& line);  // a line that must not be overdrawn by the bar
  void finish();

 private:
  ProgressMode mode_;
  int64_t total_, samples_per_step_;
  int64_t start_ns_;
  int64_t last_draw_ns_ = 0;
  int64_t next_plain_ = 0;
  bool drawn_ = false;
};

}  // namespace dpb
