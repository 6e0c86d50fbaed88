// dpbench's CUPTI collector loaded into another process (a PyTorch job, through ctypes),
// so that its figures can be checked against an independent collector on the same
// workload: torch.profiler's (Kineto, benchmarks/trace_analysis/cupti_vs_kineto.py).
//
//   int dpb_probe_start(char* why, int n)         subscribe (0), or why not (-1)
//   int dpb_probe_stop(int64_t lo, int64_t hi,    stop, and over [lo, hi) (steady-clock ns,
//                      int steps, double* busy,   Python's time.monotonic_ns()): the GPU's
//                      double* kernels_per_step,  busy share, kernels per step and
//                      double* kernel_s,          kernel time; 0, or -1 with why
//                      char* why, int n)
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "engine/backend/device_activity.h"
#include "engine/trace/analysis.h"

namespace {

std::unique_ptr<dpb::DeviceActivity> g_probe;

void say(const std::string& text, char* why, int n) {
  if (why && n > 0) {
    std::strncpy(why, text.c_str(), static_cast<size_t>(n) - 1);
    why[n - 1] = '\0';
  }
}

}  // namespace

extern "C" int dpb_probe_start(char* why, int n) {
  try {
    std::string reason;
    g_probe = dpb::start_cupti_activity({dpb::Device::cuda(0)}, &reason);
    if (!g_probe) {
      say(reason, why, n);
      return -1;
    }
    return 0;
  } catch (const std::exception& e) {
    say(e.what(), why, n);
    return -1;
  }
}

extern "C" int dpb_probe_stop(int64_t lo, int64_t hi, int steps, double* busy, double* kernels_per_step,
                              double* kernel_s, char* why, int n) {
  try {
    if (!g_probe) {
      say("dpb_probe_start did not subscribe", why, n);
      return -1;
    }
    g_probe->stop();
    const dpb::trace::RankTimeline t = g_probe->timeline({lo, hi});
    dpb::trace::AnalysisOptions o;
    o.window = dpb::trace::Span64{lo, hi};
    const dpb::trace::RankAnalysis a = dpb::trace::analyze_rank(t, o);
    *busy = a.devices.empty() ? 0.0 : a.main().busy_share();
    int64_t kernels = 0, ns = 0;
    for (const auto& w : t.work)
      if (w.copy == dpb::trace::CopyKind::none && w.begin_ns >= lo && w.end_ns <= hi) {
        ++kernels;
        ns += w.end_ns - w.begin_ns;
      }
    *kernels_per_step = static_cast<double>(kernels) / std::max(steps, 1);
    *kernel_s = static_cast<double>(ns) * 1e-9;
    g_probe.reset();
    return 0;
  } catch (const std::exception& e) {
    say(e.what(), why, n);
    g_probe.reset();
    return -1;
  }
}
