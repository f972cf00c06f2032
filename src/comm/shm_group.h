// The "shm" Group backend: ranks of one host exchanging data through one POSIX shared-memory
// segment, without the kernel or a socket in the data path. It is the fast path inside a node
// (the "hierarchical" backend uses it under Gloo between nodes).
//
// Rendezvous (make_shm_group, a collective over all ranks through the store): every rank
// publishes its host_id and checks that all agree; rank 0 creates the segment under a name
// hashed from the group prefix and a fresh random nonce, publishes the nonce, and every rank
// opens the segment, publishes its pid in its control block and reports itself attached; once
// all have attached rank 0 unlinks the name, so nothing is left in /dev/shm after a crash.
//
// Data path: collectives run through SlotPipeline (shm_pipeline.h), point-to-point messages
// through a bounded ring per (src, dst) pair (shm_mailbox.h). Every wait fails within ~10 ms of
// a peer's death, with the peer's rank and pid named, or after the call's timeout with the
// missing ranks named; a failing rank marks itself aborted so its peers stop waiting for it.
//
// Thread safety (AsyncGroup's lanes): pipeline_ is used only by the collective lane, the
// mailbox's send side only by the send lane and its receive side only by the receive lane;
// segment_, peers_ and config_ are immutable after construction; abort_mutex_ guards the
// abort record in this rank's control block, which any lane may write.
#pragma once

#include <memory>
#include <mutex>

#include "comm/async_group.h"
#include "comm/shm_mailbox.h"
#include "comm/shm_pipeline.h"
#include "comm/shm_segment.h"
#include "comm/shm_wait.h"

namespace cann::comm::shm {

// Per-rank sizes, independent of message sizes (large messages stream through in chunks).
// A 256 KiB buffer keeps a chunk's slots of both ranks in the L2/L3 caches between copy-in,
// reduction and copy-out; three buffers let the fastest rank run two chunks ahead. Mailbox
// rings are kMailboxBytes up to 8 ranks and shrink beyond, so the P x P of them stay ~P x 2 MiB.
inline constexpr size_t kSlotBytes = 256 << 10;
inline constexpr int kPipelineDepth = 3;
inline constexpr size_t kMailboxBytes = 256 << 10;

class ShmGroup final : public AsyncGroup {
 public:
  // Rendezvous as described above; config.host_id must be set (create_group defaults it).
  static StatusOr<std::unique_ptr<ShmGroup>> create(const GroupConfig& config);

  ShmGroup(const GroupConfig& config, std::unique_ptr<ShmSegment> segment);
  ~ShmGroup() override;

  std::string backend() const override { return "shm"; }
  // Members build a new shm group under config.prefix + "/sub/" + name (fresh per group);
  // non-members get nullptr without waiting.
  StatusOr<std::unique_ptr<Group>> new_subgroup(const std::vector<int>& ranks,
                                                const std::string& name) override;

 protected:
  Status run_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                       const Options& opts) override;
  Status run_reduce_scatter(void* out, const void* in, size_t count, DataType type, ReduceOp op,
                            const Options& opts) override;
  Status run_allgather(void* out, const void* in, size_t count, DataType type,
                       const Options& opts) override;
  Status run_allgatherv(void* out, const void* in, std::span<const size_t> counts, DataType type,
                        const Options& opts) override;
  Status run_broadcast(void* data, size_t count, DataType type, int root,
                       const Options& opts) override;
  Status run_alltoall(void* out, const void* in, size_t count, DataType type,
                      const Options& opts) override;
  Status run_alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                       std::span<const size_t> in_counts, DataType type,
                       const Options& opts) override;
  Status run_send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                  const Options& opts) override;
  Status run_recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                  const Options& opts) override;
  Status run_barrier(const Options& opts) override;

 private:
  // "shm allreduce #12 [grad_bucket_3]": how errors name the running call.
  std::string describe(const char* op, const Options& opts) const;
  // Runs a collective's steps; on failure marks this rank aborted (so peers stop waiting).
  Status run_steps(const ChunkSteps& steps, const char* op, const Options& opts);
  // Records the first failure in this rank's control block; returns `s`.
  Status abort_with(Status s);
  // The bodies of allgather(v) and alltoall(v); `op` names the call in errors. exchange()
  // trusts that every rank's counts agree (alltoallv checks that first) and needs the largest
  // block anywhere in the P x P matrix, which sets the chunk count every rank must agree on.
  Status gather(void* out, const void* in, std::span<const size_t> counts, DataType type,
                const char* op, const Options& opts);
  Status exchange(void* out, std::span<const size_t> out_counts, const void* in,
                  std::span<const size_t> in_counts, size_t largest_block, DataType type,
                  const char* op, const Options& opts);
  // Block layout shared by reduce_scatter and alltoall(v): a slot split into one sub-slot per
  // rank, in elements, a whole number of cache lines each.
  size_t sub_slot_elements(DataType type) const;

  const GroupConfig config_;
  const std::unique_ptr<ShmSegment> segment_;
  const PeerWatch peers_;
  SlotPipeline pipeline_;
  Mailboxes mailboxes_;
  std::mutex abort_mutex_;
  bool aborted_ = false;  // guarded by abort_mutex_
};

}  // namespace cann::comm::shm
