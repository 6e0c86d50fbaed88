#include "engine/comm/gloo/shm_allreduce.h"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "engine/core/error.h"

namespace dpb::comm {

struct ShmAllreduce::Header {
  std::atomic<uint64_t> finished[kMaxRanks];  // per rank: phases it has finished
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "phase counters must work across processes");

namespace {

size_t header_bytes() { return (sizeof(std::atomic<uint64_t>) * ShmAllreduce::kMaxRanks + 63) / 64 * 64; }

// This host, as far as shared memory goes: its name and this boot.
std::string host_identity() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

// Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet).
bool ended(int64_t pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// A segment of `bytes` that every rank of the group maps. It has no name anywhere: rank 0
// makes an anonymous memory file (memfd) and the others open it through rank 0's
// descriptor (/proc/PID/fd/N) while rank 0 holds it open, so whatever ends the ranks
// (a kill, a timeout, a full disk) leaves nothing behind in /dev/shm; the memory goes
// with the last mapping. Null on every rank when one failed.
void* map_segment(Store& store, int rank, int size, size_t bytes, Millis timeout, std::string* why) {
  int fd = -1;
  if (rank == 0) {
    fd = ::memfd_create("dpb-shm", MFD_CLOEXEC);
    // Reserve the pages now: a full memory is an error here, not a SIGBUS later.
    const int err = fd < 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (fd < 0 || err != 0) {
      if (fd >= 0) ::close(fd);
      store.set("name", "");
      *why = "no shared segment of " + std::to_string(bytes >> 20) + " MiB: " + std::strerror(err);
      return nullptr;
    }
    store.set("name", "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd));
  } else {
    const std::string name = store.get("name", timeout);
    if (name.empty()) {
      *why = "rank 0 could not make the shared segment";
      return nullptr;
    }
    fd = name.rfind("/proc/", 0) == 0 ? ::open(name.c_str(), O_RDWR | O_CLOEXEC) : -1;
  }
  void* base = fd < 0 ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const std::string mapped = base == MAP_FAILED ? std::strerror(errno) : "ok";
  if (fd >= 0 && rank != 0) ::close(fd);
  // Every rank says whether it could map the segment; rank 0 closes its descriptor once
  // all have tried (a mapping outlives it). One that failed makes all fall back.
  store.set("mapped/" + std::to_string(rank), mapped);
  bool all = true;
  int waiting_for = 0;
  try {
    for (; waiting_for < size; ++waiting_for)
      all = store.get("mapped/" + std::to_string(waiting_for), timeout) == "ok" && all;
  } catch (const Error& e) {
    if (rank == 0 && fd >= 0) ::close(fd);
    if (base != MAP_FAILED) ::munmap(base, bytes);
    DPB_FAIL() << "shared memory: rank " << waiting_for << " did not say within " << timeout.count()
               << " ms whether it mapped the all-reduce's segment (it died or hangs): " << e.what();
  } catch (...) {
    if (rank == 0 && fd >= 0) ::close(fd);
    if (base != MAP_FAILED) ::munmap(base, bytes);
    throw;
  }
  if (rank == 0) ::close(fd);
  if (!all) {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    *why = "a rank could not map the shared segment";
    return nullptr;
  }
  return base;
}

}  // namespace

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(Store& store, int rank, int size, Millis timeout, std::string* why) {
  if (size < 2 || size > kMaxRanks) {
    *why = size < 2 ? "one rank" : "more than " + std::to_string(kMaxRanks) + " ranks";
    return nullptr;
  }
  // Every rank learns every rank's host (and process) and decides alike.
  store.set("pid/" + std::to_string(rank), std::to_string(::getpid()));
  store.set("host/" + std::to_string(rank), host_identity());
  const std::string mine = host_identity();
  for (int r = 0; r < size; ++r)
    if (store.get("host/" + std::to_string(r), timeout) != mine) {
      *why = "the ranks are on several hosts";
      return nullptr;
    }
  const size_t bytes = header_bytes() + (static_cast<size_t>(size) + 1) * kSlotFloats * sizeof(float);
  void* base = map_segment(store, rank, size, bytes, timeout, why);
  if (!base) return nullptr;
  std::vector<int64_t> pids;
  for (int r = 0; r < size; ++r) pids.push_back(std::stoll(store.get("pid/" + std::to_string(r), timeout)));
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(rank, size, timeout, base, bytes, std::move(pids)));
}

ShmAllreduce::ShmAllreduce(int rank, int size, Millis timeout, void* base, size_t bytes, std::vector<int64_t> pids)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      base_(base),
      bytes_(bytes),
      header_(static_cast<Header*>(base)),
      pids_(std::move(pids)) {}

ShmAllreduce::~ShmAllreduce() { ::munmap(base_, bytes_); }

float* ShmAllreduce::slot(int r) const {
  return reinterpret_cast<float*>(static_cast<char*>(base_) + header_bytes()) + static_cast<size_t>(r) * kSlotFloats;
}

float* ShmAllreduce::result() const { return slot(size_); }

void ShmAllreduce::phase() {
  ++phase_;
  header_->finished[rank_].store(phase_, std::memory_order_release);
  const auto start = std::chrono::steady_clock::now(), deadline = start + timeout_;
  auto next_check = start + std::chrono::milliseconds(5);
  for (int r = 0; r < size_; ++r) {
    while (header_->finished[r].load(std::memory_order_acquire) < phase_) {
      const auto now = std::chrono::steady_clock::now();
      if (now > next_check) {  // a dead rank never arrives: say so at once
        next_check = now + std::chrono::milliseconds(5);
        if (ended(pids_[static_cast<size_t>(r)]) && header_->finished[r].load(std::memory_order_acquire) < phase_)
          DPB_FAIL() << "shared-memory all-reduce: rank " << r << " (pid " << pids_[static_cast<size_t>(r)]
                     << ") died before reaching phase " << phase_;
      }
      if (now > deadline) {
        std::string missing;
        for (int q = 0; q < size_; ++q)
          if (header_->finished[q].load(std::memory_order_acquire) < phase_)
            missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        DPB_FAIL() << "shared-memory all-reduce: rank(s) " << missing << " did not reach phase " << phase_ << " within "
                   << timeout_.count() << " ms";
      }
      ::sched_yield();
    }
  }
}

void ShmAllreduce::allreduce(float* data, size_t n, bool average) {
  const float scale = average ? 1.0f / static_cast<float>(size_) : 1.0f;
  for (size_t off = 0; off < n; off += kSlotFloats) {
    const size_t len = std::min(kSlotFloats, n - off);
    std::memcpy(slot(rank_), data + off, len * sizeof(float));
    phase();
    // This rank's part of the chunk, summed over the slots in rank order.
    const size_t part = (len + static_cast<size_t>(size_) - 1) / static_cast<size_t>(size_);
    const size_t lo = std::min(len, part * static_cast<size_t>(rank_)), hi = std::min(len, lo + part);
    float* out = result();
    const float* first = slot(0);
    for (size_t i = lo; i < hi; ++i) out[i] = first[i];
    for (int r = 1; r < size_; ++r) {
      const float* s = slot(r);
      for (size_t i = lo; i < hi; ++i) out[i] += s[i];
    }
    if (average)
      for (size_t i = lo; i < hi; ++i) out[i] *= scale;
    phase();
    std::memcpy(data + off, out, len * sizeof(float));
  }
}

ShmAllreduce::Region::~Region() { ::munmap(base_, bytes_); }

std::shared_ptr<ShmAllreduce::Region> ShmAllreduce::create_region(Store& store, size_t n, std::string* why) {
  // Each rank's copy starts on a cache line of its own.
  const size_t padded = (std::max<size_t>(n, 1) + 15) / 16 * 16;
  const size_t bytes = static_cast<size_t>(size_) * padded * sizeof(float);
  void* base = map_segment(store, rank_, size_, bytes, timeout_, why);
  if (!base) return nullptr;
  auto region = std::make_shared<Region>(base, bytes, padded);
  std::lock_guard<std::mutex> lock(regions_mu_);
  regions_.erase(std::remove_if(regions_.begin(), regions_.end(), [](const auto& w) { return w.expired(); }),
                 regions_.end());
  regions_.push_back(region);
  return region;
}

std::shared_ptr<ShmAllreduce::Region> ShmAllreduce::find(const float* p, size_t n, size_t* offset) const {
  std::lock_guard<std::mutex> lock(regions_mu_);
  for (const auto& w : regions_)
    if (auto r = w.lock(); r && p >= r->part(rank_) && p + n <= r->part(rank_) + r->floats()) {
      *offset = static_cast<size_t>(p - r->part(rank_));
      return r;
    }
  return nullptr;
}

void ShmAllreduce::allreduce_in_place(const Region& region, size_t offset, size_t n, bool average) {
  DPB_CHECK(offset + n <= region.floats()) << "shared-memory all-reduce: floats [" << offset << ", " << offset + n
                                           << ") outside a region of " << region.floats();
  phase();  // every rank's copy holds its values
  const size_t part = (n + static_cast<size_t>(size_) - 1) / static_cast<size_t>(size_);
  const size_t lo = std::min(n, part * static_cast<size_t>(rank_)), hi = std::min(n, lo + part);
  const float scale = average ? 1.0f / static_cast<float>(size_) : 1.0f;
  constexpr size_t kBlock = 2048;  // summed in a buffer that stays in L1
  float sum[kBlock];
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t len = std::min(kBlock, hi - b);
    const float* first = region.part(0) + offset + b;
    for (size_t i = 0; i < len; ++i) sum[i] = first[i];
    for (int r = 1; r < size_; ++r) {
      const float* s = region.part(r) + offset + b;
      for (size_t i = 0; i < len; ++i) sum[i] += s[i];
    }
    if (average)
      for (size_t i = 0; i < len; ++i) sum[i] *= scale;
    for (int r = 0; r < size_; ++r) std::memcpy(region.part(r) + offset + b, sum, len * sizeof(float));
  }
  phase();  // every part summed into every copy
}

void ShmAllreduce::allgather(const void* in, size_t n, void* out) {
  constexpr size_t kSlotBytes = kSlotFloats * sizeof(float);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  for (size_t off = 0; off < n; off += kSlotBytes) {
    const size_t len = std::min(kSlotBytes, n - off);
    std::memcpy(slot(rank_), src + off, len);
    phase();
    for (int r = 0; r < size_; ++r) std::memcpy(dst + static_cast<size_t>(r) * n + off, slot(r), len);
    phase();
  }
}

void ShmAllreduce::reduce_scatter(const float* in, size_t n, float* out, bool average) {
  const auto world = static_cast<size_t>(size_);
  const size_t piece = kSlotFloats / world;  // of each destination chunk, per round
  const float scale = average ? 1.0f / static_cast<float>(size_) : 1.0f;
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    float* mine = slot(rank_);
    for (size_t q = 0; q < world; ++q) std::memcpy(mine + q * len, in + q * n + off, len * sizeof(float));
    phase();
    const size_t at = static_cast<size_t>(rank_) * len;
    float* o = out + off;
    std::memcpy(o, slot(0) + at, len * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* s = slot(r) + at;
      for (size_t i = 0; i < len; ++i) o[i] += s[i];
    }
    if (average)
      for (size_t i = 0; i < len; ++i) o[i] *= scale;
    phase();
  }
}

}  // namespace dpb::comm
