// The exchange that carries each snapshot's copy to the next node (node_parts.cc): every rank
// sends its words to at most one rank and receives from at most one, in one all-to-all-v over
// the world.
//
// An all-to-all-v needs every receive count in advance, and a snapshot's size is known only once
// it is formed (its header, the metadata with the step's log line, varies by a few bytes from
// step to step). Asking first costs a second world collective per snapshot, a round of waiting
// on every rank. So the sizes are exchanged once, at the first copy of a layout; from then on
// both sides of each pair use a capacity they both know, the last copy's size plus a margin,
// and a copy travels padded to it, its true size in a prefix. A copy larger than the capacity
// (a header grown by more than the margin) sends the rest point to point right after, which the
// receiver learns from the prefix; both sides then take the new size's capacity. The exchange
// is started before the rank writes its own snapshot and finished after, so the two overlap.
//
// Measured on two nodes of 2 ranks (network namespaces, tp=2 x pp=2, a snapshot every step,
// --profile): the sizes' all-to-all took 1.5 to 2.8 ms a step, the all-to-all-v 1.5 to 2.9 ms;
// without the first, the time between steps went from 2.2-2.7 ms to 1.8-2.8 ms over 3 runs. The
// frames as one point-to-point send and receive per pair instead of the all-to-all-v took
// longer (3.1 to 5.6 ms between steps), so the collective stays.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/group.h"
#include "core/status.h"

namespace cann::train {

class NodeCopyExchange {
 public:
  // Words before the payload in every frame: its length (int64) and the header's (int64).
  static constexpr size_t kPrefixWords = 4;
  // The margin over the last copy's size, in 4-byte words (16 KiB).
  static constexpr size_t kMarginWords = 4096;

  // The next exchange asks for the sizes first (a new layout, a new group).
  void reset() { known_ = false; }

  // Starts one exchange (the first of a layout waits for the sizes' all-to-all). `out` is
  // this rank's frame (kPrefixWords words left for the prefix, filled here, then the payload)
  // when `sends`, ignored otherwise; it may be padded. `to`: the rank it goes to; `from`: the
  // rank whose frame arrives when `receives`. `out` and `in` must stay until finish().
  Status start(comm::Group& world, int to, int from, bool sends, bool receives,
               std::vector<int32_t>& out, size_t header_words, std::vector<int32_t>& in,
               const comm::Options& opts, std::chrono::milliseconds wait);
  // Whether a started exchange waits for finish().
  bool under_way() const { return flight_.has_value(); }
  // Completes it: on success `in` holds the received frame, its true length, and the accessors
  // below describe it.
  Status finish(std::chrono::milliseconds wait);

  // The last finished exchange's received frame: the rank it came from (-1: none arrived) and
  // its prefix.
  int received_from() const { return received_from_; }
  int64_t received_header_words() const { return header_in_; }
  int64_t received_words() const { return words_in_; }

 private:
  // An exchange between start() and finish().
  struct Flight {
    std::shared_ptr<comm::Work> frames;
    comm::Group* world = nullptr;
    int to = 0, from = 0;
    bool sends = false, receives = false;
    size_t n_out = 0, send_n = 0, recv_n = 0;  // the frame's words, those sent, those received
    std::vector<int32_t>* out = nullptr;
    std::vector<int32_t>* in = nullptr;
    comm::Options opts;
  };

  bool known_ = false;
  size_t cap_out_ = 0, cap_in_ = 0;  // words both sides of each pair expect next time
  std::optional<Flight> flight_;
  int received_from_ = -1;
  int64_t header_in_ = 0, words_in_ = 0;
};

}  // namespace cann::train
