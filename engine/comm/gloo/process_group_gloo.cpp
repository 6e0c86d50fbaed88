#include "engine/comm/gloo/process_group_gloo.h"

#include <algorithm>

#include "engine/comm/gloo/gloo_rendezvous.h"
#include "engine/comm/gloo/shm_allreduce.h"
#include "engine/comm/net_address.h"
#include "engine/core/log.h"

#include <sched.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/alltoall.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <cstdlib>
#include <sstream>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace dpb::comm {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return &gloo::max<float>;
    case ReduceOp::min:
      return &gloo::min<float>;
    case ReduceOp::sum:
    case ReduceOp::avg:
      return &gloo::sum<float>;
  }
  return &gloo::sum<float>;
}

constexpr uint64_t kP2pSlot = uint64_t{1} << 56;

// Gloo's all-reduce algorithm by size: bcube (recursive halving/doubling: fewer steps)
// below 32 MiB, ring above, where its pipelining wins. Measured with 2 ranks on one
// host against torch.distributed's default (ring), reports/results/collectives-*.md.
// DPB_GLOO_ALLREDUCE=ring|bcube|auto overrides (as NCCL_ALGO does for NCCL).
gloo::AllreduceOptions::Algorithm allreduce_algorithm(size_t bytes) {
  static const std::string forced = [] {
    const char* v = std::getenv("DPB_GLOO_ALLREDUCE");
    const std::string s = v ? v : "auto";
    DPB_CHECK(s == "auto" || s == "ring" || s == "bcube")
        << "DPB_GLOO_ALLREDUCE='" << s << "' (valid: auto, ring, bcube)";
    return s;
  }();
  if (forced == "ring") return gloo::AllreduceOptions::Algorithm::RING;
  if (forced == "bcube") return gloo::AllreduceOptions::Algorithm::BCUBE;
  return bytes < (size_t{32} << 20) ? gloo::AllreduceOptions::Algorithm::BCUBE
                                    : gloo::AllreduceOptions::Algorithm::RING;
}

void check_f32(const char* op, const Tensor& t) {
  DPB_CHECK(t.defined() && t.dtype() == DType::f32 && t.layout() == Layout::plain)
      << op << ": the gloo backend takes plain F32 tensors, got "
      << (t.defined() ? std::string(dtype_name(t.dtype())) + " " + layout_name(t.layout()) : "an undefined tensor");
}

// A tensor's values on the host for Gloo, and back: CPU tensors are used in place; CUDA
// tensors are staged through page-locked memory (after the device finished writing them;
// the copy back is queued on the device's stream, the pinned block reserved until done).
struct Staged {
  Tensor device, host;
  explicit Staged(const Tensor& t) : device(t) {
    if (t.device().is_cuda()) {
      ops::synchronize(t.device());
      host = Tensor::empty_pinned(t.shape(), t.dtype());
      host.copy_from(t);
    } else {
      host = t;
    }
  }
  float* data() const { return host.data(); }
  void copy_back() {
    if (!host.shares_storage_with(device)) device.copy_from(host);
  }
};

class GlooWork : public Work {
 public:
  GlooWork(std::shared_ptr<ProcessGroupGloo::Call> call, Millis timeout, Millis spin, GroupHealth* health, int rank)
      : call_(std::move(call)), timeout_(timeout), spin_(spin), health_(health), rank_(rank) {}
  void wait(Millis timeout) override;
  bool completed() override;
  int64_t started_ns() const override;
  int64_t finished_ns() const override;

 private:
  std::shared_ptr<ProcessGroupGloo::Call> call_;
  Millis timeout_, spin_;
  GroupHealth* health_;
  int rank_;
};

}  // namespace

struct ProcessGroupGloo::Call {
  const char* op = "";
  int64_t seq = 0;
  int64_t numel = 0;
  int root = -1;
  ReduceOp rop = ReduceOp::sum;
  std::function<void(gloo::Context&, uint32_t tag)> run;
  // completion
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> finished{false};  // done, readable without the lock
  std::string error;
  int64_t started_ns = 0, finished_ns = 0;
  void finish(std::string err) {
    {
      std::lock_guard<std::mutex> lock(mu);
      error = std::move(err);
      done = true;
      finished_ns = now_ns();
    }
    finished.store(true, std::memory_order_release);
    cv.notify_all();
  }
};

namespace {

void GlooWork::wait(Millis timeout) {
  // Gloo's own timeout ends a stuck call; this bound is a little longer, so the
  // error normally comes from the call itself with the diagnosis.
  const Millis bound = timeout.count() > 0 ? timeout : timeout_ + Millis(10000);
  // Poll, yielding the core to the threads that run the collective, before sleeping:
  // this rank's core stays awake for the reply (see GroupOptions::spin). Also where the
  // communication thread polls shared memory itself: sleeping here instead cost the MLP's
  // DDP step 0.1 ms of wake-up per all-reduce on a 2-vCPU VM (E(2) 0.72 against 0.75).
  // The poll counts against the wait's bound.
  const auto deadline = std::chrono::steady_clock::now() + bound;
  const auto poll_until = std::chrono::steady_clock::now() + std::min<Millis>(spin_, bound);
  while (!call_->finished.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < poll_until) ::sched_yield();
  std::unique_lock<std::mutex> lock(call_->mu);
  if (!call_->cv.wait_until(lock, deadline, [&] { return call_->done; })) {
    const std::string op = call_->op;
    const int64_t seq = call_->seq;
    lock.unlock();
    DPB_FAIL() << op << " #" << seq << " did not complete within " << bound.count() << " ms on rank " << rank_ << ": "
               << health_->diagnose(seq, op);
  }
  if (!call_->error.empty()) throw Error(call_->error);
}

bool GlooWork::completed() {
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->done;
}

int64_t GlooWork::started_ns() const {
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->started_ns;
}

int64_t GlooWork::finished_ns() const {
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->done ? call_->finished_ns : 0;
}

// A p2p Work: the buffer was posted when the call was made; wait() waits for it.
class P2pWork : public Work {
 public:
  P2pWork(std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool is_send, int peer, Staged staged, Millis timeout,
          int rank)
      : buf_(std::move(buf)), send_(is_send), peer_(peer), staged_(std::move(staged)), timeout_(timeout), rank_(rank) {}
  void wait(Millis timeout) override {
    if (done_) return;
    const Millis bound = timeout.count() > 0 ? timeout : timeout_;
    try {
      if (send_) buf_->waitSend(bound);
      else buf_->waitRecv(bound);
    } catch (const std::exception& e) {
      DPB_FAIL() << (send_ ? "send to" : "recv from") << " rank " << peer_ << " failed on rank " << rank_ << ": "
                 << e.what();
    }
    if (!send_) staged_.copy_back();
    done_ = true;
  }
  bool completed() override { return done_; }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  bool send_;
  int peer_;
  Staged staged_;
  Millis timeout_;
  int rank_;
  bool done_ = false;
};

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, GroupOptions options)
    : ProcessGroup(rank, size, std::move(options)), store_(std::move(store)) {
  DPB_CHECK(size >= 1 && rank >= 0 && rank < size) << "gloo: rank " << rank << " outside a group of " << size;
  // Gloo's TCP pairs write to their sockets without MSG_NOSIGNAL, so a peer that dies mid-
  // collective raises SIGPIPE here and would kill this rank before it could say which peer
  // failed. Ignored (as a Python process running torch.distributed has it), the write fails
  // with EPIPE and the collective reports the peer. A handler the program installed is kept.
  {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  }
  // Gloo is given a numeric address: a name it cannot resolve crashes its device.
  std::string host = options_.host;
  if (host.empty()) {
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    host = ifname && *ifname ? interface_address(ifname).address : "127.0.0.1";
  }
  const std::vector<std::string> resolved = resolve_addresses(host);
  DPB_CHECK(!resolved.empty()) << "gloo: rank " << rank << " cannot listen at '" << host
                               << "': the name does not resolve on this node";
  gloo::transport::tcp::attr attr;
  attr.hostname = resolved.front();
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(options_.timeout);
    connect_full_mesh(ctx, device, store_, options_.timeout, rank, size, attr.hostname);
    context_ = ctx;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Gloo names the address that failed, not whose it is: with one peer that is that
    // peer; otherwise every other rank is listed.
    std::string peers;
    for (int r = 0; r < size; ++r)
      if (r != rank) peers += (peers.empty() ? "" : ", ") + std::to_string(r);
    DPB_FAIL() << "gloo: rank " << rank << " of " << size << " could not connect to "
               << (size == 2 ? "rank " + peers : "one of ranks " + peers) << " (dead, or not reachable where it said)"
               << " through the " << store_->describe() << ": " << e.what();
  }
  health_ = std::make_unique<GroupHealth>(std::make_shared<PrefixStore>("pg/", store_), rank, size);
  if (options_.shared_memory && size > 1) {
    PrefixStore shm_store("shm/", store_);
    std::string why;
    shm_ = ShmAllreduce::create(shm_store, rank, size, options_.timeout, &why);
    if (!shm_ && rank == 0 && why.find("several hosts") == std::string::npos)
      log::warn("gloo: all-reduce over TCP, not shared memory: {}", why);
  }
  thread_ = std::thread([this] { run_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(std::shared_ptr<Call> call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    call->seq = next_seq_++;
    queue_.push_back(call);
  }
  cv_.notify_all();
  return std::make_shared<GlooWork>(call, options_.timeout, options_.spin, health_.get(), rank_);
}

void ProcessGroupGloo::run_loop() {
  for (;;) {
    std::shared_ptr<Call> c;
    std::string broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      c = queue_.front();
      queue_.pop_front();
      broken = broken_;
    }
    if (!broken.empty()) {
      c->run = nullptr;
      c->finish(std::string(c->op) + " #" + std::to_string(c->seq) + " not run: the group broke earlier: " + broken);
      continue;
    }
    health_->entering(c->seq, c->op);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->started_ns = now_ns();
    }
    std::string error;
    try {
      if (options_.debug_collectives) check_consistent(*c);
      c->run(*context_, static_cast<uint32_t>(c->seq & 0x7fffffff));
    } catch (const std::exception& e) {
      const std::string what = e.what();
      // A cross-rank mismatch found by check_consistent is already the whole story.
      error = what.rfind("collective mismatch", 0) == 0
                  ? what
                  : std::string(c->op) + " #" + std::to_string(c->seq) + " failed on rank " + std::to_string(rank_) +
                        ": " + health_->diagnose(c->seq, c->op) + " [gloo: " + what + "]";
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = error;
    }
    // The tensors the collective captured are let go before the caller hears it is done:
    // a caller that drops its buffers after wait() frees their memory then, not when this
    // thread next wakes.
    c->run = nullptr;
    c->finish(error);
  }
}

// Every rank says what it is about to run; any difference is a clear error.
void ProcessGroupGloo::check_consistent(const Call& c) {
  constexpr int kFields = 5;
  const int64_t mine[kFields] = {c.seq, static_cast<int64_t>(std::hash<std::string>()(c.op) & 0xffffff), c.numel,
                                 c.root, static_cast<int64_t>(c.rop)};
  std::vector<int64_t> all(static_cast<size_t>(kFields * size_));
  gloo::AllgatherOptions o(context_);
  o.setInput(const_cast<int64_t*>(mine), kFields);
  o.setOutput(all.data(), all.size());
  o.setTag(0x7fffffffu);
  o.setTimeout(options_.timeout);
  gloo::allgather(o);
  std::ostringstream diff;
  for (int r = 0; r < size_; ++r) {
    const int64_t* theirs = all.data() + kFields * r;
    if (std::equal(mine, mine + kFields, theirs)) continue;
    diff << "; rank " << r << " called "
         << (theirs[1] == mine[1] ? std::string(c.op) : std::string("another collective")) << " #" << theirs[0]
         << " with " << theirs[2] << " elements" << (theirs[3] >= 0 ? ", root " + std::to_string(theirs[3]) : "");
  }
  if (!diff.str().empty())
    DPB_FAIL() << "collective mismatch at " << c.op << " #" << c.seq << ": rank " << rank_ << " called " << c.op
               << " with " << c.numel << " elements" << (c.root >= 0 ? ", root " + std::to_string(c.root) : "")
               << diff.str() << " (every rank must issue the same collectives in the same order with the same sizes)";
}

std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor& t, ReduceOp op) {
  check_f32("allreduce", t);
  auto c = std::make_shared<Call>();
  c->op = "allreduce";
  c->numel = t.numel();
  c->rop = op;
  auto staged = std::make_shared<Staged>(t);
  const int size = size_;
  const Millis timeout = options_.timeout;
  ShmAllreduce* shm = op == ReduceOp::sum || op == ReduceOp::avg ? shm_.get() : nullptr;
  // A shared buffer's tensor: reduced where it lies, in every rank's copy.
  size_t offset = 0;
  const auto region = shm && t.device().is_cpu() ? shm->find(t.data(), static_cast<size_t>(t.numel()), &offset) : nullptr;
  c->run = [staged, op, size, timeout, shm, region, offset](gloo::Context& ctx, uint32_t tag) {
    const auto n = static_cast<size_t>(staged->host.numel());
    if (n > 0 && region) {
      shm->allreduce_in_place(*region, offset, n, op == ReduceOp::avg);
    } else if (n > 0 && shm) {
      shm->allreduce(staged->data(), n, op == ReduceOp::avg);
    } else if (n > 0) {
      gloo::AllreduceOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
      o.setOutput(staged->data(), n);
      o.setReduceFunction(reduce_fn(op));
      o.setTag(tag);
      o.setTimeout(timeout);
      o.setAlgorithm(allreduce_algorithm(n * sizeof(float)));
      gloo::allreduce(o);
      if (op == ReduceOp::avg) {
        float* p = staged->data();
        const float inv = 1.0f / static_cast<float>(size);
        for (size_t i = 0; i < n; ++i) p[i] *= inv;
      }
    }
    staged->copy_back();
  };
  return enqueue(c);
}

Tensor ProcessGroupGloo::shared_buffer(int64_t numel, Device device) {
  DPB_CHECK(numel >= 0 && device.is_cpu()) << "shared_buffer: " << numel << " elements on " << device
                                           << " (host memory, for a CPU device)";
  if (!shm_ || numel == 0) return {};
  PrefixStore store("shm-buffer/" + std::to_string(regions_++) + "/", store_);
  std::string why;
  auto region = shm_->create_region(store, static_cast<size_t>(numel), &why);
  if (!region) {
    if (rank_ == 0) log::warn("gloo: gradients copied through shared memory, not reduced in place: {}", why);
    return {};
  }
  float* mine = region->part(rank_);
  std::fill_n(mine, numel, 0.0f);
  return Tensor::from_external({numel}, device, mine, region);
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor& t, int root) {
  check_f32("broadcast", t);
  DPB_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " outside a group of " << size_;
  auto c = std::make_shared<Call>();
  c->op = "broadcast";
  c->numel = t.numel();
  c->root = root;
  auto staged = std::make_shared<Staged>(t);
  const Millis timeout = options_.timeout;
  c->run = [staged, root, timeout](gloo::Context& ctx, uint32_t tag) {
    if (staged->host.numel() > 0) {
      gloo::BroadcastOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
      o.setOutput(staged->data(), static_cast<size_t>(staged->host.numel()));
      o.setRoot(root);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::broadcast(o);
    }
    staged->copy_back();
  };
  return enqueue(c);
}

std::shared_ptr<Work> ProcessGroupGloo::reduce(Tensor& t, int root, ReduceOp op) {
  check_f32("reduce", t);
  DPB_CHECK(root >= 0 && root < size_) << "reduce: root " << root << " outside a group of " << size_;
  auto c = std::make_shared<Call>();
  c->op = "reduce";
  c->numel = t.numel();
  c->root = root;
  c->rop = op;
  auto staged = std::make_shared<Staged>(t);
  const int rank = rank_, size = size_;
  const Millis timeout = options_.timeout;
  c->run = [staged, root, op, rank, size, timeout](gloo::Context& ctx, uint32_t tag) {
    const auto n = static_cast<size_t>(staged->host.numel());
    if (n == 0) return;
    // Gloo reduces through the output buffers of every rank: non-roots use a scratch copy.
    Tensor out = rank == root ? staged->host : staged->host.clone();
    gloo::ReduceOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
    o.setInput(staged->data(), n);
    o.setOutput(out.data(), n);
    o.setRoot(root);
    o.setReduceFunction(reduce_fn(op));
    o.setTag(tag);
    o.setTimeout(timeout);
    gloo::reduce(o);
    if (rank == root) {
      if (op == ReduceOp::avg) {
        float* p = out.data();
        for (size_t i = 0; i < n; ++i) p[i] /= static_cast<float>(size);
      }
      staged->copy_back();
    }
  };
  return enqueue(c);
}

// An all-gather moves bytes: F32 or BF16 (FSDP's parameters under a bf16 policy), the
// output of the input's type.
std::shared_ptr<Work> ProcessGroupGloo::allgather(Tensor& out, const Tensor& in) {
  DPB_CHECK(in.defined() && out.defined() && (in.dtype() == DType::f32 || in.dtype() == DType::bf16) &&
            in.layout() == Layout::plain && out.layout() == Layout::plain && out.dtype() == in.dtype())
      << "allgather: the gloo backend takes plain F32 or BF16 tensors of one type, got "
      << (in.defined() ? std::string(dtype_name(in.dtype())) + " " + layout_name(in.layout()) : "an undefined tensor")
      << " into "
      << (out.defined() ? std::string(dtype_name(out.dtype())) + " " + layout_name(out.layout()) : "an undefined tensor");
  DPB_CHECK(out.numel() == in.numel() * size_) << "allgather: output has " << out.numel() << " elements, expected "
                                               << size_ << " x " << in.numel();
  auto c = std::make_shared<Call>();
  c->op = "allgather";
  c->numel = in.numel();
  auto src = std::make_shared<Staged>(in);
  auto dst = std::make_shared<Staged>(out);
  const Millis timeout = options_.timeout;
  ShmAllreduce* shm = shm_.get();  // ranks on one host: through shared memory
  c->run = [src, dst, timeout, shm](gloo::Context& ctx, uint32_t tag) {
    const size_t n = src->host.nbytes();
    if (n > 0 && shm) {
      shm->allgather(src->host.raw(), n, dst->host.raw());
    } else if (n > 0) {
      gloo::AllgatherOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
      o.setInput(static_cast<uint8_t*>(src->host.raw()), n);
      o.setOutput(static_cast<uint8_t*>(dst->host.raw()), dst->host.nbytes());
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::allgather(o);
    }
    dst->copy_back();
  };
  return enqueue(c);
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_f32("reduce_scatter", in);
  check_f32("reduce_scatter", out);
  DPB_CHECK(in.numel() == out.numel() * size_) << "reduce_scatter: input has " << in.numel()
                                               << " elements, expected " << size_ << " x " << out.numel();
  auto c = std::make_shared<Call>();
  c->op = "reduce_scatter";
  c->numel = in.numel();
  c->rop = op;
  // Ranks that share a host reduce-scatter through shared memory (each rank sums its own
  // chunk). Elsewhere an all-to-all of the chunks, then a local reduction: each rank
  // sends and receives (W - 1) / W of the input, half an all-reduce's traffic. (Gloo
  // 0.5's ReduceScatterHalvingDoubling sends and receives its notifications through one
  // buffer at once, a race ThreadSanitizer reports.)
  auto src = std::make_shared<Staged>(in);
  auto dst = std::make_shared<Staged>(out);
  const int rank = rank_, size = size_;
  const Millis timeout = options_.timeout;
  ShmAllreduce* shm = op == ReduceOp::sum || op == ReduceOp::avg ? shm_.get() : nullptr;
  c->run = [src, dst, op, rank, size, timeout, shm](gloo::Context& ctx, uint32_t tag) {
    const auto n = static_cast<size_t>(src->host.numel());
    if (n > 0 && shm) {
      shm->reduce_scatter(src->data(), static_cast<size_t>(dst->host.numel()), dst->data(), op == ReduceOp::avg);
    } else if (n > 0) {
      // An all-to-all (rank q receives every rank's chunk q), then each rank reduces the
      // chunks it received: every rank sends and receives (W - 1) / W of the input.
      const int64_t chunk = dst->host.numel();
      Tensor parts = Tensor::empty({chunk * size});
      gloo::AlltoallOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
      o.setInput(src->data(), n);
      o.setOutput(parts.data(), n);
      o.setTag(tag);
      o.setTimeout(timeout);
      gloo::alltoall(o);
      const float* from = parts.data();
      float* to = dst->data();
      std::copy(from, from + chunk, to);
      for (int q = 1; q < size; ++q) {
        const float* part = from + chunk * q;
        for (int64_t i = 0; i < chunk; ++i) {
          if (op == ReduceOp::max) to[i] = std::max(to[i], part[i]);
          else if (op == ReduceOp::min) to[i] = std::min(to[i], part[i]);
          else to[i] += part[i];
        }
      }
      if (op == ReduceOp::avg)
        for (int64_t i = 0; i < chunk; ++i) to[i] /= static_cast<float>(size);
      (void)rank;
    }
    dst->copy_back();
  };
  return enqueue(c);
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  auto c = std::make_shared<Call>();
  c->op = "barrier";
  const Millis timeout = options_.timeout;
  c->run = [timeout](gloo::Context& ctx, uint32_t tag) {
    gloo::BarrierOptions o(std::shared_ptr<gloo::Context>(&ctx, [](gloo::Context*) {}));
    o.setTag(tag);
    o.setTimeout(timeout);
    gloo::barrier(o);
  };
  return enqueue(c);
}

std::shared_ptr<Work> ProcessGroupGloo::send(const Tensor& t, int dst, int tag) {
  check_f32("send", t);
  DPB_CHECK(dst >= 0 && dst < size_ && dst != rank_) << "send: destination rank " << dst << " (this is rank "
                                                     << rank_ << " of " << size_ << ")";
  Staged staged(t);
  auto buf = context_->createUnboundBuffer(staged.data(), staged.host.nbytes());
  buf->send(dst, kP2pSlot | static_cast<uint64_t>(tag));
  return std::make_shared<P2pWork>(std::move(buf), true, dst, std::move(staged), options_.timeout, rank_);
}

std::shared_ptr<Work> ProcessGroupGloo::recv(Tensor& t, int src, int tag) {
  check_f32("recv", t);
  DPB_CHECK(src >= 0 && src < size_ && src != rank_) << "recv: source rank " << src << " (this is rank " << rank_
                                                     << " of " << size_ << ")";
  Staged staged(t);
  auto buf = context_->createUnboundBuffer(staged.data(), staged.host.nbytes());
  buf->recv(src, kP2pSlot | static_cast<uint64_t>(tag));
  return std::make_shared<P2pWork>(std::move(buf), false, src, std::move(staged), options_.timeout, rank_);
}

}  // namespace dpb::comm
