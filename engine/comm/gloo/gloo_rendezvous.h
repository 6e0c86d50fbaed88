#pragma once
// Gloo's rendezvous over our store (store.h), every wait bounded: its store waits by our
// timeout, naming the ranks that never joined, and its full-mesh connect by a watchdog.
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <memory>
#include <string>

#include "engine/comm/store.h"

namespace dpb::comm {

// Gloo's full-mesh connect, bounded. The side of a pair that listens waits for its peer
// without a timeout, so a peer that died (or advertised an address this rank cannot
// reach) while the ranks connect would hold this rank for ever. The connect runs on a
// thread of its own; this one waits at most `timeout`, and ends the wait at once when the
// store's host is gone (rank 0 died: nobody else is coming). A connect abandoned so is
// left to its thread, which keeps what it uses alive; the rank is failing and exits.
// `listening`: the address this rank's device listens at, for the error.
void connect_full_mesh(const std::shared_ptr<gloo::rendezvous::Context>& ctx,
                       std::shared_ptr<gloo::transport::Device> device, const std::shared_ptr<Store>& store,
                       Millis timeout, int rank, int size, const std::string& listening);

}  // namespace dpb::comm
