#include "tests/support/ranks.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/comm/gloo/process_group_gloo.h"

namespace dpb::test {

namespace {
// One thread per rank, each on its own logical CPU device; each rank's error ("" if none).
std::vector<std::string> run_threads(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        cpu::CpuDeviceScope scope(r);
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace

std::vector<std::string> run_ranks(int world, const std::function<void(int, comm::ProcessGroup&)>& fn,
                                   comm::GroupOptions options) {
  if (options.timeout == comm::GroupOptions{}.timeout) options.timeout = comm::Millis(30000);
  auto store = std::make_shared<comm::MemoryStore>();
  return run_threads(world, [&](int r) {
    comm::ProcessGroupGloo pg(store, r, world, options);
    fn(r, pg);
  });
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

void run_mesh_ok(int world, int tp,
                 const std::function<void(int, comm::ProcessGroup&, comm::ProcessGroup&)>& fn) {
  cpu::set_threads_per_device(1);
  comm::GroupOptions options;
  options.timeout = comm::Millis(30000);
  auto store = std::make_shared<comm::MemoryStore>();
  expect_no_errors(run_threads(world, [&](int r) {
    auto mesh = comm::make_mesh_groups("gloo", store, r, world, tp, options, Device::cpu(r));
    fn(r, *mesh.data, *mesh.tensor);
  }));
}

void run_ranks_ok(int world, const std::function<void(int, comm::ProcessGroup&)>& fn) {
  cpu::set_threads_per_device(1);
  expect_no_errors(run_ranks(world, fn));
}

}  // namespace dpb::test
