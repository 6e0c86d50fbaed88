// The dpbench binary end to end: a run writes a report with the promised fields;
// bad input gives one clear line on stderr and a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/device_info.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"
#include "tests/data/data_files.h"

namespace {

namespace test = dpb::test;

using test::checked_report;
using test::Proc;
using test::slurp;

Proc run(const std::string& args) { return test::run_command(test::binary("DPBENCH_BIN", DPBENCH_BIN) + " " + args); }

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(DpbenchCli, WritesReportWithThroughputAndStepTime) {
  const std::string json = std::filesystem::temp_directory_path() / ("dpb_report_" + std::to_string(::getpid()) + ".json");
  const Proc r = run("--mode=single --model=mlp --batch=8 --steps=4 --warmup=1 --threads=1 --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("samples/s"), std::string::npos) << r.out;
  const auto rep = checked_report(json);
  EXPECT_EQ(rep["schema"], "dpbench.report/1");
  EXPECT_EQ(rep["config"]["mode"], "single");
  EXPECT_EQ(rep["config"]["model"], "mlp");
  EXPECT_EQ(rep["config"]["global_batch"], 8);
  const auto& run0 = rep["runs"][0];
  EXPECT_GT(run0["throughput_samples_per_s"].get<double>(), 0.0);
  const double median = run0["step_time_s"]["median"].get<double>();
  EXPECT_GT(median, 0.0);
  EXPECT_NEAR(run0["throughput_samples_per_s"].get<double>(), 8.0 / median, 1e-6 * 8.0 / median);
  EXPECT_EQ(run0["step_time_s"]["count"], 4);
  EXPECT_EQ(run0["loss_per_step"].size(), 5u);
  EXPECT_EQ(run0["devices"][0]["samples"], 40);  // every step, warm-up included
  EXPECT_GT(run0["devices"][0]["peak_memory_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(rep["tool"]["name"], "dpbench");
  EXPECT_TRUE(rep["env"].contains("onednn"));
  std::remove(json.c_str());
}

TEST(DpbenchCli, UnknownModelListsValidChoices) {
  const Proc r = run("--model=resnet152");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("resnet152"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lenet"), std::string::npos) << r.err;
}

// A language model's bad input, each one line naming what was wrong and the limit or the
// valid choices, before any training.
TEST(DpbenchCli, LanguageModelInputMistakesAreNamed) {
  struct Case {
    std::string args, expect;
  };
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (const Case& c : {Case{"--model=gpt2-tiny --data=text:", "text:PATH needs a file"},
                        Case{"--model=gpt2-tiny --data=shakespeare", "text:PATH, synthetic, fashion-mnist"},
                        Case{"--model=gpt2-tiny --data=text:/nonexistent.txt", "cannot open '/nonexistent.txt'"},
                        Case{"--model=gpt2-tiny --data=text:" + self, "a binary file, not text"},
                        Case{"--model=gpt2-tiny --seq=300", "1 to 256 tokens, got 300 (--seq)"},
                        Case{"--model=lenet --data=text:/usr/share/common-licenses/GPL-3", "for the language models"},
                        Case{"--model=gpt2-tiny --data=synthetic --batch=16000000", "lower --batch or --seq"}}) {
    const Proc r = run(c.args + " --progress=none --steps=1");
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
    EXPECT_LE(lines(r.err), 2) << c.args << ": " << r.err;
  }
}

TEST(DpbenchCli, ZeroBatchIsRejected) {
  const Proc r = run("--batch=0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--batch"), std::string::npos) << r.err;
  EXPECT_LE(lines(r.err), 2) << r.err;
}

TEST(DpbenchCli, CollectiveSizesTakeNcclTestsSuffixes) {
  const std::string json = test::temp_path("sizes.json");
  const Proc r = run("--bench=collectives --gpus=1 --ops=allreduce -b 4K -e 16K -n 2 --warmup=0 --threads=1 --json=" +
                     json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  4096 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  16384 "), std::string::npos) << r.out;
  std::remove(json.c_str());
  // A unit it does not know names the ones it does; sizes stay within 1 byte and 1 TiB.
  const Proc unit = run("--bench=collectives -b 1x");
  EXPECT_NE(unit.code, 0);
  EXPECT_NE(unit.err.find("--min-bytes"), std::string::npos) << unit.err;
  EXPECT_NE(unit.err.find("kib"), std::string::npos) << unit.err;
  for (const char* bad : {"-b 0", "-e 2T"}) {
    const Proc p = run(std::string("--bench=collectives ") + bad);
    EXPECT_NE(p.code, 0) << bad;
    EXPECT_NE(p.err.find("not in range 1 to 1099511627776"), std::string::npos) << bad << ": " << p.err;
  }
}

TEST(DpbenchCli, UnwritableReportPathFailsBeforeWork) {
  const Proc r = run("--model=mlp --steps=1 --json=/nonexistent_dpb_dir/r.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("training"), std::string::npos) << "must fail before training: " << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

TEST(DpbenchCli, AFileSizeLimitIsAnErrorNotASignal) {
  // Under `ulimit -f` the write that crosses the limit raised SIGXFSZ and the process died
  // of it, saying nothing; now the write fails and the error says "File too large".
  const std::string json = test::temp_path("cli_fsize") + ".json";
  const Proc r = test::run_command("ulimit -f 16; " + test::binary("DPBENCH_BIN", DPBENCH_BIN) +
                                   " --model=mlp --steps=2 --warmup=0 --threads=1 --json=" + json + " --save=" +
                                   json + ".safetensors; echo exit=$?");
  const size_t at = r.out.find("exit=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const int code = std::atoi(r.out.c_str() + at + 5);
  EXPECT_TRUE(code == 1 || code == 2) << "a clear error, not death by a signal (153): " << code << "\n" << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  std::remove(json.c_str());
  std::remove((json + ".safetensors").c_str());
}

TEST(DpbenchCli, TrainsOnIdxFilesAndReportsTestAccuracy) {
  const auto dir = std::filesystem::temp_directory_path() / ("dpb_cli_idx_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  dpb::testing::write_idx(dir, "train", 64, 28, 28, true);
  dpb::testing::write_idx(dir, "t10k", 20, 28, 28, false);
  const std::string json = (dir / "r.json").string(), ckpt = (dir / "c.safetensors").string();
  Proc r = run("--model=lenet --dataset=mnist --data-dir=" + dir.string() +
                 " --epochs=2 --batch=16 --warmup=1 --threads=1 --workers=2 --progress=plain --json=" + json +
                 " --save=" + ckpt);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("test: accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("epoch 2:"), std::string::npos) << r.err;
  auto rep = checked_report(json);
  const double acc = rep["runs"][0]["accuracy"]["test"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  EXPECT_EQ(rep["runs"][0]["steps"], 8);
  EXPECT_EQ(rep["runs"][0]["epochs"].size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(ckpt));
  // Resuming at the end of --epochs has nothing left to do: a clear error.
  r = run("--model=lenet --dataset=mnist --data-dir=" + dir.string() + " --epochs=2 --batch=16 --resume=" + ckpt);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no training step ran"), std::string::npos) << r.err;
  // A truncated dataset file is named.
  std::filesystem::resize_file(dir / "t10k-labels-idx1-ubyte", 12);
  r = run("--model=lenet --dataset=mnist --data-dir=" + dir.string() + " --steps=1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("t10k-labels-idx1-ubyte' is truncated"), std::string::npos) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(DpbenchCli, DataParallelReportsWhatEachDeviceDid) {
  const std::string base = std::filesystem::temp_directory_path() / ("dpb_dp_" + std::to_string(::getpid()));
  for (const std::string forward : {"scatter", "bypass"}) {
    const std::string json = base + forward + ".json";
    const Proc r = run("--mode=dp --gpus=2 --model=mlp --batch=8 --steps=3 --warmup=1 --threads=1 --dp-forward=" +
                         forward + " --json=" + json);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rep = checked_report(json);
    const auto& devs = rep["runs"][0]["devices"];
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_EQ(rep["runs"][0]["world_size"], 2);
    EXPECT_EQ(rep["config"]["device_list"][1], "cpu:1");
    if (forward == "scatter") {
      EXPECT_EQ(devs[0]["samples"], 16);
      EXPECT_EQ(devs[1]["samples"], 16);
      EXPECT_GT(devs[1]["busy_fraction"].get<double>(), 0.0);
      EXPECT_EQ(rep["runs"][0]["dp"]["scatter_calls"], 4);
    } else {
      EXPECT_EQ(devs[0]["samples"], 32);
      EXPECT_EQ(devs[1]["samples"], 0);
      EXPECT_EQ(devs[1]["busy_fraction"].get<double>(), 0.0);
      EXPECT_EQ(rep["runs"][0]["dp"]["scatter_calls"], 0);
    }
    std::remove(json.c_str());
  }
  const std::string json = base + "list.json";
  const Proc list = run("--mode=dp --gpus=2 --model=mlp --batch=8 --steps=3 --warmup=1 --threads=1 --dp-input=list "
                          "--json=" + json);
  ASSERT_EQ(list.code, 0) << list.err;
  const auto rep = checked_report(json);
  EXPECT_EQ(rep["runs"][0]["devices"][0]["samples"], 32);  // 4 steps x the whole batch, on each device
  EXPECT_EQ(rep["runs"][0]["devices"][1]["samples"], 32);
  EXPECT_EQ(rep["runs"][0]["dp"]["input"], "list");
  std::remove(json.c_str());
  const Proc bad = run("--mode=single --gpus=2");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--mode=dp"), std::string::npos) << bad.err;
}

TEST(DpbenchCli, ModelParallelReportsStagesAndTheBubble) {
  const std::string json = std::filesystem::temp_directory_path() / ("dpb_mp_" + std::to_string(::getpid()) + ".json");
  const Proc r = run("--mode=mp --gpus=3 --model=mlp --batch=12 --steps=3 --warmup=1 --threads=1 --schedule=1f1b "
                       "--micro-batches=4 --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("mp: 1f1b schedule, 4 micro-batch(es) of 3"), std::string::npos) << r.out;
  const auto rep = checked_report(json);
  const auto& run0 = rep["runs"][0];
  ASSERT_EQ(run0["stages"].size(), 3u);
  int64_t params = 0;
  for (const auto& s : run0["stages"]) params += s["parameters"].get<int64_t>();
  EXPECT_EQ(params, rep["config"]["parameters"].get<int64_t>());
  EXPECT_EQ(run0["pipeline"]["split"].size(), 2u);
  EXPECT_EQ(run0["pipeline"]["split_by"], "measured time");
  EXPECT_EQ(run0["pipeline"]["unit_costs"].size(), 6u);
  EXPECT_NEAR(run0["pipeline"]["bubble"]["theory"].get<double>(), 2.0 / 6.0, 1e-12);
  EXPECT_EQ(run0["pipeline"]["last_step_events"].size(), 24u);  // 3 stages x 4 micro-batches x (F, B)
  for (const auto& d : run0["devices"]) EXPECT_EQ(d["samples"], 48);  // every stage sees every sample
  std::remove(json.c_str());

  // An explicit split by name, the naive schedule, and the mistakes.
  const Proc named = run("--mode=mp --gpus=2 --model=lenet --batch=8 --steps=2 --warmup=0 --threads=1 "
                           "--schedule=naive --split=fc1");
  ASSERT_EQ(named.code, 0) << named.err;
  EXPECT_NE(named.out.find("stage 1 cpu:1: fc1..fc3"), std::string::npos) << named.out;
  const Proc bad_split = run("--mode=mp --gpus=2 --model=lenet --split=fc9");
  EXPECT_NE(bad_split.code, 0);
  EXPECT_NE(bad_split.err.find("7 fc1"), std::string::npos) << bad_split.err;
  const Proc naive_micro = run("--mode=mp --gpus=2 --model=lenet --schedule=naive --micro-batches=4");
  EXPECT_NE(naive_micro.code, 0);
  EXPECT_NE(naive_micro.err.find("--schedule=gpipe"), std::string::npos) << naive_micro.err;
  const Proc one = run("--mode=mp --gpus=1 --model=lenet");
  EXPECT_NE(one.code, 0);
  EXPECT_NE(one.err.find("--gpus=2 or more"), std::string::npos) << one.err;
  // Every schedule trains what one device trains.
  for (const std::string sched : {"naive", "gpipe", "1f1b"}) {
    const Proc v = run("--mode=mp --gpus=2 --model=lenet --batch=8 --threads=1 --verify --verify-steps=2 "
                         "--schedule=" + sched);
    EXPECT_EQ(v.code, 0) << sched << ": " << v.out << v.err;
    EXPECT_NE(v.out.find("PASS"), std::string::npos) << v.out;
  }
}

TEST(DpbenchCli, VerifyComparesAModeWithSingleDeviceTraining) {
  Proc r = run("--mode=dp --gpus=3 --model=lenet --batch=7 --threads=1 --verify --verify-steps=3");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  // The same run held to an impossible tolerance fails, with a non-zero exit.
  r = run("--mode=dp --gpus=3 --model=lenet --batch=7 --threads=1 --verify --verify-steps=3 --verify-tolerance=1e-15");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
}

// The fault-injection and placement flags dpdoctor's scenarios use.
// A number out of range says the range in words a person reads (CLI11's own check named
// the largest double with all its 309 digits), and a text corpus that is a directory
// names the path and the flag.
TEST(DpbenchCli, NumbersAndTextPathsAreCheckedInPlainWords) {
  for (const auto& [flags, says] : {std::pair<std::string, std::string>{"--model=gpt2-tiny --seq=0", "--seq: must be at least 1, got 0"},
                                    {"--mode=mp --gpus=2 --model=mlp --micro-batches=0", "must be at least 1, got 0"},
                                    {"--model=mlp --epochs=-1", "--epochs: must be at least 0, got -1"},
                                    {"--mode=ddp --gpus=2 --model=mlp --verify --verify-tolerance=0", "must be above 0, got 0"}}) {
    const Proc r = run(flags + " --steps=1");
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.err.find(says), std::string::npos) << flags << ": " << r.err;
    EXPECT_LT(r.err.size(), 300u) << r.err;
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  const Proc t = run("--model=gpt2-tiny --data=text:" + dir + " --steps=1");
  EXPECT_NE(t.code, 0);
  EXPECT_NE(t.err.find("'" + dir + "' is a directory; --data=text:PATH names one text file"), std::string::npos) << t.err;
}

TEST(DpbenchCli, ScenarioFlagsAreCheckedBeforeWork) {
  for (const char* bad : {"--straggler=abc:5", "--straggler=1:30x", "--straggler=1", "--straggler=1:0"}) {
    const Proc r = run(std::string("--mode=ddp --gpus=2 --model=mlp --steps=1 ") + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("expected RANK:MS"), std::string::npos) << bad << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
  Proc r = run("--mode=ddp --gpus=2 --model=mlp --steps=1 --straggler=2:10");
  EXPECT_NE(r.err.find("there are 2 rank(s)"), std::string::npos) << r.err;
  r = run("--mode=dp --gpus=2 --model=mlp --steps=1 --straggler=1:10");
  EXPECT_NE(r.err.find("--straggler is for --mode=ddp"), std::string::npos) << r.err;
  r = run("--mode=dp --gpus=2 --model=mlp --steps=1 --device-map=same");
  EXPECT_NE(r.err.find("--device-map is for --mode=ddp"), std::string::npos) << r.err;
  // --verify writes no report: a --json beside it would be silently left unwritten.
  for (const char* out : {"--json=/tmp/dpb_verify_report.json", "--trace=/tmp/dpb_verify_trace.json"}) {
    r = run(std::string("--mode=ddp --gpus=2 --model=mlp --verify ") + out);
    EXPECT_EQ(r.code, 2) << out;
    EXPECT_NE(r.err.find("--verify compares against single-device training and writes no report or trace"),
              std::string::npos)
        << r.err;
  }
  r = run("--mode=ddp --gpus=2 --model=mlp --steps=1 --device-map=all");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("spread"), std::string::npos) << "valid choices listed: " << r.err;
  for (const char* bad : {"--hang-rank=1", "--hang-rank=x:3"}) {
    r = run(std::string("--mode=ddp --gpus=2 --model=mlp --steps=1 ") + bad);
    EXPECT_NE(r.err.find("expected RANK:STEP"), std::string::npos) << bad << ": " << r.err;
  }
  r = run("--mode=ddp --gpus=2 --model=mlp --steps=1 --hang-rank=2:3");
  EXPECT_NE(r.err.find("a rank below 2"), std::string::npos) << r.err;
}

// NCCL's limits are named from the flags alone, before any GPU is looked for, so the
// same message comes on a machine without one.
TEST(DpbenchCli, NcclMistakesAreNamedBeforeLookingForGpus) {
  Proc r = run("--mode=ddp --gpus=2 --devices=cuda --backend=nccl --device-map=same --model=mlp --steps=1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("NCCL refuses"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--backend=gloo"), std::string::npos) << r.err;
  r = run("--mode=ddp --gpus=2 --devices=cuda --backend=nccl --debug-collectives --model=mlp --steps=1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--debug-collectives"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--backend=gloo"), std::string::npos) << r.err;
}

TEST(DpbenchCli, UnknownModeListsValidChoices) {
  const Proc r = run("--mode=zero3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("single"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fsdp"), std::string::npos) << r.err;
}

}  // namespace

namespace {

TEST(DpbenchCli, PrecisionAndDeviceFlagsAreCheckedBeforeWork) {
  Proc r = run("--model=mlp --precision=bf16");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--precision=bf16 needs --devices=cuda"), std::string::npos) << r.err;
  r = run("--model=mlp --precision=fp16");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("bf16"), std::string::npos) << "valid choices listed: " << r.err;
  r = run("--model=mlp --devices=tpu");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << "valid choices listed: " << r.err;
  r = run("--mode=ddp --gpus=2 --model=mlp --devices=cuda --logical-gpus");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--logical-gpus places the devices of --mode=dp or --mode=mp"), std::string::npos) << r.err;
  r = run("--mode=dp --gpus=2 --model=mlp --logical-gpus");
  EXPECT_NE(r.err.find("it needs --devices=cuda"), std::string::npos) << r.err;
  r = run("--model=mlp --cuda-graph");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--cuda-graph needs --devices=cuda"), std::string::npos) << r.err;
  // A device clock asked for by name: on CPU devices the host clock is theirs (refused);
  // on GPUs each source runs and the report names it.
  r = run("--model=mlp --device-timing=cupti");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("on logical CPU devices the host clock is the device's"), std::string::npos) << r.err;
  for (const char* timing : {"cupti", "events"}) {
    r = run(std::string("--model=mlp --devices=cuda --steps=3 --warmup=1 --progress=none --device-timing=") + timing);
    if (dpb::cuda_info().gpus.empty()) {
      EXPECT_NE(r.code, 0);
      EXPECT_NE(r.err.find(dpb::cuda_info().built ? "CUDA device(s) visible" : "this build has no CUDA backend"),
                std::string::npos)
          << r.err;
    } else if (std::string(timing) == "events" || r.err.find("CUPTI could not subscribe") == std::string::npos) {
      EXPECT_EQ(r.code, 0) << r.err;
    }
  }
  r = run("--model=mlp --device-timing=cycles");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("events"), std::string::npos) << "valid choices listed: " << r.err;
  if (dpb::cuda_info().gpus.empty()) {
    r = run("--model=mlp --devices=cuda --steps=1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(dpb::cuda_info().built ? "CUDA device(s) visible" : "this build has no CUDA backend"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("training"), std::string::npos) << "must fail before training: " << r.err;
  }
}

TEST(DpbenchCli, OpProfileShowsWhereTheStepGoes) {
  const std::string json =
      std::filesystem::temp_directory_path() / ("dpb_opprof_" + std::to_string(::getpid()) + ".json");
  const Proc r = run("--model=lenet --batch=8 --steps=3 --warmup=1 --threads=1 --op-profile --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("op profile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("conv2d_forward"), std::string::npos) << r.out;
  const auto rep = checked_report(json);
  const auto& prof = rep["runs"][0]["op_profile"];
  ASSERT_TRUE(prof.is_array() && !prof.empty());
  bool conv = false;
  for (const auto& row : prof) {
    EXPECT_GT(row["seconds_per_step"].get<double>(), 0.0);
    if (row["op"] == "conv2d_forward") {
      conv = true;
      EXPECT_DOUBLE_EQ(row["calls_per_step"].get<double>(), 2.0);  // LeNet's two convolutions
    }
  }
  EXPECT_TRUE(conv);
  std::remove(json.c_str());
}

}  // namespace
