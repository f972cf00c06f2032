// Gloo's rendezvous store interface over a comm::Store, so Gloo contexts rendezvous through the
// same file, redis or memory store as everything else (and under the same key prefixes).
#pragma once

#include <chrono>
#include <memory>

#include "comm/store.h"
#include "comm/types.h"

namespace gloo::rendezvous {
class Store;
}

namespace cann::comm {

// Gloo expects get() to block until the key exists; here it waits up to `timeout` and then
// throws gloo::IoException with the store's message (which names the missing key), as Gloo's
// own stores do. wait(keys) without a timeout uses `timeout` too.
std::shared_ptr<gloo::rendezvous::Store> make_gloo_store(
    std::shared_ptr<Store> store, std::chrono::milliseconds timeout = kDefaultTimeout);

}  // namespace cann::comm
