// DeviceTransfer for builds without the CUDA backend: copies at once.
#include "engine/backend/transfer.h"

namespace dpb {

DeviceTransfer DeviceTransfer::start(const Tensor& host, Device device) {
  DeviceTransfer t;
  t.tensor_ = host.to(device);
  return t;
}

Tensor DeviceTransfer::take() { return tensor_; }

}  // namespace dpb
