// Internals shared by the files of the gloo backend: the slot numbers it uses on a Gloo
// context, deadlines in the form Gloo wants, and the reading of Gloo's error messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "comm/gloo_channel.h"

namespace cann::comm {

// Gloo's own algorithms build slots as (prefix << 56 | tag) with prefixes 0x01..0x08; ours
// use prefixes above those, so nothing here can match a Gloo algorithm's message.
inline constexpr uint64_t kExchangeSlotBase = 0x40ull << 56;
inline constexpr uint64_t kP2pSlotBase = 0x41ull << 56;
inline constexpr uint64_t kProbeSlot = 0x42ull << 56;
inline constexpr uint64_t kAbortSlot = 0x43ull << 56;

// Time left until `deadline`, at least 1 ms (Gloo reads zero or less as "use the default").
inline std::chrono::milliseconds time_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// Whether a Gloo error is a timeout of this process ("Timed out waiting ...", "Read timeout
// ..." on bound buffers, or "Application timeout caused pair closure", which Gloo puts on every
// connection of a context when one wait times out) rather than a connection that failed.
inline bool is_local_abort(const std::string& m) {
  return m.find("Timed out") != std::string::npos || m.find("timeout") != std::string::npos;
}

// "send to rank 3 (tag 7): timed out waiting for rank 3 to receive" or
// "...: connection to rank 3 failed: Connection closed by peer [127.0.0.1]:41234".
inline std::string describe_transfer_failure(const std::string& what, int peer,
                                             const std::string& waiting_for,
                                             const std::string& gloo_message) {
  if (is_local_abort(gloo_message))
    return what + ": timed out waiting for rank " + std::to_string(peer) + " " + waiting_for;
  return what + ": connection to rank " + std::to_string(peer) +
         " failed: " + strip_gloo_location(gloo_message);
}

}  // namespace cann::comm
