#include "engine/backend/device_graph.h"

#include <cuda_runtime.h>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"

namespace dpb {

struct DeviceGraph::Impl {
  int index = 0;
  cudaStream_t stream = nullptr;
  uint64_t pool = 0;
  bool capturing = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

DeviceGraph::DeviceGraph(Device device) : impl_(std::make_unique<Impl>()) {
  DPB_CHECK(device.is_cuda()) << "CUDA graphs need a CUDA device, got " << device;
  impl_->index = device.index;
  cuda::set_device(device.index);
  impl_->pool = cuda::create_pool(device.index);
}

DeviceGraph::~DeviceGraph() {
  if (impl_->capturing) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(impl_->stream, &g);
    if (g) cudaGraphDestroy(g);
    cuda::end_pool(impl_->index, impl_->stream);
  }
  if (impl_->exec) {
    DPB_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(impl_->exec));
  }
  if (impl_->graph) {
    DPB_CUDA_CHECK_NOTHROW(cudaGraphDestroy(impl_->graph));
  }
  cuda::release_pool(impl_->index, impl_->pool);
}

void DeviceGraph::begin_capture() {
  DPB_CHECK(!impl_->capturing && !impl_->exec) << "DeviceGraph: captured already";
  cuda::set_device(impl_->index);
  impl_->stream = cuda::current_stream(impl_->index);
  cuda::begin_pool(impl_->index, impl_->stream, impl_->pool);
  // Relaxed: the allocator may still call cudaMalloc for the pool while capturing.
  DPB_CUDA_CHECK(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeRelaxed)) << "starting a graph capture";
  impl_->capturing = true;
}

void DeviceGraph::end_capture() {
  DPB_CHECK(impl_->capturing) << "DeviceGraph: end_capture without begin_capture";
  impl_->capturing = false;
  cuda::end_pool(impl_->index, impl_->stream);
  DPB_CUDA_CHECK(cudaStreamEndCapture(impl_->stream, &impl_->graph))
      << "ending the graph capture (something in the captured work synchronised with the host)";
  DPB_CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, impl_->graph, 0)) << "instantiating the captured graph";
}

void DeviceGraph::replay() {
  DPB_CHECK(impl_->exec) << "DeviceGraph: replay before a capture";
  cuda::set_device(impl_->index);
  DPB_CUDA_CHECK(cudaGraphLaunch(impl_->exec, cuda::current_stream(impl_->index))) << "replaying the graph";
}

bool DeviceGraph::captured() const { return impl_->exec != nullptr; }

}  // namespace dpb
