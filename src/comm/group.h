// Group: a set of ranks that run collectives together (c10d's Backend / ProcessGroup). One
// interface, several backends: "gloo" (TCP or ibverbs, across machines), "shm" (ranks on one
// host through a shared-memory segment), "hierarchical" (shm inside a host, gloo between hosts).
//
// Every collective is asynchronous: it is queued on the group's communication thread and
// returns a Work to wait on, so compute continues while it runs. All ranks must issue the same
// collectives in the same order; each call gets the next sequence number of its group, and with
// GroupConfig::debug_checks every call first verifies that all ranks agree on (sequence, op,
// count, type, root) and fails with the disagreeing ranks named instead of corrupting memory.
//
// Buffers must stay valid and untouched until the Work completes. Counts are in elements.
// Failure: a dead or unreachable peer fails the Work with an error naming the peer's rank,
// within the call's timeout; after any failure the group is broken (every later call fails)
// and must be rebuilt under a fresh store prefix (Gloo's rule: an I/O error means "rebuild the
// communicator").
//
// Thread safety: collectives may be issued from one thread at a time per group (the order
// defines the sequence); Work objects may be waited on from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/store.h"
#include "comm/types.h"
#include "core/status.h"

namespace cann::comm {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes or `timeout` passes. Returns the operation's error, or
  // a timeout error naming the operation (the operation itself keeps its own deadline).
  virtual Status wait(std::chrono::milliseconds timeout = kDefaultTimeout) = 0;
  virtual bool is_completed() const = 0;
  // The group sequence number of this call (1-based).
  virtual uint64_t sequence() const = 0;
};

// Traffic counters of a group, for logs and the compressed collectives' "bytes on the wire".
struct GroupStats {
  uint64_t ops = 0;
  uint64_t bytes_sent = 0;      // payload bytes this rank sent to peers
  uint64_t bytes_received = 0;  // payload bytes this rank received from peers
  double busy_seconds = 0.0;    // time the communication thread spent running operations
};

class Group {
 public:
  virtual ~Group() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // data (count) in place: sum, avg (sum / size) or max over ranks. bf16 accumulates in fp32.
  virtual std::shared_ptr<Work> allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                          const Options& opts = {}) = 0;
  // in (size * count) -> out (count): rank r gets the reduction of block r.
  virtual std::shared_ptr<Work> reduce_scatter(void* out, const void* in, size_t count,
                                               DataType type, ReduceOp op,
                                               const Options& opts = {}) = 0;
  // in (count) -> out (size * count), blocks in rank order. `in` may alias out's own block.
  virtual std::shared_ptr<Work> allgather(void* out, const void* in, size_t count, DataType type,
                                          const Options& opts = {}) = 0;
  // in (counts[rank]) -> out (sum of counts), blocks in rank order.
  virtual std::shared_ptr<Work> allgatherv(void* out, const void* in,
                                           std::span<const size_t> counts, DataType type,
                                           const Options& opts = {}) = 0;
  // data (count) from root to all.
  virtual std::shared_ptr<Work> broadcast(void* data, size_t count, DataType type, int root,
                                          const Options& opts = {}) = 0;
  // in (size * count): block j goes to rank j; out (size * count): block j came from rank j.
  virtual std::shared_ptr<Work> alltoall(void* out, const void* in, size_t count, DataType type,
                                         const Options& opts = {}) = 0;
  // in_counts[j] elements of `in` (consecutive blocks) go to rank j; out_counts[j] arrive from
  // rank j into consecutive blocks of `out`. Every rank's in_counts[j] must equal rank j's
  // out_counts[rank] (exchange counts first with alltoall when they are data-dependent).
  virtual std::shared_ptr<Work> alltoallv(void* out, std::span<const size_t> out_counts,
                                          const void* in, std::span<const size_t> in_counts,
                                          DataType type, const Options& opts = {}) = 0;
  // Point to point: `tag` pairs a send with its recv (same src, dst and tag).
  virtual std::shared_ptr<Work> send(const void* data, size_t count, DataType type, int dst,
                                     uint32_t tag, const Options& opts = {}) = 0;
  virtual std::shared_ptr<Work> recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                                     const Options& opts = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const Options& opts = {}) = 0;

  // Collective over this group: builds a group of the same backend from `ranks` (ranks of this
  // group, ascending, no duplicates) under the sub-prefix `name`. Members get the new group
  // (their rank in it is their index in `ranks`); non-members get nullptr. Every rank calls it
  // in the same round; the members of one new group must pass the same name and ranks, while
  // the other ranks may pass theirs (MPI_Comm_split style: a process mesh builds every tensor
  // group in one round, each rank naming its own) or the same list (and get nullptr).
  virtual StatusOr<std::unique_ptr<Group>> new_subgroup(const std::vector<int>& ranks,
                                                        const std::string& name) = 0;

  virtual GroupStats stats() const = 0;

  // The group's name in diagnostics ("world", "dp", "tp0"...).
  virtual void set_name(const std::string& name) = 0;
  // The timeout of calls whose Options keep the default (kDefaultTimeout): the job's
  // --comm-timeout, set by create_group from GroupConfig::timeout.
  virtual void set_default_timeout(std::chrono::milliseconds timeout) = 0;
  // The last operations of this group (see flight_recorder.h).
  virtual const FlightRecorder& flight_recorder() const = 0;
};

// The gloo backend's fp32/integer all-reduce algorithm: Gloo's ring (2(P-1) rounds, each
// carrying n/P), or the direct reduce-scatter and all-gather of gloo_collectives.h (2 rounds of
// P-1 concurrent messages). bf16, and every type on ibverbs, always run direct.
enum class AllreduceAlgorithm { kRing, kDirect };
const char* allreduce_algorithm_name(AllreduceAlgorithm a);  // "ring", "direct"

// One row of a size table: messages of fewer than below_bytes bytes that no earlier row took.
struct AllreduceRule {
  size_t below_bytes = SIZE_MAX;  // SIZE_MAX: every size left
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
};

// The algorithm `rules` give a message of `bytes`: the first row that holds it; ring when none
// does (an empty table is ring at every size).
AllreduceAlgorithm allreduce_algorithm_for(const std::vector<AllreduceRule>& rules, size_t bytes);

struct GroupConfig {
  std::string backend = "gloo";  // gloo | shm | hierarchical
  std::string name = "world";    // in diagnostics and the flight recorder
  std::shared_ptr<Store> store;  // rendezvous
  std::string prefix;            // fresh for every group ("job/<id>/gen/<n>/world")
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  bool debug_checks = false;
  // gloo
  std::string transport = "tcp";  // tcp | ibverbs
  std::string hostname;           // tcp: address to listen on and advertise (default: loopback)
  std::string ib_device;          // ibverbs: device name (default: the first)
  int ib_port = 1;
  int ib_index = 0;
  int parallel_contexts = 2;             // gloo: large messages are split over this many contexts
  size_t split_bytes = size_t{4} << 20;  // gloo: messages of at least this many bytes are split
  std::vector<AllreduceRule> allreduce_rules;  // gloo: by message size; empty: ring throughout
  // shm / hierarchical: ranks with the same host_id share memory (default: this machine's
  // hostname and boot id, so ranks on one host find each other).
  std::string host_id;
};

// Builds a group; a collective over all `size` ranks, which rendezvous through the store under
// `prefix` (within `timeout`).
StatusOr<std::unique_ptr<Group>> create_group(const GroupConfig& config);

}  // namespace cann::comm
