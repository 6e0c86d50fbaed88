#pragma once
// The ways a model is trained over devices, shared by the trainer, the harness, the
// report model and the doctor: the parallel modes' registry and the pipeline schedule.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpb {

enum class ParallelMode { single, dp, ddp, pipeline, fsdp, tp };

class Model;
class ParallelStrategy;
struct StrategyOptions;
// Builds a mode's strategy (engine/parallel/strategy.h): `unit_costs` receives what a
// mode measured to place the model (the pipeline's per-unit costs), where it did.
using StrategyFactory = std::unique_ptr<ParallelStrategy> (*)(Model& model, const StrategyOptions& o,
                                                              std::vector<double>* unit_costs);

// What a mode is, written once: its name on the command line and in reports, a line for
// --help, its traits, the options only it takes and the factory of its strategy. Adding
// a mode is an entry here (modes.cpp) and its strategy (strategy.cpp). Code that must know something about a mode asks its traits
// ("does it all-reduce gradients?"), not its name.
struct ModeInfo {
  ParallelMode mode;
  const char* name;
  const char* help;
  bool distributed;            // one process per rank in a process group
  bool splits_batch;           // each rank reads and trains on its own part of the global batch
                               // (dp scatters one batch from its one process: not this)
  bool multi_device_process;   // one process drives several devices (--batch x N is the global batch)
  bool all_reduces_gradients;  // gradients averaged by all-reduce (DDP's buckets)
  bool shards_state;           // parameters, gradients and optimizer state sharded over the ranks
  bool splits_layers;          // each rank holds a part of every large layer
  bool pipelines;              // the model cut into stages over the devices
  // The command-line options only this mode takes (given under another mode, an error
  // that names this one).
  std::vector<const char*> options;
  StrategyFactory make_strategy;
};
// Every mode, in the order --help and error messages list them.
const std::vector<ModeInfo>& parallel_modes();
const ModeInfo& mode_info(ParallelMode m);
// Each mode's name with its value (for a JSON reader's choice), and the names alone.
const std::vector<std::pair<std::string_view, ParallelMode>>& parallel_mode_choices();
std::vector<std::string> parallel_mode_names();

// Modes that run one process per rank in a process group (ddp, fsdp, tp).
inline bool is_distributed(ParallelMode m) { return mode_info(m).distributed; }
// Modes whose ranks each train on their own part of the global batch (ddp, fsdp).
inline bool splits_batch(ParallelMode m) { return mode_info(m).splits_batch; }
// Modes in which one process drives several devices (dp, mp): --batch x N is the batch.
inline bool multi_device_process(ParallelMode m) { return mode_info(m).multi_device_process; }
// Modes whose ranks all work on one global batch (the pipeline's stages, tensor
// parallelism's ranks): the global batch is one rank's.
inline bool shares_one_batch(ParallelMode m) { return mode_info(m).pipelines || mode_info(m).splits_layers; }
// "single", "dp", "ddp", "mp", "fsdp", "tp".
const char* parallel_mode_name(ParallelMode m);
// Throws dpb::Error naming the valid modes.
ParallelMode parse_parallel_mode(std::string_view name);

enum class PipelineSchedule { naive, gpipe, one_f_one_b };
// "naive", "gpipe", "1f1b"; anything else is a dpb::Error listing them.
PipelineSchedule parse_pipeline_schedule(std::string_view name);
std::string pipeline_schedule_name(PipelineSchedule s);

}  // namespace dpb
