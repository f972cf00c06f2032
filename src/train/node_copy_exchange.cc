// One snapshot copy's exchange over the world (node_copy_exchange.h).
#include "train/node_copy_exchange.h"

#include <cstring>
#include <string>

namespace cann::train {
namespace {

// Pairs the point-to-point rest of an oversized copy with its receive.
constexpr uint32_t kRestTag = 0x72657374;  // "rest"
// A bound on what a peer's prefix may claim: 2^38 words (1 TiB).
constexpr int64_t kMaxWords = int64_t{1} << 38;

Status announced(int from, int64_t words, int64_t header) {
  return DataLoss("rank " + std::to_string(from) + " announced a snapshot copy of " +
                  std::to_string(words) + " words, " + std::to_string(header) +
                  " of them its header");
}

}  // namespace

Status NodeCopyExchange::start(comm::Group& world, int to, int from, bool sends, bool receives,
                               std::vector<int32_t>& out, size_t header_words,
                               std::vector<int32_t>& in, const comm::Options& opts,
                               std::chrono::milliseconds wait) {
  flight_.reset();
  const size_t W = static_cast<size_t>(world.size());
  const size_t n_out = sends ? out.size() : 0;
  if (sends) {
    if (n_out < kPrefixWords + header_words || header_words == 0)
      return Internal("a snapshot copy of " + std::to_string(n_out) + " words cannot hold its " +
                      std::to_string(header_words) + "-word header");
    const int64_t prefix[2] = {static_cast<int64_t>(n_out), static_cast<int64_t>(header_words)};
    std::memcpy(out.data(), prefix, sizeof(prefix));
  }
  if (!known_) {
    std::vector<int64_t> sizes_out(W, 0), sizes_in(W, 0);
    sizes_out[static_cast<size_t>(to)] = static_cast<int64_t>(n_out);
    if (Status s =
            world.alltoall(sizes_in.data(), sizes_out.data(), 1, comm::DataType::kInt64, opts)
                ->wait(wait);
        !s.ok())
      return s;
    const int64_t words_in = sizes_in[static_cast<size_t>(from)];
    if (!receives ? words_in != 0
                  : words_in < static_cast<int64_t>(kPrefixWords) + 1 || words_in > kMaxWords)
      return announced(from, words_in, -1);
    cap_out_ = n_out;
    cap_in_ = static_cast<size_t>(words_in);
    known_ = true;
  }
  const size_t send_n = sends ? cap_out_ : 0, recv_n = receives ? cap_in_ : 0;
  if (n_out < send_n) out.resize(send_n, 0);  // padded to the capacity the receiver expects
  in.resize(recv_n);
  std::vector<size_t> in_counts(W, 0), out_counts(W, 0);
  in_counts[static_cast<size_t>(to)] = send_n;
  out_counts[static_cast<size_t>(from)] = recv_n;
  flight_ = Flight{
      world.alltoallv(in.data(), out_counts, out.data(), in_counts, comm::DataType::kInt32, opts),
      &world,
      to,
      from,
      sends,
      receives,
      n_out,
      send_n,
      recv_n,
      &out,
      &in,
      opts};
  return OkStatus();
}

Status NodeCopyExchange::finish(std::chrono::milliseconds wait) {
  if (!flight_) return FailedPrecondition("no snapshot copy under way");
  const Flight f = std::move(*flight_);
  flight_.reset();
  received_from_ = -1;
  if (Status s = f.frames->wait(wait); !s.ok()) return s;
  std::vector<int32_t>& in = *f.in;
  words_in_ = header_in_ = 0;
  if (f.receives) {
    int64_t prefix[2];
    std::memcpy(prefix, in.data(), sizeof(prefix));
    if (prefix[0] < static_cast<int64_t>(kPrefixWords) + 1 || prefix[0] > kMaxWords ||
        prefix[1] <= 0 || prefix[1] > prefix[0] - static_cast<int64_t>(kPrefixWords))
      return announced(f.from, prefix[0], prefix[1]);
    words_in_ = prefix[0];
    header_in_ = prefix[1];
  }
  // What did not fit the capacity, point to point: the receive first, so neither side waits on
  // the other's turn.
  std::shared_ptr<comm::Work> rest_in, rest_out;
  if (f.receives && static_cast<size_t>(words_in_) > f.recv_n) {
    in.resize(static_cast<size_t>(words_in_));
    rest_in = f.world->recv(in.data() + f.recv_n, in.size() - f.recv_n, comm::DataType::kInt32,
                            f.from, kRestTag, f.opts);
  }
  if (f.sends && f.n_out > f.send_n)
    rest_out = f.world->send(f.out->data() + f.send_n, f.n_out - f.send_n, comm::DataType::kInt32,
                             f.to, kRestTag, f.opts);
  for (const auto& w : {rest_in, rest_out})
    if (w)
      if (Status s = w->wait(wait); !s.ok()) return s;
  if (f.receives) {
    in.resize(static_cast<size_t>(words_in_));
    received_from_ = f.from;
  }
  // Both sides of each pair know the true size now: the next copy's capacity.
  cap_out_ = f.sends ? f.n_out + kMarginWords : 0;
  cap_in_ = f.receives ? static_cast<size_t>(words_in_) + kMarginWords : 0;
  return OkStatus();
}

}  // namespace cann::train
