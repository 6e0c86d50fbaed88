// The device timeline's collectors on GPUs (engine/backend/device_activity.h): CUPTI's
// Activity API, and CUDA timing events around the timeline's spans.
#include "engine/backend/device_activity.h"

#include <cupti.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cupti_decode.h"
#include "engine/backend/cuda/device_context.h"
#include "engine/backend/device_info.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/trace/activity.h"
#include "engine/trace/timeline.h"

namespace dpb {

namespace {

std::string cupti_error(CUptiResult r) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || !text) return "CUptiResult " + std::to_string(r);
  return text;
}

// The devices' GPUs, current device restored afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    cuda::set_device(index);
  }
  ~DeviceScope() {
    // cuda:k below the GPU count is GPU k, so the GPU we found is its logical device too.
    if (previous_ >= 0) {
      try {
        cuda::set_device(previous_);
      } catch (const std::exception&) {
      }
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// ---------------------------------------------------------------------------------------
// CUPTI. Its buffer callbacks are process-wide: one collector at a time owns them, and
// buffers completed while none does are freed unread.

constexpr size_t kCuptiBufferBytes = size_t{8} << 20;
constexpr size_t kCuptiAlign = 8;

std::mutex g_cupti_mu;
trace::ActivityLog* g_cupti_log = nullptr;  // under g_cupti_mu
std::string g_cupti_error;                  // the first decode failure, under g_cupti_mu
bool g_cupti_registered = false;            // callbacks registered (they stay registered)

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kCuptiAlign, kCuptiBufferBytes));
  *size = *buffer ? kCuptiBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::string_view callback_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) return {};
  return name;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_cupti_mu);
    if (g_cupti_log && buffer) {
      try {
        cuda::decode_cupti_buffer(
            buffer, valid,
            [](uint8_t* b, size_t v, CUpti_Activity** r) { return cuptiActivityGetNextRecord(b, v, r); },
            callback_name, *g_cupti_log);
      } catch (const std::exception& e) {
        if (g_cupti_error.empty()) g_cupti_error = e.what();
      }
      size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
        g_cupti_log->add_dropped(dropped);
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kCuptiKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,  // kernels, NCCL's and CUDA graphs' too (graphId)
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,  // cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync...
    CUPTI_ACTIVITY_KIND_DRIVER,   // cuLaunchKernelEx: NCCL's launches
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
};
// Not GRAPH_TRACE: with it CUPTI reports a graph launch as one record instead of its
// kernels, and the timeline needs the kernels. A graph's launch is its cudaGraphLaunch
// call, whose correlation id its kernels carry.

const char* kind_name(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return "CONCURRENT_KERNEL";
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return "MEMCPY";
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return "MEMSET";
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return "RUNTIME";
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return "DRIVER";
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return "SYNCHRONIZATION";
    default:
      return "activity kind";
  }
}

bool clock_pair(trace::ClockPair* out) {
  uint64_t gpu = 0;
  const int64_t before = now_ns();
  if (cuptiGetTimestamp(&gpu) != CUPTI_SUCCESS) return false;
  const int64_t after = now_ns();
  *out = {before + (after - before) / 2, static_cast<int64_t>(gpu), (after - before) / 2};
  return true;
}

void synchronize_all(const std::vector<Device>& devices) {
  for (const auto& d : devices) {
    DeviceScope scope(d.index);
    DPB_CUDA_CHECK(cudaDeviceSynchronize()) << "finishing cuda:" << d.index << "'s work before reading its timeline";
  }
}

class CuptiActivity final : public DeviceActivity {
 public:
  explicit CuptiActivity(std::vector<Device> devices) : devices_(std::move(devices)) {}
  ~CuptiActivity() override {
    if (!stopped_) disable();
    std::lock_guard<std::mutex> lock(g_cupti_mu);
    if (g_cupti_log == &log_) g_cupti_log = nullptr;
  }

  // Empty on success; else why CUPTI would not subscribe (nothing left enabled).
  std::string start() {
    {
      std::lock_guard<std::mutex> lock(g_cupti_mu);
      if (g_cupti_log) return "another collector in this process holds CUPTI";
      g_cupti_log = &log_;
      g_cupti_error.clear();
    }
    if (!g_cupti_registered) {
      const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
      if (r != CUPTI_SUCCESS) return release("cuptiActivityRegisterCallbacks: " + cupti_error(r));
      g_cupti_registered = true;
    }
    for (CUpti_ActivityKind k : kCuptiKinds) {
      const CUptiResult r = cuptiActivityEnable(k);
      if (r != CUPTI_SUCCESS) {
        disable();
        return release(std::string("cuptiActivityEnable(") + kind_name(k) + "): " + cupti_error(r) +
                       (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                            ? " (another profiler, such as Nsight Systems or ncu, holds CUPTI)"
                            : ""));
      }
      enabled_.push_back(k);
    }
    trace::ClockPair p;
    if (!clock_pair(&p)) {
      disable();
      return release("cuptiGetTimestamp failed");
    }
    pairs_.push_back(p);
    return {};
  }

  trace::TimelineSource source() const override { return trace::TimelineSource::cupti; }

  void stop() override {
    DPB_CHECK(!stopped_) << "the CUPTI collector was stopped already";
    synchronize_all(devices_);
    trace::ClockPair p;
    if (clock_pair(&p)) pairs_.push_back(p);
    const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    disable();
    stopped_ = true;
    DPB_CHECK(r == CUPTI_SUCCESS) << "cuptiActivityFlushAll: " << cupti_error(r);
    {
      std::lock_guard<std::mutex> lock(g_cupti_mu);
      g_cupti_log = nullptr;
      DPB_CHECK(g_cupti_error.empty()) << g_cupti_error;
    }
    clock_ = trace::ClockConversion::fit(pairs_);
    // Streams by role. CUPTI's device id is the CUDA device ordinal. Work on a stream no
    // role names (a library's own) belongs to the logical device that owns its GPU, when
    // only one does.
    std::map<int, std::vector<int>> logical_of_gpu;
    for (const auto& d : devices_) logical_of_gpu[cuda_physical_device(d.index)].push_back(d.index);
    for (const auto& [gpu, logical] : logical_of_gpu)
      if (logical.size() == 1) streams_.add_default(gpu, {logical.front(), trace::Lane::compute});
    for (const auto& d : devices_) {
      auto& c = cuda::DeviceContext::get(d.index);
      const int gpu = cuda_physical_device(d.index);
      const auto add = [&](cudaStream_t s, trace::Lane lane) {
        uint32_t id = 0;
        if (cuptiGetStreamIdEx(nullptr, s, 0, &id) == CUPTI_SUCCESS) streams_.add(gpu, id, {d.index, lane});
      };
      for (cudaStream_t s : c.op_streams()) add(s, trace::Lane::compute);
      add(c.compute_stream(), trace::Lane::compute);
      add(c.comm_stream(), trace::Lane::communication);
      add(c.copy_stream(), trace::Lane::copy);
    }
  }

  trace::RankTimeline timeline(trace::Span64 window) const override {
    DPB_CHECK(stopped_) << "the CUPTI collector's timeline is read after stop()";
    return log_.to_timeline(clock_, streams_, window);
  }

  uint64_t dropped() const override { return log_.dropped(); }
  int64_t clock_residual_ns() const override { return clock_.residual_ns(); }

 private:
  std::string release(std::string why) {
    std::lock_guard<std::mutex> lock(g_cupti_mu);
    if (g_cupti_log == &log_) g_cupti_log = nullptr;
    return why;
  }
  void disable() {
    for (CUpti_ActivityKind k : enabled_) cuptiActivityDisable(k);
    enabled_.clear();
  }

  std::vector<Device> devices_;
  trace::ActivityLog log_;
  std::vector<CUpti_ActivityKind> enabled_;
  std::vector<trace::ClockPair> pairs_;
  trace::ClockConversion clock_;
  trace::StreamMap streams_;
  bool stopped_ = false;
};

// ---------------------------------------------------------------------------------------
// CUDA timing events around spans.

class EventActivity final : public DeviceActivity, public trace::SpanTimer {
 public:
  static constexpr size_t kMaxSpans = size_t{1} << 18;  // 2 events each

  explicit EventActivity(std::vector<Device> devices) : devices_(std::move(devices)) {
    // A reference event per device, against the host clock: recorded on an idle stream,
    // waited for, and placed between the host reads before and after.
    for (const auto& d : devices_) {
      DeviceScope scope(d.index);
      DPB_CUDA_CHECK(cudaDeviceSynchronize()) << "cuda:" << d.index << " before its timing events";
      Reference ref;
      DPB_CUDA_CHECK(cudaEventCreate(&ref.event));
      const cudaStream_t s = cuda::DeviceContext::get(d.index).compute_stream();
      const int64_t before = now_ns();
      DPB_CUDA_CHECK(cudaEventRecord(ref.event, s));
      DPB_CUDA_CHECK(cudaEventSynchronize(ref.event));
      const int64_t after = now_ns();
      ref.host_ns = before + (after - before) / 2;
      ref.uncertainty_ns = (after - before) / 2;
      residual_ = std::max(residual_, ref.uncertainty_ns);
      refs_[d.index] = ref;
    }
    trace::set_span_timer(this);
  }
  ~EventActivity() override {
    trace::set_span_timer(nullptr);
    for (auto& s : spans_) {
      if (s.begin) cudaEventDestroy(s.begin);
      if (s.end) cudaEventDestroy(s.end);
    }
    for (auto& [d, r] : refs_) cudaEventDestroy(r.event);
  }

  int64_t begin(const trace::Interval& i) override {
    if (i.cat == trace::Category::data || stopping_.load(std::memory_order_acquire)) return -1;
    if (!refs_.count(i.device)) return -1;
    // Communication on its lane runs on the communication stream (NCCL's kernels, Gloo's
    // staging copies); everything else on the thread's current stream of the device.
    const bool comm_lane = i.lane == "comm";
    const cudaStream_t stream = comm_lane ? cuda::DeviceContext::get(i.device).comm_stream()
                                          : cuda::current_stream(i.device);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) return -1;
    DeviceScope scope(i.device);
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return -1;
    if (cudaEventRecord(e, stream) != cudaSuccess) {
      cudaEventDestroy(e);
      return -1;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (spans_.size() >= kMaxSpans) {
      ++dropped_;
      cudaEventDestroy(e);
      return -1;
    }
    TimedSpan s;
    s.device = i.device;
    s.lane = stream_lane(i.device, stream);
    s.name = i.name;
    s.cat = i.cat;
    s.stream = stream;
    s.begin = e;
    spans_.push_back(std::move(s));
    return static_cast<int64_t>(spans_.size() - 1);
  }

  void end(int64_t token) override {
    cudaStream_t stream;
    int device;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto& s = spans_.at(static_cast<size_t>(token));
      stream = s.stream;
      device = s.device;
    }
    DeviceScope scope(device);
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return;
    if (cudaEventRecord(e, stream) != cudaSuccess) {
      cudaEventDestroy(e);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    spans_.at(static_cast<size_t>(token)).end = e;
  }

  trace::TimelineSource source() const override { return trace::TimelineSource::cuda_events; }

  void stop() override {
    stopping_.store(true, std::memory_order_release);
    trace::set_span_timer(nullptr);
    synchronize_all(devices_);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : spans_) {
      if (!s.end) {  // a span still open (or whose end event failed): not timed
        ++dropped_;
        continue;
      }
      const Reference& ref = refs_.at(s.device);
      float b = 0, e = 0;
      if (cudaEventElapsedTime(&b, ref.event, s.begin) != cudaSuccess ||
          cudaEventElapsedTime(&e, ref.event, s.end) != cudaSuccess) {
        ++dropped_;
        continue;
      }
      s.begin_ns = ref.host_ns + static_cast<int64_t>(static_cast<double>(b) * 1e6);
      s.end_ns = ref.host_ns + static_cast<int64_t>(static_cast<double>(e) * 1e6);
      s.timed = true;
    }
    stopped_ = true;
  }

  trace::RankTimeline timeline(trace::Span64 window) const override {
    DPB_CHECK(stopped_) << "the timing events' timeline is read after stop()";
    std::lock_guard<std::mutex> lock(mu_);
    trace::RankTimeline t;
    t.source = "cuda-events";
    for (const auto& s : spans_) {
      if (!s.timed || s.end_ns <= window.first || s.begin_ns >= window.second) continue;
      trace::DeviceWork w;
      w.device = s.device;
      w.stream = s.lane;
      w.work = s.cat == trace::Category::comm   ? trace::Work::communication
               : s.cat == trace::Category::copy ? trace::Work::memory
                                                : trace::Work::compute;
      w.begin_ns = s.begin_ns;
      w.end_ns = std::max(s.begin_ns, s.end_ns);
      w.name = t.names.intern(s.name);
      t.work.push_back(w);
    }
    return t;
  }

  uint64_t dropped() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
  }
  int64_t clock_residual_ns() const override { return residual_; }

 private:
  struct Reference {
    cudaEvent_t event = nullptr;
    int64_t host_ns = 0, uncertainty_ns = 0;
  };
  struct TimedSpan {
    int device = 0;
    int64_t lane = 0;
    std::string name;
    trace::Category cat = trace::Category::compute;
    cudaStream_t stream = nullptr;
    cudaEvent_t begin = nullptr, end = nullptr;
    int64_t begin_ns = 0, end_ns = 0;
    bool timed = false;
  };
  // A small number per (device, stream), for the timeline's stream field. Under mu_.
  int64_t stream_lane(int device, cudaStream_t s) {
    const auto key = std::make_pair(device, s);
    const auto it = lanes_.find(key);
    if (it != lanes_.end()) return it->second;
    const auto id = static_cast<int64_t>(lanes_.size());
    lanes_[key] = id;
    return id;
  }

  std::vector<Device> devices_;
  std::map<int, Reference> refs_;
  mutable std::mutex mu_;
  std::vector<TimedSpan> spans_;
  std::map<std::pair<int, cudaStream_t>, int64_t> lanes_;
  uint64_t dropped_ = 0;
  int64_t residual_ = 0;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<DeviceActivity> start_cupti_activity(const std::vector<Device>& devices, std::string* why) {
  auto a = std::make_unique<CuptiActivity>(devices);
  std::string failed = a->start();
  if (!failed.empty()) {
    if (why) *why = "CUPTI could not subscribe: " + failed;
    return nullptr;
  }
  return a;
}

std::unique_ptr<DeviceActivity> start_event_activity(const std::vector<Device>& devices) {
  for (const auto& d : devices)
    DPB_CHECK(d.is_cuda()) << "CUDA timing events time GPU work; " << d << " is not a CUDA device";
  return std::make_unique<EventActivity>(devices);
}

}  // namespace dpb
