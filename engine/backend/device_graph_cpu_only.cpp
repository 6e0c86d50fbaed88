// DeviceGraph for builds without the CUDA backend (-DDPB_CUDA=OFF).
#include "engine/backend/device_graph.h"

#include "engine/core/error.h"

namespace dpb {

struct DeviceGraph::Impl {};

DeviceGraph::DeviceGraph(Device device) {
  DPB_FAIL() << "CUDA graphs on " << device << ": this build has no CUDA backend (configure with -DDPB_CUDA=ON)";
}
DeviceGraph::~DeviceGraph() = default;
void DeviceGraph::begin_capture() {}
void DeviceGraph::end_capture() {}
void DeviceGraph::replay() {}
bool DeviceGraph::captured() const { return false; }

}  // namespace dpb
