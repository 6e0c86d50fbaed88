#pragma once
// All-reduce through shared memory, for the ranks of a Gloo group that share a host (the
// usual CPU DDP job: one process per core or socket). Gloo moves every byte over loopback
// TCP, with a thread wake-up per message; through a shared segment an all-reduce costs
// three passes over memory (the two measured: reports/results/ddp-cpu-2026-11-24.md). It stands in for Gloo's all-reduce of f32
// sums and averages (and the reduce-scatter made of one) and for its all-gather; every
// other collective stays on Gloo.
//
// The segment holds a slot of kSlotFloats per rank, a result area, and a counter per
// rank of the phases it has finished. A buffer goes through in chunks of a slot:
//   1. each rank copies its chunk into its slot, finishes a phase, waits for all;
//   2. rank r sums the r-th part of the chunk over every slot into the result area (in
//      rank order: the same bits on every rank), finishes a phase, waits for all;
//   3. each rank copies the result back.
// The next chunk's first phase cannot overwrite a slot another rank still reads, nor the
// result before every rank has copied it: both are read only between two phases every
// rank must finish. An all-gather goes through in chunks of a slot too: each rank copies
// its chunk into its slot, finishes a phase, waits for all, copies every slot out, and
// finishes a second phase, so that no slot is overwritten while another rank reads it. A
// reduce-scatter puts a piece of every rank's destination chunks into its slot; each
// rank sums its own piece over the slots.
//
// Buffers the ranks reduce in place (DDP's gradient buckets, where the backward writes
// the gradients): a region of a second segment that holds every rank's copy of the
// buffer. An all-reduce of a piece of it costs one pass, not three: after a phase, rank
// r sums the r-th part of the piece over every rank's copy (in rank order) and writes the
// sum into every copy; after a second phase every copy holds the whole result. Nothing is
// copied in or out.
//
// Every wait polls (yielding the core) and is bounded by the group's timeout; a rank
// that does not arrive is named, at once when its process has died (the ranks share a
// host, so each knows the others' pids). The segment has no name: an anonymous memory
// file (memfd) that the other ranks open through rank 0's descriptor, so nothing is left
// behind in /dev/shm whatever ends the ranks (a kill at any moment, a timeout, ulimit -f).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/comm/store.h"

namespace dpb::comm {

class ShmAllreduce {
 public:
  static constexpr size_t kSlotFloats = size_t{1} << 18;  // 1 MiB per rank and chunk
  static constexpr int kMaxRanks = 64;

  // Collective over the group: every rank calls it. Returns null on every rank unless
  // all of them share this host (hostname and boot id) and the segment could be made
  // (e.g. memory full, or this system lets no process open another's descriptors: then
  // `why` says so and the group all-reduces over TCP).
  static std::unique_ptr<ShmAllreduce> create(Store& store, int rank, int size, Millis timeout, std::string* why);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // `data` (n floats) summed over the ranks, or averaged, in place. Throws dpb::Error
  // naming the ranks that did not reach a phase within the timeout.
  void allreduce(float* data, size_t n, bool average);
  // Every rank's `in` (n bytes, of any element type) into `out` (size x n bytes, rank
  // r's at r x n).
  void allgather(const void* in, size_t n, void* out);
  // `in` holds size x n floats; `out` (n floats) gets chunk `rank` of their sum over the
  // ranks (in rank order, as allreduce sums), or of their average.
  void reduce_scatter(const float* in, size_t n, float* out, bool average);

  // A buffer of n floats per rank that every rank maps: part(r) is rank r's copy.
  class Region {
   public:
    Region(void* base, size_t bytes, size_t n) : base_(base), bytes_(bytes), n_(n) {}
    ~Region();
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    float* part(int r) const { return static_cast<float*>(base_) + static_cast<size_t>(r) * n_; }
    size_t floats() const { return n_; }

   private:
    void* base_;
    size_t bytes_, n_;
  };
  // Collective: every rank calls it with the same n, in the same order (each call on a
  // store of its own). Null on every rank when a rank could not map it (`why` says). The
  // region is remembered (while someone holds it) for find().
  std::shared_ptr<Region> create_region(Store& store, size_t n, std::string* why);
  // The live region whose part for this rank holds [p, p + n), and p's offset in it; null
  // when none does.
  std::shared_ptr<Region> find(const float* p, size_t n, size_t* offset) const;
  // Floats [offset, offset + n) of `region`, summed (or averaged) over the ranks' copies,
  // in every copy.
  void allreduce_in_place(const Region& region, size_t offset, size_t n, bool average);

 private:
  struct Header;
  ShmAllreduce(int rank, int size, Millis timeout, void* base, size_t bytes, std::vector<int64_t> pids);
  void phase();  // finishes this rank's next phase and waits for every rank to finish it
  float* slot(int r) const;
  float* result() const;

  int rank_, size_;
  Millis timeout_;
  void* base_;
  size_t bytes_;
  Header* header_;
  std::vector<int64_t> pids_;  // every rank's process
  uint64_t phase_ = 0;  // phases this rank has finished (the same count on every rank)
  mutable std::mutex regions_mu_;
  std::vector<std::weak_ptr<Region>> regions_;
};

}  // namespace dpb::comm
