#include "engine/data/loader.h"

#include <chrono>

#include "engine/core/clock.h"
#include "engine/trace/nvtx.h"

namespace dpb {

DataLoader::DataLoader(const Dataset& dataset, DistributedSampler& sampler, LoaderOptions options,
                       const Transform* transform)
    : ds_(dataset), sampler_(sampler), o_(options), transform_(transform) {
  DPB_CHECK(o_.batch >= 1) << "batch size must be at least 1, got " << o_.batch;
  DPB_CHECK(o_.workers >= 0) << "workers must be >= 0, got " << o_.workers;
  DPB_CHECK(o_.prefetch >= 1) << "prefetch depth must be >= 1, got " << o_.prefetch;
  DPB_CHECK(o_.delay_ms >= 0) << "loader delay must be >= 0 ms, got " << o_.delay_ms;
  for (int i = 0; i < o_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = sampler_.num_samples();
  return o_.drop_last ? n / o_.batch : (n + o_.batch - 1) / o_.batch;
}

Batch DataLoader::assemble(int64_t batch_index, int64_t epoch, const std::vector<int64_t>& order) const {
  const int64_t begin = batch_index * o_.batch;
  const int64_t end = std::min<int64_t>(begin + o_.batch, static_cast<int64_t>(order.size()));
  const int64_t n = end - begin;
  const Shape sample = ds_.sample_shape();
  Batch b = allocate_batch(ds_, n, o_.device.is_cuda());
  b.indices.assign(order.begin() + begin, order.begin() + end);
  const int64_t per = sample.numel();
  DPB_CHECK(!transform_ || ds_.input_dtype() == DType::f32) << "augmentation of token sequences";
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = order[static_cast<size_t>(begin + i)];
    fill_batch_row(ds_, idx, b, i);
    if (transform_) {
      Generator g = sample_generator(o_.seed, epoch, idx);
      transform_->apply(b.x.data() + i * per, sample, g);
    }
  }
  if (o_.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.delay_ms));
  return b;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (stop_) return;
    const int64_t index = tasks_.front();
    tasks_.pop_front();
    const uint64_t gen = generation_;
    const int64_t epoch = epoch_;
    const auto order = order_;  // shared: the consumer may start a new epoch meanwhile
    lock.unlock();
    Batch b;
    std::string error;
    try {
      b = assemble(index, epoch, *order);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (gen != generation_) continue;  // from an abandoned epoch
    if (error.empty()) ready_.emplace(index, std::move(b));
    else failed_.emplace(index, error);
    done_cv_.notify_all();
  }
}

void DataLoader::submit_up_to(int64_t last) {
  const int64_t end = std::min(last, batches_per_epoch());
  while (submitted_ < end) tasks_.push_back(submitted_++);
  work_cv_.notify_all();
}

void DataLoader::start_epoch(int64_t epoch, int64_t first) {
  sampler_.set_epoch(epoch);
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  tasks_.clear();
  ready_.clear();
  failed_.clear();
  epoch_ = epoch;
  order_ = std::make_shared<const std::vector<int64_t>>(sampler_.indices());
  DPB_CHECK(first >= 0 && first <= batches_per_epoch())
      << "start batch " << first << " outside the epoch's " << batches_per_epoch() << " batches";
  cursor_ = first;
  submitted_ = first;
  staged_ = Staged{};
  if (o_.workers > 0) submit_up_to(first + static_cast<int64_t>(o_.workers) * o_.prefetch);
}

void DataLoader::stage(int64_t index) {
  if (!o_.device.is_cuda() || o_.workers == 0 || index >= batches_per_epoch()) return;
  Batch host;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ready_.find(index);
    if (it == ready_.end()) return;  // not assembled yet: copied when it is asked for
    host = std::move(it->second);
    ready_.erase(it);
  }
  trace::NvtxRange range("data.h2d");
  staged_.index = index;
  staged_.x = DeviceTransfer::start(host.x, o_.device);
  staged_.target = DeviceTransfer::start(host.target, o_.device);
  staged_.indices = std::move(host.indices);
}

std::optional<Batch> DataLoader::next() {
  DPB_CHECK(epoch_ >= 0) << "DataLoader::next() before start_epoch()";
  if (cursor_ >= batches_per_epoch()) return std::nullopt;
  const int64_t t0 = now_ns();
  Batch b;
  if (staged_.index == cursor_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      submit_up_to(cursor_ + 1 + static_cast<int64_t>(o_.workers) * o_.prefetch);
    }
    b.x = staged_.x.take();
    b.target = staged_.target.take();
    b.indices = std::move(staged_.indices);
    staged_ = Staged{};
    wait_ns_.push_back(now_ns() - t0);
    ++cursor_;
    stage(cursor_);
    return b;
  }
  if (o_.workers == 0) {
    b = assemble(cursor_, epoch_, *order_);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    submit_up_to(cursor_ + 1 + static_cast<int64_t>(o_.workers) * o_.prefetch);
    done_cv_.wait(lock, [&] { return ready_.count(cursor_) > 0 || failed_.count(cursor_) > 0; });
    if (auto f = failed_.find(cursor_); f != failed_.end()) {
      DPB_FAIL() << "loading batch " << cursor_ << " of epoch " << epoch_ << " failed: " << f->second;
    }
    b = std::move(ready_.at(cursor_));
    ready_.erase(cursor_);
  }
  if (!o_.device.is_cpu() || o_.device.index != 0) {
    trace::NvtxRange range("data.h2d");
    b.x = DeviceTransfer::start(b.x, o_.device).take();
    b.target = DeviceTransfer::start(b.target, o_.device).take();
  }
  wait_ns_.push_back(now_ns() - t0);
  ++cursor_;
  stage(cursor_);
  return b;
}

}  // namespace dpb
