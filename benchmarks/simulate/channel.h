#pragma once
// The simulator's communication channel (benchmarks/simulate/simulator.cpp's fsdp and
// tp): one channel beside one compute thread, as Gloo's thread or NCCL's stream runs a
// rank's collectives.
#include <deque>
#include <string>
#include <vector>

#include "benchmarks/simulate/link.h"
#include "benchmarks/simulate/simulator.h"

namespace dpb::sim {

// One communication channel beside one compute thread: collectives run one at a time in
// the order issued; compute and a running collective slow each other as under ddp.
class Channel {
 public:
  // `ranks`: the collectives' rank count.
  Channel(const LinkModel& link, int ranks) : link_(link), ranks_(ranks) {}

  // Queues a collective of `idle_s` alone (back to back), `loaded_s` beside compute, over
  // `bytes`; returns its id. One issued with nothing queued before it takes the link's
  // isolated time where measured.
  size_t issue(double idle_s, double loaded_s, double bytes, std::string what,
               LinkModel::Collective op = LinkModel::Collective::allreduce, std::string unit = "") {
    const double stretch = idle_s > 0 ? loaded_s / idle_s : 1.0;
    if (pending_.empty()) idle_s = link_.on_idle_link_s(op, bytes, ranks_, idle_s);
    ops_.push_back({idle_s, stretch, link_.contention_while(bytes, loaded_s, op), std::move(what), false});
    issued.push_back({op == LinkModel::Collective::allgather        ? "all-gather"
                      : op == LinkModel::Collective::reduce_scatter ? "reduce-scatter"
                                                                    : "all-reduce",
                      std::move(unit), bytes});
    comm_s += idle_s;
    const size_t id = ops_.size() - 1;
    if (pending_.empty()) left_ = ops_[id].idle_s;
    pending_.push_back(id);
    return id;
  }
  bool done(size_t id) const { return ops_[id].done; }
  // Compute of `work` seconds (at full speed), with the channel running beside it.
  void compute(double work) {
    const bool transfers = link_.contention_scope == LinkModel::ContentionScope::transfers;
    while (work > 0) {
      if (pending_.empty()) {
        t += work;
        return;
      }
      const double slow = 1 + ops_[pending_.front()].contention + (transfers ? 0.0 : link_.kernel_contention);
      const double rate = 1 / slow, comm_rate = 1 / ops_[pending_.front()].stretch;
      const double compute_dt = work / rate, comm_dt = left_ / comm_rate;
      const double dt = std::min(compute_dt, comm_dt);
      t += dt;
      overlap_s += dt;
      work -= dt * rate;
      left_ -= dt * comm_rate;
      if (compute_dt >= comm_dt) finish_front();
      if (compute_dt <= comm_dt) work = 0;
    }
  }
  // The training thread waits for `id` (everything queued before it runs alone).
  void wait(size_t id) {
    while (!ops_[id].done) {
      t += left_;
      exposed_s += left_;
      last_waited = ops_[pending_.front()].what;
      finish_front();
    }
  }
  void wait_all() {
    if (!pending_.empty()) wait(pending_.back());
  }

  double t = 0, comm_s = 0, overlap_s = 0, exposed_s = 0;
  std::string last_waited;
  std::vector<SimPoint::Collective> issued;

 private:
  struct Op {
    double idle_s, stretch, contention;
    std::string what;
    bool done;
  };
  void finish_front() {
    ops_[pending_.front()].done = true;
    pending_.pop_front();
    left_ = pending_.empty() ? 0 : ops_[pending_.front()].idle_s;
  }
  const LinkModel& link_;
  int ranks_;
  std::vector<Op> ops_;
  std::deque<size_t> pending_;
  double left_ = 0;
};

}  // namespace dpb::sim
