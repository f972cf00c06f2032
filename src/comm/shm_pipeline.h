// The chunk pipeline under every shm collective. A collective describes what to do with one
// chunk of its data in up to three steps, and the pipeline runs its chunks through each rank's
// D slot buffers, doing all the waiting between ranks:
//
//   fill(i)    this rank writes its part of chunk i into its own slot (copy-in);
//   reduce(i)  this rank reduces its share of chunk i, reading every rank's slot (optional);
//   drain(i)   this rank reads chunk i's results out of the slots (copy-out; optional).
//
// Order on every rank: fill(0); then for each chunk i: reduce(i), fill(i+1), drain(i). So the
// copy-in of chunk i+1 overlaps the peers' reduction of chunk i, and a rank that is ahead never
// idles while a buffer is free.
//
// Synchronization is by counters in each rank's control block, in global chunk numbers that
// keep growing across calls (every rank runs the same calls, so every rank agrees on them): a
// rank publishes filled = g+1 after fill, reduced = g+1 after reduce and released = g+1 once it
// no longer reads any slot of chunk g. Chunk g lives in buffer g % D of every rank, so:
//   fill(g)   waits until every rank's released >= g - D + 1 (chunk g - D has left the buffer);
//   reduce(g) waits until every rank's filled >= g + 1 (all inputs are in);
//   drain(g)  waits until every rank's reduced >= g + 1 (all shares are reduced), or, without a
//             reduce step, until filled >= g + 1.
// Worked example, D = 2, a 3-chunk call after 5 chunks of earlier calls: its chunks are g = 5,
// 6, 7 in buffers 1, 0, 1; fill(7) waits for released >= 6 on every rank, that is, for every
// rank to have drained g = 5, the previous user of buffer 1. A wait always targets a step that
// comes earlier in the common order, so the pipeline cannot deadlock, and D >= 2 lets fill(i+1)
// go ahead before this rank's own drain(i).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/shm_segment.h"
#include "comm/shm_wait.h"

namespace cann::comm::shm {

struct ChunkSteps {
  size_t chunks = 0;
  // Writes this rank's part of chunk i into `my_slot`. Empty: this rank has nothing to send
  // (broadcast on a non-root rank) and only marks the chunk filled.
  std::function<void(size_t i, std::byte* my_slot)> fill;
  // Reduces this rank's share of chunk i; slots[q] is rank q's slot holding the chunk.
  std::function<void(size_t i, std::span<std::byte* const> slots)> reduce;
  // Copies chunk i's results out of the slots.
  std::function<void(size_t i, std::span<std::byte* const> slots)> drain;
  // The rank whose fill the reduce and drain steps read (broadcast: the root), or -1 for all.
  int only_source = -1;
};

// Runs ChunkSteps for one group. Thread safety: the collective lane only.
class SlotPipeline {
 public:
  SlotPipeline(const ShmSegment& segment, const PeerWatch& peers, int rank);

  // Runs every chunk. `what` names the call in errors ("shm allreduce #12"); every wait gets
  // `timeout`. After a failure the pipeline's counters are out of step with its peers', which
  // is why a failed group is never used again.
  Status run(const ChunkSteps& steps, const std::string& what, std::chrono::milliseconds timeout);

  size_t slot_bytes() const { return segment_.layout().slot_bytes; }

 private:
  // Waits until `counter` of every rank (or of `only` when >= 0) is at least `at_least`.
  Status wait_ranks(std::atomic<uint64_t> ControlBlock::*counter, uint64_t at_least, int only);
  Status fill(const ChunkSteps& steps, uint64_t base, size_t i);

  const ShmSegment& segment_;
  const PeerWatch& peers_;
  const int rank_;
  const int world_;
  const uint64_t depth_;
  uint64_t chunks_done_ = 0;  // global chunk number of the next call's first chunk
  // Scratch for one run().
  const std::string* what_ = nullptr;
  std::chrono::milliseconds timeout_{0};
  std::vector<WaitTarget> targets_;
  std::vector<std::byte*> slots_;
};

}  // namespace cann::comm::shm
