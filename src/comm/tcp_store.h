// TcpStore: the rendezvous store of torchrun-style launches, where only MASTER_ADDR and
// MASTER_PORT are given. Rank 0 serves the key-value map on that port from a thread of its own
// process; every rank (rank 0 included) is a client over TCP. URL: tcp://HOST:PORT, with
// "?server=1" on the rank that serves.
//
// The protocol is a request/response exchange of length-prefixed byte strings:
//   request  = u8 op, u32 n, n x (u32 len, bytes)      ops: set get add cas del
//   response = u8 status (0 ok, 1 missing, 2 not an integer), u32 len, bytes
// Waiting (get, wait) is the client polling "get" with a backoff capped at 20 ms: simple, and
// loopback round trips are ~30 us.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/store.h"

namespace cann::comm {

// host:port; serve = true starts the server in this process first (port 0 picks a free one).
StatusOr<std::shared_ptr<Store>> open_tcp_store(const std::string& host, int port, bool serve,
                                                std::chrono::milliseconds connect_timeout);

}  // namespace cann::comm
