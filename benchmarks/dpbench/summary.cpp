#include "benchmarks/dpbench/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

namespace dpb::bench {

std::string human_time(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

namespace {
// fsdp and tp: each kind of collective per step (rank 0's medians).
void print_collectives(std::ostream& out, const std::vector<reports::CollectiveStepStats>& collectives) {
  for (const auto& c : collectives) {
    if (c.count == 0) continue;
    out << fmt::format("  {}: {} a step, ", c.kind, c.count);
    if (c.seconds) out << human_time(*c.seconds) << " run, ";
    if (c.waited_s) out << human_time(*c.waited_s) << " waited for (exposed)";
    out << "\n";
  }
}
}  // namespace

void print_summary(const reports::RunReport& report, const SummaryExtras& extras, std::ostream& out) {
  const auto& c = report.config;
  const auto& r = report.runs.back();
  const auto& st = r.step_time_s;
  const int64_t measured = st.count;
  out << fmt::format("dpbench {} | model {} | {} | {} | {} | batch {} | {} steps{} | {}\n", parallel_mode_name(c.mode),
                     c.model, c.dataset, extras.device_text, precision_name(c.precision), extras.batch,
                     r.steps, measured < r.steps ? fmt::format(" ({} warm-up)", r.steps - measured) : "",
                     c.devices == DeviceKind::cuda && !report.env.gpus.empty()
                         ? report.env.gpus[0].name
                         : fmt::format("{} thread(s) per device", c.threads_per_device));
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>7} {:>12} {:>10} {:>10}\n", "world", "batch/dev",
                     "global", "median", "p10", "p90", "cv", "samples/s", "loss[0]", "loss[-1]");
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>6.1f}% {:>12.1f} {:>10.4f} {:>10.4f}\n", r.world_size,
                     r.batch_per_device, r.global_batch, human_time(st.median.value_or(0)),
                     human_time(st.p10.value_or(0)), human_time(st.p90.value_or(0)), st.cv.value_or(0) * 100,
                     r.throughput_samples_per_s.value_or(0), r.loss_first.value_or(0), r.loss_last.value_or(0));
  if (r.tokens_per_sample) {
    std::string line = fmt::format("tokens: {} per sequence, {:.0f} tokens/s, {:.3g} training FLOPs per token (6N + 12LCT)",
                                   *r.tokens_per_sample, r.throughput_tokens_per_s.value_or(0),
                                   r.flops_per_token.value_or(0));
    line += r.mfu ? fmt::format(", MFU {:.1f}% of {:.0f} TFLOP/s", 100 * *r.mfu, r.peak_flops_per_s.value_or(0) / 1e12)
                  : ", MFU n/a (no known peak for this device)";
    std::string memory;
    for (const auto& d : r.devices)
      if (d.peak_memory_bytes > 0) {
        memory += fmt::format("{}{} {:.1f} MiB", memory.empty() ? "" : ", ", d.id,
                              static_cast<double>(d.peak_memory_bytes) / (1 << 20));
        if (d.peak_rss_bytes && r.ranks)  // a process per device: its own resident peak
          memory += fmt::format(" (process {:.0f} MiB)", *d.peak_rss_bytes / (1 << 20));
      }
    std::string process;
    if (!r.ranks && !r.devices.empty() && r.devices.front().peak_rss_bytes)
      process = fmt::format(" (process {:.0f} MiB resident)", *r.devices.front().peak_rss_bytes / (1 << 20));
    out << line << (memory.empty() ? "" : " | peak memory " + memory + process) << "\n";
    if (const auto& a = r.attention) {
      if (a->unfused_calls == 0) out << "attention: fused by cuDNN (flash attention)\n";
      else if (a->fused_calls == 0) out << "attention: not fused: " << a->unfused_why.value_or("") << "\n";
      else
        out << fmt::format("attention: {} forward call(s) fused, {} not: {}\n", a->fused_calls, a->unfused_calls,
                           a->unfused_why.value_or(""));
    }
  }
  if (r.accuracy)
    out << fmt::format("test: accuracy {:.2f}%, loss {:.4f} on {} samples | trained {:.2f} epoch(s) in {:.1f} s\n",
                       100 * r.accuracy->test.value_or(0), r.accuracy->test_loss.value_or(0), extras.test_samples,
                       extras.epochs_trained, r.wall_time_s.value_or(0));
  const std::string source =
      r.timeline ? trace::timeline_source_name(r.timeline->source) : trace::timeline_source_name(trace::TimelineSource::host);
  if (r.world_size > 1) {
    std::string line = "devices:";
    for (const auto& d : r.devices)
      line += fmt::format("  {} {:.0f}% busy, {} samples", d.id, 100.0 * d.busy_fraction.value_or(0), d.samples);
    out << line << fmt::format("  ({} times)\n", source);
  }
  if (mode_info(c.mode).all_reduces_gradients && r.world_size > 1 && r.ranks && !r.ranks->empty() && r.overlap) {
    const auto& m0 = r.ranks->front();
    out << fmt::format("ddp: {} bucket(s) of up to {} MiB; rank 0 all-reduce {:.2f} ms/step, {:.0f}% of it during "
                       "backward, exposed {:.2f} ms/step ({:.1f}% of the step)\n",
                       r.buckets ? r.buckets->size() : 0, c.bucket_mb.value_or(0), m0.comm_s.value_or(0) * 1e3,
                       100 * m0.overlap_ratio.value_or(0), m0.exposed_comm_s.value_or(0) * 1e3,
                       100 * r.overlap->exposed_share.value_or(0));
    if (const auto& ab = r.overlap->ab)
      out << fmt::format("ddp A/B: step {} with all-reduce, {} forward + backward without (no_sync) + {} optimizer: "
                         "{} exposed\n",
                         human_time(ab->step_s.value_or(0)), human_time(ab->step_without_comm_s.value_or(0)),
                         human_time(ab->optimizer_s.value_or(0)), human_time(ab->exposed_comm_s.value_or(0)));
  }
  if (r.fsdp && !r.fsdp->ranks.empty()) {
    const auto& f = *r.fsdp;
    const auto& m0 = f.ranks.front();
    const double mib = 1.0 / (1 << 20);
    out << fmt::format("fsdp: {} unit(s), prefetch {}, {}, all-gathered in {}; rank 0 keeps {:.1f} MiB of shards, "
                       "gradients and optimizer state ({:.1f} MiB of parameters unsharded), gathers at most {:.1f} MiB "
                       "at once\n",
                       f.units, f.prefetch, f.reshard_after_forward ? "gathered again for backward" : "kept to backward",
                       f.param_dtype,
                       static_cast<double>(m0.shard_parameter_bytes + m0.shard_gradient_bytes + m0.optimizer_state_bytes) * mib,
                       static_cast<double>(f.full_parameter_bytes) * mib,
                       static_cast<double>(m0.peak_gathered_parameter_bytes) * mib);
    print_collectives(out, f.collectives);
  }
  if (r.tp && !r.tp->ranks.empty()) {
    const auto& t = *r.tp;
    const double mib = 1.0 / (1 << 20);
    const int group = c.tensor_parallel.value_or(static_cast<int>(t.ranks.size()));
    const std::string layout =
        group == static_cast<int>(t.ranks.size())
            ? fmt::format("{} ranks each train on the whole batch", group)
            : fmt::format("{} groups of {} tensor-parallel ranks, DDP across the groups", t.ranks.size() / group, group);
    out << fmt::format("tp: {}; rank 0 holds {:.1f} MiB of parameters ({:.1f} MiB "
                       "replicated) and {:.1f} MiB of optimizer state, of {:.1f} MiB of parameters in the model\n",
                       layout, static_cast<double>(t.ranks.front().parameter_bytes) * mib,
                       static_cast<double>(t.replicated_bytes) * mib,
                       static_cast<double>(t.ranks.front().optimizer_state_bytes) * mib,
                       static_cast<double>(t.full_parameter_bytes) * mib);
    print_collectives(out, t.collectives);
  }
  if (r.pipeline && r.stages) {
    const auto& p = *r.pipeline;
    const int stages = static_cast<int>(r.stages->size());
    out << fmt::format("mp: {} schedule, {} micro-batch(es) of {}; bubble {:.1f}% measured (mean stage idle share), "
                       "{:.1f}% in theory ((p-1)/(m+p-1), p={}, m={})\n",
                       pipeline_schedule_name(p.schedule), p.micro_batch_sizes.size(),
                       p.micro_batch_sizes.empty() ? 0 : p.micro_batch_sizes.front(),
                       100 * p.bubble_measured.value_or(0), 100 * p.bubble_theory, stages, p.micro_batch_sizes.size());
    for (const auto& s : *r.stages)
      out << fmt::format("  stage {} {}: {}{} ({} parameters), idle {:.1f}%\n", s.stage, s.device, s.units.front(),
                         s.units.size() > 1 ? ".." + s.units.back() : "", s.parameters,
                         100 * s.idle_share.value_or(0));
  }
  if (st.outliers > 0) out << fmt::format("note: {} of {} step times are outliers (median/MAD)\n", st.outliers, st.count);
  if (r.op_profile) {
    double total = 0;
    for (const auto& t : *r.op_profile) total += t.seconds_per_step.value_or(0);
    out << fmt::format("op profile ({} measured steps; each op timed between device waits, so the profiled step "
                       "takes longer than the median above):\n",
                       measured);
    out << fmt::format("  {:<26} {:>10} {:>12} {:>7}\n", "op", "calls/step", "ms/step", "share");
    for (const auto& t : *r.op_profile)
      out << fmt::format("  {:<26} {:>10.1f} {:>12.3f} {:>6.1f}%\n", t.op, t.calls_per_step.value_or(0),
                         t.seconds_per_step.value_or(0) * 1e3,
                         total > 0 ? 100.0 * t.seconds_per_step.value_or(0) / total : 0.0);
  }
}

}  // namespace dpb::bench
