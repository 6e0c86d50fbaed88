#pragma once
// The link model of `dpbench --simulate`: how long a collective over N ranks takes.
//
// Ranks fill nodes of `gpus_per_node`. Each tier (within a node, between nodes) has a
// latency alpha (seconds per algorithm step) and a bus bandwidth (nccl-tests' busbw: the
// per-rank bandwidth that makes the ring's 2(n-1)/n bytes per byte of data take
// bytes / busbw). A collective spanning nodes is bounded by the slower tier.
//   ring all-reduce:  2(n-1) alpha + 2(n-1)/n * S / busbw
//   tree all-reduce:  2 (log2(nodes) alpha_inter + (g-1) alpha_intra)
//                     + 2(n-1)/n * S / (busbw * tree_bandwidth_share)
//   reduce-scatter, all-gather: half the ring all-reduce ((n-1) steps, (n-1)/n * S), or
//   fitted on their own measurements where a report has them.
// Like NCCL, an all-reduce takes whichever of ring and tree is faster at its size.
//
// A link comes from a preset (a JSON file under benchmarks/simulate/presets, citing its
// sources: GPUs per node, fabrics, NICs, the GPU's peak FLOP/s and memory bandwidth), or
// is fitted from a `--bench=collectives` report or nccl-tests' -J JSON: per rank count, a
// least-squares line through the measured all-reduce times gives alpha and busbw, and
// between the measured sizes a collective's time is interpolated (FittedAllReduce::seconds).
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dpb::sim {

enum class Algorithm { ring, tree };
const char* algorithm_name(Algorithm a);

struct Tier {
  double alpha_s = 0;        // per algorithm step
  double bus_bandwidth = 0;  // bytes/s, nccl-tests' busbw
};

// A fitted point: all-reduce at exactly this rank count, from measurements.
struct FittedAllReduce {
  double alpha_s = 0, bus_bandwidth = 0;
  double max_residual = 0;  // largest relative error of the line over the measured sizes
  int points = 0;
  // The measured sizes (bytes, seconds; ascending), where a link was fitted from a
  // collectives report: between them the time is interpolated, since over TCP, veth and a
  // rate cap no one line holds from 1 KiB to 64 MiB (residuals of 50-90 % measured).
  // Empty: the line.
  std::vector<std::pair<double, double>> measured;
  // The all-reduce's time for `bytes` over `ranks` (for the half-ring collectives, fitted
  // on doubled times, twice theirs): between measured sizes the straight line between the
  // two around it; beyond the largest, its time plus the extra bytes at the cost per byte
  // of the last two sizes (the line's where that does not grow); below the smallest, the
  // smallest's less the line's byte cost of the difference (never below the line's
  // latency). Without measured sizes, the line.
  double seconds(double bytes, int ranks) const;
  void scale_time(double k);  // every time k times as long (latency and sizes alike)
};

// The compute a collective takes from the thread that computes beside it (transfers
// scope, measured under load): a cost per message plus one per byte, fitted on each row's
// load slowdown times its duration. A small collective costs its issuing thread a wake-up
// of the communication thread and a share of its core whatever its size; a large one the
// copies and sums of its bytes.
struct StolenCompute {
  double per_message_s = 0, per_byte_s = 0;
  int points = 0;
  double at(double bytes) const { return per_message_s + per_byte_s * bytes; }
};
// Least squares of stolen = per_message + per_byte x bytes over rows (bytes, the
// collective's time, the compute it took, the seconds its slowdown was measured over),
// each weighted by its precision: the error is in the slowdown the fit gives (the row's
// residual over its time), and a slowdown is the compute thread's rate over a window, as
// uncertain as that window is short (variance ~ 1 / window). Weighted by 1 / time^2
// alone, the many small sizes, each timed over a few tens of ms beside a 40 ms window
// alone, set the line: on two nodes at 1 Gbit/s their slowdowns ran from -0.18 to +0.59
// around zero, and the fit gave a 26.5 MB all-reduce 29 ms of stolen compute where the
// 16 and 64 MiB rows, timed over 0.8 and 2.9 s, measured 1.9 ns a byte (50 ms).
// Neither part negative.
StolenCompute fit_stolen(const std::vector<std::array<double, 4>>& rows);

struct Hardware {
  std::string gpu;
  double peak_flops = 0;        // per device, the precision the profile ran in
  double memory_bandwidth = 0;  // bytes/s per device
};

struct LinkModel {
  std::string name, source;  // what it is; where its numbers come from
  std::vector<std::string> citations;
  int gpus_per_node = 1;
  Tier intra, inter;
  double tree_bandwidth_share = 1.0;  // tree busbw as a share of ring busbw
  // Compute runs this much slower (0.25: 25 % slower) while communication shares the
  // device; fitted, see the preset. Where it applies:
  //   in_flight  from the step's first all-reduce launch to its last one's end (GPUs:
  //              NCCL's kernels hold SMs and memory bandwidth across that window);
  //   transfers  only while an all-reduce runs (CPUs: Gloo's thread takes the core).
  enum class ContentionScope { in_flight, transfers };
  double contention = 0;
  ContentionScope contention_scope = ContentionScope::in_flight;
  // In-flight scope: compute slows by this much more while a communication kernel runs
  // (NCCL's kernels hold their SMs for as long as they run, waiting on the network
  // included, so many small all-reduces over more GPUs cost more). 0 where unknown.
  double kernel_contention = 0;
  // What DDP's reducer adds to the backward per gradient, whatever the world size: its
  // hook, the copy into the bucket and back (PyTorch's 1-GPU DDP step minus its no-DDP
  // step, over the model's gradients). 0 where unknown.
  double reducer_per_gradient_s = 0;
  Hardware hardware;
  // From measurements: exact rank counts override the tiers.
  std::map<int, FittedAllReduce> fitted;
  // From measurements under load (--bench=collectives --load): an all-reduce while every
  // rank also computes, as during DDP's backward. Where fitted, an all-reduce that
  // overlaps compute takes this long, and `contention` is the measured slowdown of that
  // compute.
  std::map<int, FittedAllReduce> fitted_under_load;
  std::string contention_source;  // where the contention comes from (preset, --contention, measured)
  // Transfers scope, measured under load: the compute an all-reduce takes from the thread
  // beside it, per message and per byte it reduces. It grows with the size and the count
  // of collectives, not with how long one waits (measured in docs/simulate.md). Unset: not
  // measured (`contention` applies as it is).
  std::optional<StolenCompute> stolen;
  // The same for FSDP's collectives, from their own rows under load (bytes of the gathered
  // output, of the scattered input): each moves half an all-reduce's traffic but copies
  // and reduces on its own schedule (across hosts dpbench's reduce-scatter is an
  // all-to-all and a local sum). Unset: not measured (the all-reduce's applies).
  std::optional<StolenCompute> stolen_allgather, stolen_reduce_scatter;
  enum class Collective { allreduce, allgather, reduce_scatter };
  // How much slower compute runs while collective `op` of `bytes`, which takes `loaded_s`
  // beside compute, runs: the compute it takes over that time where measured, else
  // `contention`.
  double contention_while(double bytes, double loaded_s, Collective op = Collective::allreduce) const;
  // From measurements of the other collectives at exactly these rank counts (a
  // --bench=collectives report with allgather or reduce_scatter rows): (n-1) alpha +
  // (n-1)/n S / busbw fitted on them, instead of half the all-reduce's; idle, and under
  // load (--load) where measured.
  std::map<int, FittedAllReduce> fitted_allgather, fitted_reduce_scatter;
  std::map<int, FittedAllReduce> fitted_allgather_under_load, fitted_reduce_scatter_under_load;

  // From measurements of all-reduces each timed alone, after a pause of isolated_pause_s
  // with the link idle (--bench=collectives --isolated): what one costs that starts with
  // nothing queued before it, as a DDP step's first bucket after compute, or an FSDP
  // unit's all-gather after the last one ended, does. Over Gloo's TCP on a small VM a
  // stream of back-to-back collectives of 256 KiB cost 4-20 times that each, while two
  // in a row in training cost about the isolated time (measured in docs/simulate.md);
  // where fitted, a collective that starts on an idle channel takes it, one queued behind
  // another the back-to-back time.
  // The same of the all-gathers and reduce-scatters (fitted on doubled times, as their
  // back-to-back fits are).
  std::map<int, FittedAllReduce> fitted_isolated, fitted_allgather_isolated, fitted_reduce_scatter_isolated;
  double isolated_pause_s = 0;  // what the isolated times were measured after

  double allreduce_s(double bytes, int ranks, Algorithm* chosen = nullptr) const;
  // With nothing queued before it: the isolated fit where there is one, else allreduce_s.
  double allreduce_on_idle_link_s(double bytes, int ranks) const;
  // Collective `op` of `bytes` with nothing queued before it: its isolated fit where there
  // is one, else `otherwise` (its back-to-back time).
  double on_idle_link_s(Collective op, double bytes, int ranks, double otherwise) const;
  // While compute runs beside it: the under-load fit where there is one, else the idle
  // time stretched by the contention where the two share a core (transfers scope).
  double allreduce_under_load_s(double bytes, int ranks) const;
  double reduce_scatter_s(double bytes, int ranks) const;
  double half_allreduce_s(double bytes, int ranks) const;  // the ring all-reduce's half
  double all_gather_s(double bytes, int ranks) const;
  // Beside compute: the under-load fit of the collective itself where measured, else its
  // idle time stretched as the all-reduce's is under load.
  double all_gather_under_load_s(double bytes, int ranks) const;
  double reduce_scatter_under_load_s(double bytes, int ranks) const;
  // Point-to-point transfer between neighbouring devices (pipeline stages).
  double send_s(double bytes, bool across_nodes) const;

  nlohmann::json to_json() const;
};

// A preset by name (built in: dgx1-v100, dgx-h100, pcie-a100-25gbe, cpu-gloo-local) or a
// preset file's path. Throws dpb::Error naming the valid presets.
LinkModel load_preset(const std::string& name_or_path);
std::vector<std::string> preset_names();
LinkModel preset_from_json(const nlohmann::json& j, const std::string& document);

// Fits a link from a dpbench.collectives/1 report or nccl-tests -J output (one rank count
// per file; several files give several counts). A dpbench report recorded with --load
// gives the under-load fit of its rank count and the contention (its rows' load slowdown,
// weighted by their timed duration); on its own it serves as the idle fit too. Throws
// dpb::Error naming what is missing.
LinkModel fit_link(const std::vector<std::string>& paths, const LinkModel& base);

// Least-squares fit of t = alpha_steps * alpha + bytes_factor * S / busbw over (S, t).
FittedAllReduce fit_allreduce(const std::vector<std::pair<double, double>>& bytes_seconds, int ranks);

}  // namespace dpb::sim
