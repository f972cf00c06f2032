// The slot pipeline's loop and waits (the protocol is described in shm_pipeline.h).
#include "comm/shm_pipeline.h"

namespace cann::comm::shm {

SlotPipeline::SlotPipeline(const ShmSegment& segment, const PeerWatch& peers, int rank)
    : segment_(segment),
      peers_(peers),
      rank_(rank),
      world_(segment.layout().world),
      depth_(static_cast<uint64_t>(segment.layout().depth)),
      slots_(static_cast<size_t>(segment.layout().world)) {
  targets_.reserve(static_cast<size_t>(world_));
}

Status SlotPipeline::wait_ranks(std::atomic<uint64_t> ControlBlock::*counter, uint64_t at_least,
                                int only) {
  targets_.clear();
  for (int q = only < 0 ? 0 : only; q < (only < 0 ? world_ : only + 1); ++q) {
    // This rank's own counters were stored by this thread, in program order.
    if (q != rank_) targets_.push_back({&(segment_.control(q).*counter), at_least, q});
  }
  return wait_for(targets_, peers_, *what_, timeout_);
}

Status SlotPipeline::fill(const ChunkSteps& steps, uint64_t base, size_t i) {
  const uint64_t g = base + i;
  if (steps.fill) {
    if (g >= depth_) CANN_RETURN_IF_ERROR(wait_ranks(&ControlBlock::released, g - depth_ + 1, -1));
    steps.fill(i, segment_.slot(rank_, static_cast<int>(g % depth_)));
  }
  segment_.control(rank_).filled.store(g + 1, std::memory_order_release);
  return OkStatus();
}

Status SlotPipeline::run(const ChunkSteps& steps, const std::string& what,
                         std::chrono::milliseconds timeout) {
  if (steps.chunks == 0) return OkStatus();
  what_ = &what;
  timeout_ = timeout;
  ControlBlock& me = segment_.control(rank_);
  const uint64_t base = chunks_done_;
  CANN_RETURN_IF_ERROR(fill(steps, base, 0));
  for (size_t i = 0; i < steps.chunks; ++i) {
    const uint64_t g = base + i;
    for (int q = 0; q < world_; ++q)
      slots_[static_cast<size_t>(q)] = segment_.slot(q, static_cast<int>(g % depth_));
    CANN_RETURN_IF_ERROR(wait_ranks(&ControlBlock::filled, g + 1, steps.only_source));
    if (steps.reduce) {
      steps.reduce(i, slots_);
      me.reduced.store(g + 1, std::memory_order_release);
    }
    if (i + 1 < steps.chunks) CANN_RETURN_IF_ERROR(fill(steps, base, i + 1));
    if (steps.drain) {
      if (steps.reduce) CANN_RETURN_IF_ERROR(wait_ranks(&ControlBlock::reduced, g + 1, -1));
      steps.drain(i, slots_);
    }
    me.released.store(g + 1, std::memory_order_release);
  }
  chunks_done_ = base + steps.chunks;
  // Calls without a reduce step still move the chunk numbers on; keeping `reduced` level with
  // them lets the next reducing call wait for exactly its own chunks.
  me.reduced.store(chunks_done_, std::memory_order_release);
  return OkStatus();
}

}  // namespace cann::comm::shm
