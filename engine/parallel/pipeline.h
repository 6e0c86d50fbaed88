#pragma once
// Model (pipeline) parallelism: one process, N devices, the model cut into N stages of
// consecutive layers, each stage on its own device and worker thread.
//
// Units: the model's top-level layers, with nested Sequentials (ResNet's layer1..4)
// expanded into their children, so a cut can fall between two residual blocks. A split
// is the first unit of every stage but the first; balanced_split() picks one from
// measured per-unit times (measure_unit_costs) so the slowest stage is as fast as it
// can be.
//
// Activations go to the next stage's device and their gradients come back (the model's
// Sequentials get device boundaries, so model.forward() also runs across the stages:
// that is the naive schedule and evaluation). A training step splits the batch into M
// micro-batches (torch.chunk sizes) and runs the schedule:
//   naive  the whole batch (M = 1), one stage at a time: what the classic two-device
//          example does, every other device idle;
//   gpipe  all M forwards flow through the stages, then all M backwards (GPipe);
//   1f1b   stage s runs min(p - s - 1, M) forwards, then alternates one forward and
//          one backward, then drains the backwards (PipeDream-Flush): the same bubble as
//          GPipe with at most p - s micro-batches in flight instead of M.
// Each micro-batch runs through its own copy of the stage's layers (sharing the
// parameters, the gradients and the buffers: only the saved activations differ), its
// loss gradient scaled by its share of the batch, so the accumulated gradients are the
// whole batch's and one optimizer step follows, as on one device.
//
// Every forward (F) and backward (B) of every stage is timed: a stage's idle share over
// the step is the measured bubble, against the theory (p - 1) / (m + p - 1).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "engine/nn/loss.h"
#include "engine/parallel/device_worker.h"
#include "engine/parallel/modes.h"

namespace dpb {

struct PipelineUnit {
  std::string name;           // module path, e.g. "layer2.1"
  Module* module = nullptr;
  Sequential* owner = nullptr;  // the Sequential holding it
  size_t index = 0;           // its position there
};
std::vector<PipelineUnit> pipeline_units(Model& model);

// Contiguous partition of `cost` into `parts` non-empty stages minimising the largest
// stage cost; returns the first unit of stages 1..parts-1.
std::vector<int> balanced_split(const std::vector<double>& cost, int parts);

// Median forward + backward seconds of each unit on `sample` (a batch on the model's
// device), after one warm-up pass.
std::vector<double> measure_unit_costs(Model& model, const Tensor& sample, int repeats = 3);
// The same passes, forward and backward apart (median seconds of each), for a layer
// profile: a profiling pass of its own, not a measured training step. Each unit is timed
// on the device's own clock (ops::DeviceMarks: CUDA timing events around it on a GPU,
// the host clock on a logical CPU device), with no wait between units.
struct UnitTimes {
  std::vector<double> forward_s, backward_s, total_s;
};
UnitTimes measure_unit_times(Model& model, const Tensor& sample, int repeats = 3);

// The split a user gave (--split=layer3.0 or =6): unit indices or unit names, the first
// unit of each stage after the first; a dpb::Error lists the units when something does
// not fit.
std::vector<int> resolve_split(const std::vector<std::string>& starts, const std::vector<PipelineUnit>& units,
                               int stages);

// The automatic split: each unit's forward + backward measured on a micro-batch of
// random inputs on `device` (measure_unit_costs), then cut for the smallest slowest
// stage (balanced_split).
struct MeasuredSplit {
  std::vector<int> split;
  std::vector<double> unit_costs;  // seconds per unit
};
MeasuredSplit split_by_measured_time(Model& model, int stages, int64_t micro_batch, Device device, uint64_t seed);

struct PipelineOptions {
  std::vector<Device> devices;  // one stage per device
  std::vector<int> split;       // first unit of stages 1..N-1 (empty: set_split before training)
  PipelineSchedule schedule = PipelineSchedule::gpipe;
  int micro_batches = 1;
};

// One forward or backward of one micro-batch on one stage, in steady-clock ns: on a GPU
// its compute is timed on the device's own clock (CUDA timing events) and put onto the
// host's from an anchor at the stage's start; a hand-off to another device ends where
// its copy did.
struct PipelineEvent {
  int stage = 0;
  int micro = 0;
  char kind = 'F';  // 'F' or 'B'
  int64_t begin_ns = 0, end_ns = 0;
};

struct PipelineStepRecord {
  std::vector<PipelineEvent> events;  // in the order each stage ran them
  int64_t begin_ns = 0, end_ns = 0;   // the step's forward/backward span
  std::vector<int64_t> stage_busy_ns;
  std::vector<int64_t> micro_sizes;
  // Per stage: 1 - busy / span; and the mean over stages.
  std::vector<double> stage_idle;
  double bubble = 0;
  double theory = 0;  // (p - 1) / (m + p - 1)
};

class PipelineParallel {
 public:
  // Places every unit on its stage's device (units before split[0] on devices[0], ...).
  // Throws dpb::Error for fewer than 2 or repeated devices, a split that does not give
  // every stage at least one unit, M < 1, or naive with M > 1.
  PipelineParallel(Model& model, PipelineOptions options);
  ~PipelineParallel();

  // Forward and backward of the whole batch x (on the first stage's device) per the
  // schedule, gradients accumulated into the model's parameters (as one backward of the
  // batch accumulates them); returns the mean loss over the batch and the correct count.
  LossResult train_step(const Tensor& x, const Tensor& target);

  Model& module() { return model_; }
  const std::vector<Device>& devices() const { return o_.devices; }
  const std::vector<int>& split() const { return o_.split; }
  const std::vector<PipelineUnit>& units() const { return units_; }
  // Unit names and parameter counts of each stage.
  std::vector<std::vector<std::string>> stage_units() const;
  std::vector<int64_t> stage_parameters();
  const PipelineOptions& options() const { return o_; }
  const PipelineStepRecord& last_step() const { return last_; }

 private:
  struct Shared;
  int stage_of(size_t unit) const;
  void make_micro_copies(int micro);
  std::vector<std::pair<char, int>> stage_program(int stage, int micro) const;

  Model& model_;
  PipelineOptions o_;
  std::vector<PipelineUnit> units_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  // copies_[m][u]: micro-batch m's copy of unit u (sharing the unit's parameters).
  std::vector<std::vector<std::unique_ptr<Module>>> copies_;
  // A head tied to a parameter of an earlier stage (GPT-2's lm_head and token embedding,
  // split as Megatron-LM splits them): the head's stage computes with its own copy of the
  // weight, refreshed from the owner at the start of each step, and the copy's gradient
  // is added to the owner's at the end of the step, before the optimizer sees it.
  struct TiedCopy;
  std::unique_ptr<TiedCopy> tied_;
  PipelineStepRecord last_;
};

}  // namespace dpb
