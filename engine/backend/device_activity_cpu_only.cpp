// device_activity for builds without the CUDA backend (-DDPB_CUDA=OFF).
#include "engine/backend/device_activity.h"

#include "engine/core/error.h"

namespace dpb {

std::unique_ptr<DeviceActivity> start_cupti_activity(const std::vector<Device>&, std::string* why) {
  if (why) *why = "built without CUDA (-DDPB_CUDA=OFF)";
  return nullptr;
}

std::unique_ptr<DeviceActivity> start_event_activity(const std::vector<Device>&) {
  DPB_FAIL() << "CUDA timing events need the CUDA backend: built without CUDA (-DDPB_CUDA=OFF)";
}

}  // namespace dpb
