// GlooChannel::exchange, the one primitive the gloo backend's own algorithms are built from,
// and GlooChannel::ring_allreduce, which hands a whole allreduce to Gloo.
//
// Slot discipline: every rank calls exchange() the same number of times in the same order on a
// channel (an algorithm calls it once per round even when a rank has nothing to move that
// round), so the n-th exchange uses the same slot everywhere and messages cannot cross rounds.
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo_channel.h"
#include "comm/gloo_internal.h"
#include "comm/gloo_reduce.h"

namespace cann::comm {
namespace {

std::string peer_list(const std::vector<int>& peers) {
  std::string s;
  for (size_t i = 0; i < peers.size(); ++i)
    s += (i == 0 ? "rank " : ", rank ") + std::to_string(peers[i]);
  return s;
}

}  // namespace

Status GlooChannel::exchange(std::span<const PeerTransfer> sends,
                             std::span<const PeerTransfer> recvs, Deadline deadline,
                             Traffic& traffic) {
  if (aborted_) return IoError("the channel was aborted after an earlier failure");
  Status s = bound_ ? exchange_bound(sends, recvs) : exchange_unbound(sends, recvs, deadline);
  if (!s.ok()) return s;
  for (const auto& t : sends) traffic.sent += t.bytes;
  for (const auto& t : recvs) traffic.received += t.bytes;
  return OkStatus();
}

Status GlooChannel::exchange_unbound(std::span<const PeerTransfer> sends,
                                     std::span<const PeerTransfer> recvs, Deadline deadline) {
  const uint64_t slot = kExchangeSlotBase + (exchange_count_++ & 0xffffffffffffull);
  struct Posted {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    int peer;
    bool is_recv;
  };
  std::vector<Posted> posted;
  posted.reserve(sends.size() + recvs.size());
  size_t done = 0;
  std::string first_error;
  try {
    // Receives first, so data can land as soon as a peer sends it.
    for (const auto& r : recvs) {
      if (r.bytes == 0) continue;
      posted.push_back({context_->createUnboundBuffer(r.data, r.bytes), r.peer, true});
      posted.back().buffer->recv(r.peer, slot);
    }
    for (const auto& t : sends) {
      if (t.bytes == 0) continue;
      posted.push_back({context_->createUnboundBuffer(t.data, t.bytes), t.peer, false});
      posted.back().buffer->send(t.peer, slot);
    }
    for (; done < posted.size(); ++done) {
      Posted& p = posted[done];
      const WatchedTransfer watched(this, p.buffer.get(), p.peer, p.is_recv);
      const bool ok = p.is_recv ? p.buffer->waitRecv(nullptr, time_left(deadline))
                                : p.buffer->waitSend(nullptr, time_left(deadline));
      if (!ok) throw gloo::IoException("the operation was aborted");
    }
    return OkStatus();
  } catch (const std::exception& e) {
    first_error = e.what();
  }
  // Which transfers are still pending? A finished buffer returns at once; a pending one throws
  // the error its connection holds (by now every connection of the context holds one: Gloo
  // closes them all when a wait times out, and a 1 ms wait here times out if nothing has yet).
  std::vector<int> timed_out_recv, timed_out_send;
  std::string broken;
  for (size_t i = done; i < posted.size(); ++i) {
    Posted& p = posted[i];
    try {
      p.is_recv ? p.buffer->waitRecv(nullptr, std::chrono::milliseconds(1))
                : p.buffer->waitSend(nullptr, std::chrono::milliseconds(1));
    } catch (const std::exception& e) {
      const std::string m = e.what();
      if (!is_local_abort(m)) {
        if (broken.empty())
          broken = "connection to rank " + std::to_string(p.peer) + " failed (" +
                   strip_gloo_location(m) + ")";
      } else {
        (p.is_recv ? timed_out_recv : timed_out_send).push_back(p.peer);
      }
    }
  }
  if (!broken.empty()) return IoError(broken);
  if (!timed_out_recv.empty() || !timed_out_send.empty()) {
    std::string m = "timed out";
    if (!timed_out_recv.empty()) m += " waiting for data from " + peer_list(timed_out_recv);
    if (!timed_out_send.empty())
      m += std::string(timed_out_recv.empty() ? "" : ";") + " waiting for " +
           peer_list(timed_out_send) + " to take this rank's data";
    return IoError(m);
  }
  return IoError(strip_gloo_location(first_error));
}

Status GlooChannel::exchange_bound(std::span<const PeerTransfer> sends,
                                   std::span<const PeerTransfer> recvs) {
  // Two slots: one per direction on each connection. A bound buffer unregisters its slot from
  // the connection when destroyed, whichever direction it served, so a send and a receive on
  // one connection must never share a slot. Data from the lower rank uses `base`.
  const int base = context_->nextSlot(2);
  auto slot_from = [&](int sender, int receiver) { return base + (sender < receiver ? 0 : 1); };
  std::vector<std::pair<std::unique_ptr<gloo::transport::Buffer>, int>> rbufs, sbufs;
  int peer = -1;
  const char* waiting_for = "";
  try {
    waiting_for = "to connect";
    for (const auto& r : recvs) {
      if (r.bytes == 0) continue;
      peer = r.peer;
      rbufs.emplace_back(
          context_->getPair(r.peer)->createRecvBuffer(slot_from(r.peer, rank_), r.data, r.bytes),
          r.peer);
    }
    for (const auto& t : sends) {
      if (t.bytes == 0) continue;
      peer = t.peer;
      sbufs.emplace_back(
          context_->getPair(t.peer)->createSendBuffer(slot_from(rank_, t.peer), t.data, t.bytes),
          t.peer);
      sbufs.back().first->send();
    }
    waiting_for = "to send its data";
    for (auto& [buf, p] : rbufs) {
      peer = p;
      buf->waitRecv();
    }
    waiting_for = "to take this rank's data";
    for (auto& [buf, p] : sbufs) {
      peer = p;
      buf->waitSend();
    }
  } catch (const std::exception& e) {
    return IoError(describe_transfer_failure("exchange", peer, waiting_for, e.what()));
  }
  return OkStatus();
}

Status GlooChannel::ring_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                   Deadline deadline, Traffic& traffic) {
  if (aborted_) return IoError("the channel was aborted after an earlier failure");
  const size_t bytes = count * dtype_size(type);
  try {
    gloo::AllreduceOptions opts(context_);
    switch (type) {
      case DataType::kFloat32:
        opts.setOutput(static_cast<float*>(data), count);
        break;
      case DataType::kInt32:
        opts.setOutput(static_cast<int32_t*>(data), count);
        break;
      case DataType::kInt64:
        opts.setOutput(static_cast<int64_t*>(data), count);
        break;
      case DataType::kBFloat16:
        return Internal("ring_allreduce does not take bf16 (it would round at every hop)");
    }
    opts.setReduceFunction(gloo_reduce_fn(type, op));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(static_cast<uint32_t>(exchange_count_++));
    opts.setTimeout(time_left(deadline));
    gloo::allreduce(opts);
  } catch (const std::exception& e) {
    const int left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
    const std::string m = e.what();
    if (is_local_abort(m))
      return IoError("timed out in Gloo's ring allreduce (this rank receives from rank " +
                     std::to_string(left) + " and sends to rank " + std::to_string(right) + ")");
    return IoError("Gloo's ring allreduce failed: " + strip_gloo_location(m));
  }
  const uint64_t ring_bytes = 2 * static_cast<uint64_t>(size_ - 1) * bytes / size_;
  traffic.sent += ring_bytes;
  traffic.received += ring_bytes;
  return OkStatus();
}

}  // namespace cann::comm
