#include "benchmarks/dpbench/harness.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/core/file_io.h"
#include "engine/core/log.h"
#include "engine/core/stats.h"
#include "engine/data/synthetic.h"
#include "engine/models/model.h"
#include "engine/train/trainer.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

constexpr int64_t kSyntheticSamples = 60000;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string human_time(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

}  // namespace

nlohmann::json run_benchmark(const BenchOptions& o, const std::vector<std::string>& argv, std::ostream& out) {
  DPB_CHECK(o.mode == "single") << "mode '" << o.mode << "' is not available (valid: single)";
  DPB_CHECK(o.devices == "cpu") << "devices '" << o.devices << "' are not available in this build (valid: cpu)";
  DPB_CHECK(o.dataset == "synthetic") << "dataset '" << o.dataset << "' is not available (valid: synthetic)";
  DPB_CHECK(o.batch >= 1) << "--batch must be at least 1, got " << o.batch;
  DPB_CHECK(o.steps >= 1) << "--steps must be at least 1, got " << o.steps;
  DPB_CHECK(o.warmup >= 0) << "--warmup must be >= 0, got " << o.warmup;
  if (!o.json_path.empty()) check_writable(o.json_path);

  const int threads = o.threads > 0 ? o.threads : cpu::hardware_threads();
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);

  Generator init_gen(o.seed);
  auto model = build_model(o.model, init_gen);
  const ModelSpec& spec = model->spec();
  SyntheticDataset data(spec.input, spec.loss, spec.outputs, kSyntheticSamples, o.seed);

  TrainOptions t;
  t.batch = o.batch;
  t.steps = o.steps;
  t.warmup = o.warmup;
  t.seed = o.seed;
  t.optim.name = o.optimizer;
  t.optim.lr = o.lr;
  t.optim.momentum = o.momentum;
  t.optim.weight_decay = o.weight_decay;
  t.schedule = o.schedule;
  t.lr_warmup_steps = o.lr_warmup;
  t.device = Device::cpu(0);
  Trainer trainer(*model, data, t);

  log::info("training {} ({} parameters) on cpu:0 with {} thread(s), batch {}, {} steps + {} warm-up", spec.name,
            model->parameter_count(), threads, o.batch, o.steps, o.warmup);
  reset_peak_memory(Device::cpu(0));
  TrainResult result = trainer.run();

  const auto measured = result.measured();
  std::vector<double> times;
  double data_s = 0, step_s = 0;
  int64_t samples = 0;
  for (const auto& r : measured) {
    times.push_back(r.seconds());
    step_s += r.seconds();
    data_s += static_cast<double>(r.data_ns) * 1e-9;
    samples += r.samples;
  }
  const Summary st = summarize(times);
  const double throughput = static_cast<double>(o.batch) / st.median;
  const double flops_per_sample = 3.0 * static_cast<double>(model->flops_per_sample());
  const double loss_first = result.steps.front().loss, loss_last = result.steps.back().loss;

  out << fmt::format("dpbench {} | model {} | {} | batch {} | {} steps (+{} warm-up) | {} thread(s)\n", o.mode,
                     spec.name, "cpu:0", o.batch, o.steps, o.warmup, threads);
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>7} {:>12} {:>10} {:>10}\n", "world", "batch/dev",
                     "global", "median", "p10", "p90", "cv", "samples/s", "loss[0]", "loss[-1]");
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>6.1f}% {:>12.1f} {:>10.4f} {:>10.4f}\n", 1, o.batch,
                     o.batch, human_time(st.median), human_time(st.p10), human_time(st.p90), st.cv * 100, throughput,
                     loss_first, loss_last);
  if (st.outliers > 0) out << fmt::format("note: {} of {} step times are outliers (median/MAD)\n", st.outliers, st.count);

  nlohmann::json report = reports::report_header(argv);
  report["config"] = {{"mode", o.mode},
                      {"model", spec.name},
                      {"dataset", o.dataset},
                      {"devices", o.devices},
                      {"device_list", {"cpu:0"}},
                      {"batch_per_device", o.batch},
                      {"global_batch", o.batch},
                      {"precision", "fp32"},
                      {"backend", nullptr},
                      {"threads_per_device", threads},
                      {"steps", o.steps},
                      {"warmup", o.warmup},
                      {"seed", o.seed},
                      {"optimizer", {{"name", o.optimizer}, {"lr", o.lr}, {"momentum", o.momentum}}},
                      {"schedule", o.schedule},
                      {"parameters", model->parameter_count()}};
  const double achieved = flops_per_sample * throughput;
  nlohmann::json run = {{"world_size", 1},
                        {"batch_per_device", o.batch},
                        {"global_batch", o.batch},
                        {"throughput_samples_per_s", reports::number(throughput)},
                        {"step_time_s", reports::summary_json(st)},
                        {"scaling_efficiency", nullptr},
                        {"data_wait_share", reports::number(data_s / (data_s + step_s))},
                        {"loss", {{"first", reports::number(loss_first)}, {"last", reports::number(loss_last)}}},
                        {"flops_per_sample", reports::number(flops_per_sample)},
                        {"achieved_flops_per_s", reports::number(achieved)},
                        {"mfu", nullptr}};
  run["devices"] = {{{"id", "cpu:0"},
                     {"samples", samples},
                     {"busy_fraction", nullptr},
                     {"peak_memory_bytes", memory_stats(Device::cpu(0)).peak_bytes}}};
  nlohmann::json losses = nlohmann::json::array();
  for (const auto& r : result.steps) losses.push_back(reports::number(r.loss));
  run["loss_per_step"] = losses;
  report["runs"] = nlohmann::json::array({run});
  report["findings"] = nlohmann::json::array();
  if (!o.json_path.empty()) {
    reports::write_report(o.json_path, report);
    log::info("report written to {}", o.json_path);
  }
  return report;
}

int main_cli(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"dpbench: measure how fast a training setup runs, how well it scales, and why not.\n"
               "On the CPU, devices are logical CPU devices (cpu:0, cpu:1, ...), each with its own thread budget."};
  app.option_defaults()->always_capture_default();
  app.add_option("--mode", o.mode, "Parallel mode")->check(CLI::IsMember({"single"}));
  app.add_option("--model", o.model, "Model: " + join(model_names()))->check(CLI::IsMember(model_names()));
  app.add_option("--dataset", o.dataset, "Dataset")->check(CLI::IsMember({"synthetic"}));
  app.add_option("--devices", o.devices, "Device kind")->check(CLI::IsMember({"cpu"}));
  app.add_option("--batch", o.batch, "Batch size handed to the model (as DataLoader(batch_size=...))")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Measured optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "Warm-up steps, excluded from measurements")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "Threads per device (0: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seed for weights and data order");
  app.add_option("--optimizer", o.optimizer, "Optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", o.lr, "Learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay, "Weight decay (default: 0; AdamW 0.01)");
  app.add_option("--schedule", o.schedule, "Learning-rate schedule")
      ->check(CLI::IsMember({"constant", "step", "cosine"}));
  app.add_option("--lr-warmup", o.lr_warmup, "Linear learning-rate warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--json", o.json_path, "Write the JSON report (dpbench.report/1) to this path");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<std::string> args(argv, argv + argc);
  try {
    run_benchmark(o, args, std::cout);
  } catch (const Error& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace dpb::bench
