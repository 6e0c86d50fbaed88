#pragma once
// Ranks as threads of the test process: each on its own logical CPU device, all in one
// Gloo group over an in-memory store, with a short timeout.
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"

namespace dpb::test {

// Runs fn(rank, group) on `world` ranks; returns each rank's error ("" if none).
// `options.timeout` defaults to 30 s.
std::vector<std::string> run_ranks(int world, const std::function<void(int, comm::ProcessGroup&)>& fn,
                                   comm::GroupOptions options = {});
// EXPECTs that no rank failed, naming the ones that did.
void expect_no_errors(const std::vector<std::string>& errors);
// run_ranks with one thread per logical device, EXPECTing every rank to succeed.
void run_ranks_ok(int world, const std::function<void(int, comm::ProcessGroup&)>& fn);
// `world` ranks in a data x tensor mesh of tensor-parallel groups of `tp`
// (comm::make_mesh_groups): fn(rank, its data-parallel group, its tensor-parallel group),
// EXPECTing every rank to succeed.
void run_mesh_ok(int world, int tp,
                 const std::function<void(int, comm::ProcessGroup&, comm::ProcessGroup&)>& fn);

}  // namespace dpb::test
