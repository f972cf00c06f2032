// AsyncGroup: the part of every Group backend that is not about moving bytes. It owns the
// communication threads and their FIFO queues (calls run in issue order, one at a time per
// lane, while the caller computes), the per-group sequence numbers, the debug-mode agreement
// check, the traffic counters, and the rule that a failed group stays failed.
//
// Three lanes, each a FIFO with its own thread: collectives, sends, receives. Point-to-point
// calls get lanes of their own so that the pipeline pattern "send to the next stage, then
// receive from it" cannot deadlock behind a send waiting for its receiver.
//
// A backend derives from it and implements the synchronous run_* methods. run_send only ever
// runs on the send lane, run_recv on the receive lane, everything else on the collective lane;
// the backend must allow the three lanes to run concurrently. Threads start on first use; a
// backend's destructor must call stop() first, so no lane runs into a half-destroyed object.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/group.h"

namespace cann::comm {

class AsyncGroup : public Group {
 public:
  ~AsyncGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::shared_ptr<Work> allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                  const Options& opts = {}) override;
  std::shared_ptr<Work> reduce_scatter(void* out, const void* in, size_t count, DataType type,
                                       ReduceOp op, const Options& opts = {}) override;
  std::shared_ptr<Work> allgather(void* out, const void* in, size_t count, DataType type,
                                  const Options& opts = {}) override;
  std::shared_ptr<Work> allgatherv(void* out, const void* in, std::span<const size_t> counts,
                                   DataType type, const Options& opts = {}) override;
  std::shared_ptr<Work> broadcast(void* data, size_t count, DataType type, int root,
                                  const Options& opts = {}) override;
  std::shared_ptr<Work> alltoall(void* out, const void* in, size_t count, DataType type,
                                 const Options& opts = {}) override;
  std::shared_ptr<Work> alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                                  std::span<const size_t> in_counts, DataType type,
                                  const Options& opts = {}) override;
  std::shared_ptr<Work> send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                             const Options& opts = {}) override;
  std::shared_ptr<Work> recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                             const Options& opts = {}) override;
  std::shared_ptr<Work> barrier(const Options& opts = {}) override;

  GroupStats stats() const override;
  void set_name(const std::string& name) override { recorder_.set_group(name, rank_, size_); }
  const FlightRecorder& flight_recorder() const override { return recorder_; }
  void set_default_timeout(std::chrono::milliseconds timeout) override {
    default_timeout_ = timeout;
  }

 protected:
  AsyncGroup(int rank, int size, bool debug_checks);
  // Drains nothing: fails queued calls, then joins the thread. Idempotent.
  void stop();
  // Called by run_* implementations to count payload bytes.
  void count_traffic(uint64_t sent, uint64_t received);
  // The sequence number of the call running on the calling lane thread (0 on any other thread),
  // so a backend's error can name the call as its Work does ("shm allreduce #12").
  static uint64_t current_sequence();

  virtual Status run_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                               const Options& opts) = 0;
  virtual Status run_reduce_scatter(void* out, const void* in, size_t count, DataType type,
                                    ReduceOp op, const Options& opts) = 0;
  virtual Status run_allgather(void* out, const void* in, size_t count, DataType type,
                               const Options& opts) = 0;
  virtual Status run_allgatherv(void* out, const void* in, std::span<const size_t> counts,
                                DataType type, const Options& opts) = 0;
  virtual Status run_broadcast(void* data, size_t count, DataType type, int root,
                               const Options& opts) = 0;
  virtual Status run_alltoall(void* out, const void* in, size_t count, DataType type,
                              const Options& opts) = 0;
  virtual Status run_alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                               std::span<const size_t> in_counts, DataType type,
                               const Options& opts) = 0;
  virtual Status run_send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                          const Options& opts) = 0;
  virtual Status run_recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                          const Options& opts) = 0;
  virtual Status run_barrier(const Options& opts) = 0;

 private:
  // What every rank must agree on for a collective (debug mode).
  struct OpDescriptor {
    int64_t op = 0;
    int64_t count = 0;
    int64_t dtype = 0;
    int64_t arg = -1;  // reduce op, broadcast root, or p2p peer
  };
  class OpWork;
  struct Queued {
    std::shared_ptr<OpWork> work;
    OpDescriptor desc;
    bool collective = true;
    Options opts;
    std::function<Status()> run;
  };
  enum Lane { kCollectiveLane = 0, kSendLane = 1, kRecvLane = 2, kLanes = 3 };
  struct LaneState {
    std::deque<Queued> queue;
    std::thread thread;
  };

  std::shared_ptr<Work> enqueue(Lane lane, OpDescriptor desc, const Options& opts,
                                std::function<Status()> run);
  void thread_main(Lane lane);
  Options resolve(const Options& given) const;
  Status check_agreement(uint64_t seq, const OpDescriptor& desc, const Options& opts);

  const int rank_;
  const int size_;
  const bool debug_checks_;

  // mutex_ guards everything below; the communication thread and callers both take it.
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  LaneState lanes_[kLanes];
  bool stopping_ = false;
  uint64_t next_seq_ = 1;
  Status broken_;  // first failure; later calls fail with it
  GroupStats stats_;
  FlightRecorder recorder_;  // thread-safe on its own
  std::atomic<std::chrono::milliseconds> default_timeout_{kDefaultTimeout};
};

}  // namespace cann::comm
