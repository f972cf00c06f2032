// GlooFailureReport: turns a failed call of a gloo group into the one line a person needs
// ("...: dead or unreachable peer: rank 3 (Connection closed by peer ...)"), and makes sure the
// group's other ranks fail quickly too, naming the same culprit.
//
// How the culprit is found. When a process dies, the kernel closes all its connections, and
// every surviving rank's event loop records the error on its connection to that rank, whether or
// not a call was using it. So on any failure a rank probes its connections (every channel):
// those holding an error of their own point at ranks that died, became unreachable, or aborted
// after a failure of their own. To tell these apart, a rank that fails publishes a marker in the
// store ("failed/<rank>": the ranks it found dead, and its message) before it closes its
// connections; a broken connection to a rank with a marker is that rank reacting, not dying.
// A broken connection without a marker is given a short grace (200 ms) for the marker to appear
// (Gloo closes connections on a timeout before we get to write it), unless a marker already
// names that rank as dead.
//
// Then the rank aborts all its channels, which closes its connections: ranks blocked on it fail
// at once instead of waiting out their timeout, and find its marker. The failure spreads through
// the group in milliseconds, each rank naming the dead one.
//
// Thread safety: report() may be called from the group's three lanes at once; it serialises.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "comm/gloo_channel.h"
#include "comm/store.h"

namespace cann::comm {

class GlooFailureReport {
 public:
  // `store` is the group's own prefixed store.
  GlooFailureReport(std::shared_ptr<Store> store, int rank)
      : store_(std::move(store)), rank_(rank) {}

  // `what` names the call ("gloo allreduce [grad_bucket_3] on rank 2"); `cause` is what the
  // channel saw. Returns the error for the call; publishes the marker once; aborts `channels`.
  Status report(const std::string& what, const Status& cause,
                std::span<GlooChannel* const> channels);

 private:
  const std::shared_ptr<Store> store_;
  const int rank_;
  std::mutex mutex_;  // one report at a time; guards published_
  bool published_ = false;
};

}  // namespace cann::comm
