#pragma once
// `dpbench --simulate --from-trace=PATH`: the one-device profile of a user's own job, read
// from one rank's PyTorch profiler trace (diagnostics/dpdoctor/kineto_reader.h), so that
// the simulator predicts that job at N devices.
//
// From the trace's median profiled step (ProfilerStep#N) on the GPU that ran most:
//   phases   each piece of device work by the host call that launched it: inside
//            Optimizer.step# the optimizer; inside an op of autograd's backward (its
//            own thread) the backward; the rest of the step the forward;
//   compute  each phase's busy time on the device (the union of its kernels, copies and
//            sets), communication kernels apart;
//   gradients  from the all-reduces the backward issued (nccl:all_reduce with the size
//            record_shapes gives it, or record_param_comms' message size): each bucket is
//            ready when its all-reduce was launched, and the backward's compute launched
//            before it is what produced it; without all-reduces, from autograd's
//            AccumulateGrad events and their shapes (a one-GPU job): each parameter is
//            ready when its gradient was accumulated. For ddp each group is cut into
//            pieces of at most 1 MiB, so that --bucket-mb forms the buckets again at any
//            size; for fsdp consecutive groups are joined into units of up to
//            `unit_bytes` (a size-based wrap policy: the trace does not say the modules);
//   other    the step less the device's busy and communication time: the host's work,
//            the data wait and the launch gaps, which stay serial at every N;
//   other communication  collectives that are not gradient all-reduces (DLRM's
//            all-to-all of embeddings, a pipeline's send/recv), the part that compute did
//            not hide, measured at the trace's world size and scaled to N as an exchange
//            of every rank with every other is: a latency of the slowest tier it spans
//            and (N-1)/N of its bytes at that tier's bandwidth (none at N = 1).
// The all-reduces the trace timed (kernels matched to their host call by correlation)
// calibrate the link at the trace's world size: the link's model is scaled by their
// measured time over its prediction (which includes the wait for late ranks), at every N.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/simulate/link.h"
#include "benchmarks/simulate/profile.h"

namespace dpb::sim {

struct TraceProfile {
  StepProfile profile;           // the job on one device
  std::string file;              // the trace file read
  std::string gpu;               // deviceProperties' name ("" if the trace does not say)
  int world = 1;                 // the world size the trace was recorded in
  int rank = 0;
  int steps = 0;                 // profiled steps in the trace
  double measured_step_s = 0;    // the median profiled step, as recorded
  double allreduce_s = 0;        // the step's gradient all-reduce kernels (union), measured
  double allreduce_exposed_s = 0;  // of which compute did not hide
  double other_comm_s = 0;       // exposed other communication at `world`
  int64_t other_comm_bytes = -1; // their bytes per step (-1: the trace did not record them)
  std::string gradients_from;    // "the backward's all-reduces" | "AccumulateGrad's shapes"
  // (bytes, seconds) of each timed gradient all-reduce at `world`.
  std::vector<std::pair<double, double>> allreduce_samples;
};

// Reads `path` (a trace file, or a folder of one job's traces: rank 0's, else the first).
// Throws dpb::Error naming the file and what is missing: no step markers, no device
// events, no backward, no gradient sizes, or not a trace at all. `unit_bytes` 0: ddp's
// pieces; else fsdp's units of up to that many bytes.
TraceProfile profile_from_trace(const std::string& path, int64_t unit_bytes = 0);

// The link scaled so that the trace's all-reduces take, at its world size, what they
// measured (their total over the model's total); unchanged when the trace timed none or
// ran on one device. `factor` gets the scale (1: unchanged).
LinkModel calibrate_link(const LinkModel& link, const TraceProfile& t, double* factor);

// What the exposed other communication costs at `ranks` (0 at 1 rank).
double other_comm_at(const TraceProfile& t, const LinkModel& link, int ranks);

// The preset for the trace's GPU ("Tesla V100-SXM2-32GB" -> dgx1-v100); "" when none fits.
std::string preset_for_gpu(const std::string& gpu);

// Whether `path` is a dpbench report (a JSON document whose schema is dpbench's), which
// --from-trace reads as --profile does.
bool is_dpbench_report(const std::string& path);

}  // namespace dpb::sim
