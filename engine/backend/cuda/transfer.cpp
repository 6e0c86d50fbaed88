#include "engine/backend/transfer.h"

#include <cuda_runtime.h>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"

namespace dpb {

DeviceTransfer DeviceTransfer::start(const Tensor& host, Device device) {
  DeviceTransfer t;
  if (!device.is_cuda() || !host.device().is_cpu()) {
    t.tensor_ = host.to(device);
    return t;
  }
  cuda::set_device(device.index);
  cudaStream_t copy = cuda::DeviceContext::get(device.index).copy_stream();
  {
    cuda::StreamGuard guard(device.index, copy);
    t.tensor_ = host.to(device);  // pinned: queued on the copy stream
  }
  cudaEvent_t e;
  DPB_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  DPB_CUDA_CHECK(cudaEventRecord(e, copy));
  t.ready_ = std::shared_ptr<void>(e, [](void* ev) { cudaEventDestroy(static_cast<cudaEvent_t>(ev)); });
  return t;
}

Tensor DeviceTransfer::take() {
  if (ready_) {
    const int index = tensor_.device().index;
    cuda::set_device(index);
    cudaStream_t consumer = cuda::current_stream(index);
    DPB_CUDA_CHECK(cudaStreamWaitEvent(consumer, static_cast<cudaEvent_t>(ready_.get()), 0))
        << "waiting for a batch copied on the copy stream";
    cuda::record_stream(index, tensor_.raw(), consumer);
    ready_.reset();
  }
  return tensor_;
}

}  // namespace dpb
