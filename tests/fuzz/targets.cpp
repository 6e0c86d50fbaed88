#include "tests/fuzz/targets.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "benchmarks/dpbench/cli.h"
#include "benchmarks/dpbench/options.h"
#include "diagnostics/dpdoctor/doctor.h"
#include "diagnostics/dpdoctor/torch_trace.h"
#include "engine/comm/store_wire.h"
#include "engine/comm/tcp_store.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint.h"
#include "engine/core/error.h"
#include "engine/data/cifar10.h"
#include "engine/data/idx.h"
#include "engine/train/safetensors.h"
#include "reports/analysis.h"
#include "benchmarks/simulate/link.h"
#include "reports/collectives_report.h"
#include "reports/model.h"
#include "reports/render_html.h"

namespace dpb::fuzz {

namespace {

namespace fs = std::filesystem;

// A scratch folder of this process, for the readers that take paths; removed when the
// process ends.
const fs::path& scratch() {
  struct Scratch {
    fs::path dir;
    Scratch() : dir(fs::temp_directory_path() / ("dpb_fuzz_" + std::to_string(::getpid()))) {
      fs::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  static const Scratch s;
  return s.dir;
}

std::string put(const std::string& name, const uint8_t* data, size_t size) {
  const fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p.string();
}

void report(const uint8_t* data, size_t size) {
  // What dpdoctor REPORT and dpreport show / html / export / compare do with a report.
  const auto r = reports::RunReport::read(put("report.json", data, size));
  std::ostringstream sink;
  doctor::print_diagnosis(doctor::diagnose(r), sink);
  reports::show_report(r, sink);
  sink << reports::render_html(r) << reports::github_benchmark(r, true).dump();
  reports::print_comparison(reports::compare_reports(r, r, 0.1), 0.1, sink);
}

void torch_trace(const uint8_t* data, size_t size) {
  std::ostringstream sink;
  // Named as the profiler names it: gzip-compressed traces end in .json.gz.
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  for (const auto& e : doctor::read_torch_traces({put(gz ? "rank0.pt.trace.json.gz" : "rank0.pt.trace.json", data, size)}))
    doctor::print_diagnosis(doctor::diagnose(e), sink);
}

void safetensors_file(const uint8_t* data, size_t size) {
  const auto f = safetensors::load(put("model.safetensors", data, size));
  double sum = 0;
  for (const auto& [name, t] : f.tensors) sum += static_cast<double>(t.numel()) + static_cast<double>(name.size());
  (void)sum;
}

void checkpoint(const uint8_t* data, size_t size) {
  // dpbench --resume: the file read as a checkpoint of the `simple` model trained with
  // Adam (the seeds are such checkpoints), metadata and optimizer state included.
  const std::string path = put("resume.safetensors", data, size);
  Generator g(0);
  auto model = build_model("simple", g);
  OptimizerOptions oo;
  oo.kind = OptimizerKind::adam;
  auto opt = make_optimizer(oo, model->parameters());
  const TrainPosition pos = load_checkpoint(path, *model, *opt);
  // A failed invariant is not a rejection: it escapes as something else than dpb::Error.
  if (pos.epoch < 0 || pos.batch < 0 || pos.global_step < 0) throw std::logic_error("a negative position was accepted");
}

// The server's side of the connection from `client_port` as the kernel sees it (state,
// bytes queued unread, socket inode: 0 while it waits in the listener's accept queue),
// for a failure's message.
std::string server_side(int server_port, const sockaddr_in& client) {
  std::ifstream in("/proc/self/net/tcp");
  std::string line;
  char want[32];
  std::snprintf(want, sizeof(want), "0100007F:%04X %08X:%04X", server_port, client.sin_addr.s_addr,
                ntohs(client.sin_port));
  while (std::getline(in, line))
    if (line.find(want) != std::string::npos) return line;
  return "no server-side socket";
}

void store_server(const uint8_t* data, size_t size) {
  // The store's server loop on a real socket: a connection sends the bytes and closes its
  // side; whatever they are, the server answers or drops it, and keeps serving its job
  // (a member admitted at the start counts up after every input).
  static comm::TcpStoreServer server("127.0.0.1", 0, "fuzz-token", std::chrono::milliseconds(2000));
  static comm::TcpStore member("127.0.0.1", server.port(), false, comm::Millis(5000), "fuzz-token");
  static int64_t count = 0;
  static uint32_t source = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // Each connection from its own loopback address (127.0.0.2 to 127.0.255.255): this side
  // closes first (it says all it has, then SHUT_WR), so each leaves a TIME_WAIT; from one
  // address, thousands of connections a second run through the ephemeral ports and the
  // kernel recycles their TIME_WAITs (tcp_tw_reuse), which once in ~10^5 inputs left a
  // connected socket with no server side at all.
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7F000002u + (source++ % 0xFFFEu));
  (void)::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto began = std::chrono::steady_clock::now();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const auto connected = std::chrono::steady_clock::now();
    size_t sent = 0, received = 0;
    while (sent < size) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);
    char buf[4096];
    for (;;) {  // until the server closes (it must: this side said all it had)
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 3000) != 1) {
        sockaddr_in local{};
        socklen_t len = sizeof(local);
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
        const auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
        // Is the server's loop still serving (its member's request answered)?
        std::string loop;
        try {
          loop = member.add("member-count-7f3a9c", 0) == count ? "its loop still serves the member" : "count lost";
        } catch (const Error& e) {
          loop = std::string("its loop does not serve the member either: ") + e.what();
        }
        throw std::logic_error("the server neither answered nor closed within 3 s (connect took " +
                               std::to_string(ms(connected - began)) + " ms from local port " +
                               std::to_string(ntohs(local.sin_port)) + "; " + std::to_string(sent) + " of " +
                               std::to_string(size) + " bytes sent, " + std::to_string(received) +
                               " received; server side: " + server_side(server.port(), local) +
                               "; " + loop + ")");
      }
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  // Whatever a stranger sent, the job's member is still served: an error here is a bug,
  // not a rejection of the input.
  try {
    if (member.add("member-count-7f3a9c", 1) != ++count) throw std::logic_error("the store lost count of its member");
  } catch (const Error& e) {
    throw std::logic_error(std::string("the store stopped serving its member: ") + e.what());
  }
}

void idx(const uint8_t* data, size_t size) {
  // The first byte says where the images file ends and the labels file begins.
  const size_t split = size == 0 ? 0 : std::min(size - 1, static_cast<size_t>(data[0]) * size / 255);
  const std::string images = put("images-idx3-ubyte", data + (size ? 1 : 0), split);
  const std::string labels = put("labels-idx1-ubyte", data + (size ? 1 + split : 0), size ? size - 1 - split : 0);
  IdxDataset ds("fuzz", images, labels, 0.5f, 0.25f);
  std::vector<float> x(static_cast<size_t>(ds.sample_shape().numel()));
  int32_t label = 0;
  for (int64_t i : {int64_t{0}, ds.size() - 1}) ds.get(i, x.data(), &label, nullptr);
}

void cifar(const uint8_t* data, size_t size) {
  const fs::path dir = scratch() / "cifar";
  fs::create_directories(dir);
  put("cifar/test_batch.bin", data, size);
  Cifar10Dataset ds(dir.string(), false);
  std::vector<float> x(3 * 32 * 32);
  int32_t label = 0;
  for (int64_t i : {int64_t{0}, ds.size() - 1}) ds.get(i, x.data(), &label, nullptr);
}

void collectives(const uint8_t* data, size_t size) {
  // As --simulate --link reads it: a dpbench collectives report or nccl-tests' -J output.
  const sim::LinkModel l = sim::fit_link({put("collectives.json", data, size)}, sim::load_preset("cpu-gloo-local"));
  for (const auto& [ranks, f] : l.fitted) (void)l.allreduce_s(1 << 20, ranks);
  (void)l.to_json().dump();
}

void nccl_tests(const uint8_t* data, size_t size) {
  // nccl-tests' -J output (all_reduce_perf and the others) as --simulate --link reads it,
  // one file per rank count, beside a second copy as a second rank count would be.
  const std::string one = put("nccl-tests.json", data, size);
  const sim::LinkModel l = sim::fit_link({one}, sim::load_preset("dgx-h100"));
  for (const auto& [ranks, f] : l.fitted) (void)l.allreduce_under_load_s(1 << 24, ranks);
  (void)l.to_json().dump();
}

void preset(const uint8_t* data, size_t size) {
  // A --hardware=PATH preset file, then what the simulator asks of a link.
  const sim::LinkModel l = sim::load_preset(put("preset.json", data, size));
  for (int ranks : {2, 8, 64}) {
    (void)l.allreduce_s(1 << 20, ranks);
    (void)l.reduce_scatter_s(1 << 20, ranks);
    (void)l.all_gather_s(1 << 20, ranks);
  }
  (void)l.send_s(1 << 20, true);
  (void)l.to_json().dump();
}

void store_wire(const uint8_t* data, size_t size) {
  // A server's view of a connection's bytes: requests one after another until one is
  // incomplete or bad; ADD's arithmetic on what they carry.
  std::string_view buf(reinterpret_cast<const char*>(data), size);
  comm::wire::Request r;
  std::string why;
  for (size_t used = 0; comm::wire::parse_request(buf, &r, &used, &why) == comm::wire::Parse::done;) {
    buf.remove_prefix(used);
    int64_t v = 0;
    (void)comm::wire::add_decimal(r.key, r.value, &v);
    if (comm::wire::encode_request(r.op, r.key, r.value).size() != used) DPB_FAIL() << "re-encoding differs";
  }
}

void dpbench_flags(const uint8_t* data, size_t size) {
  // The bytes are the words of a command line, separated by NUL or newline.
  std::vector<std::string> args{"dpbench"};
  std::string word;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) args.push_back(word);
  bench::BenchOptions o = bench::parse_options(args);
  if (o.sweep.empty()) {
    bench::validate(o);
  } else {
    for (int n : o.sweep) bench::validate(bench::sweep_point(o, n));
  }
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"report", "dpbench reports: dpdoctor REPORT, dpreport show/html/export/compare", report},
      {"torch_trace", "PyTorch profiler traces: dpdoctor --torch-trace", torch_trace},
      {"safetensors", "safetensors checkpoints", safetensors_file},
      {"checkpoint", "training checkpoints (dpbench --resume): tensors, metadata, optimizer state", checkpoint},
      {"store_server", "the TCP store's server loop, on a socket", store_server},
      {"idx", "IDX image and label files (MNIST, Fashion-MNIST)", idx},
      {"cifar", "CIFAR-10 binary batches", cifar},
      {"collectives", "--bench=collectives reports (link models)", collectives},
      {"nccl_tests", "nccl-tests' -J output (--simulate --link)", nccl_tests},
      {"preset", "hardware preset files (--hardware=PATH)", preset},
      {"store_wire", "the TCP store's wire messages", store_wire},
      {"dpbench_flags", "dpbench's command-line flags", dpbench_flags},
  };
  return all;
}

const Target* find_target(const std::string& name) {
  for (const auto& t : targets())
    if (name == t.name) return &t;
  return nullptr;
}

bool run_one(const Target& t, const uint8_t* data, size_t size, std::string* why) {
  try {
    t.run(data, size);
  } catch (const Error&) {
  } catch (const CLI::ParseError&) {
  } catch (const std::exception& e) {
    *why = std::string("escaped ") + typeid(e).name() + ": " + e.what();
    return false;
  } catch (...) {
    *why = "escaped a non-standard exception";
    return false;
  }
  return true;
}

}  // namespace dpb::fuzz
