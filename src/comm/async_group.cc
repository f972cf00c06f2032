// The communication thread, sequence numbers and debug-mode agreement check.
#include "comm/async_group.h"

#include <numeric>

#include "core/timer.h"

namespace cann::comm {

class AsyncGroup::OpWork : public Work {
 public:
  OpWork(uint64_t seq, std::string what) : seq_(seq), what_(std::move(what)) {}

  Status wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; }))
      return IoError(what_ + " #" + std::to_string(seq_) + " not complete after " +
                     std::to_string(timeout.count()) + " ms");
    return status_;
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  uint64_t sequence() const override { return seq_; }
  const std::string& what() const { return what_; }

  void complete(Status s) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      status_ = std::move(s);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  const uint64_t seq_;
  const std::string what_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

namespace {

enum OpCode : int64_t {
  kAllreduce = 1,
  kReduceScatter,
  kAllgather,
  kAllgatherv,
  kBroadcast,
  kAlltoall,
  kAlltoallv,
  kSend,
  kRecv,
  kBarrier
};

const char* op_name(int64_t op) {
  static const char* kNames[] = {"?",          "allreduce", "reduce_scatter", "allgather",
                                 "allgatherv", "broadcast", "alltoall",       "alltoallv",
                                 "send",       "recv",      "barrier"};
  return op >= 0 && op <= kBarrier ? kNames[op] : "?";
}

// Set by a lane thread around each call it runs; read by current_sequence().
thread_local uint64_t t_current_sequence = 0;

int64_t total(std::span<const size_t> counts) {
  return static_cast<int64_t>(std::accumulate(counts.begin(), counts.end(), size_t{0}));
}

}  // namespace

AsyncGroup::AsyncGroup(int rank, int size, bool debug_checks)
    : rank_(rank), size_(size), debug_checks_(debug_checks) {
  recorder_.set_group("group", rank, size);
}

// Calls that keep the default timeout get the group's (the job's --comm-timeout).
Options AsyncGroup::resolve(const Options& given) const {
  Options o = given;
  if (o.timeout == kDefaultTimeout) o.timeout = default_timeout_.load();
  return o;
}

AsyncGroup::~AsyncGroup() {
  stop();
}

void AsyncGroup::stop() {
  std::deque<Queued> abandoned;
  std::thread threads[kLanes];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int l = 0; l < kLanes; ++l) {
      for (auto& q : lanes_[l].queue) abandoned.push_back(std::move(q));
      lanes_[l].queue.clear();
      threads[l] = std::move(lanes_[l].thread);
    }
  }
  cv_.notify_all();
  for (auto& q : abandoned)
    q.work->complete(FailedPrecondition("group destroyed before " + q.work->what() + " ran"));
  for (auto& t : threads)
    if (t.joinable()) t.join();
}

uint64_t AsyncGroup::current_sequence() {
  return t_current_sequence;
}

void AsyncGroup::count_traffic(uint64_t sent, uint64_t received) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.bytes_sent += sent;
  stats_.bytes_received += received;
}

GroupStats AsyncGroup::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::shared_ptr<Work> AsyncGroup::enqueue(Lane lane, OpDescriptor desc, const Options& opts,
                                          std::function<Status()> run) {
  std::shared_ptr<OpWork> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t seq = next_seq_++;
    std::string what = std::string(backend()) + " " + op_name(desc.op);
    if (!opts.tag.empty()) what += " [" + opts.tag + "]";
    work = std::make_shared<OpWork>(seq, what);
    if (stopping_) {
      work->complete(FailedPrecondition(what + ": group is shut down"));
      return work;
    }
    recorder_.enqueued(
        seq, op_name(desc.op), opts.tag,
        static_cast<uint64_t>(desc.count) * dtype_size(static_cast<DataType>(desc.dtype)));
    LaneState& ls = lanes_[lane];
    ls.queue.push_back(Queued{work, desc, lane == kCollectiveLane, opts, std::move(run)});
    if (!ls.thread.joinable()) ls.thread = std::thread([this, lane] { thread_main(lane); });
  }
  cv_.notify_all();
  return work;
}

void AsyncGroup::thread_main(Lane lane) {
  std::deque<Queued>& queue = lanes_[lane].queue;
  while (true) {
    Queued q;
    Status broken;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue.empty(); });
      if (queue.empty()) return;
      q = std::move(queue.front());
      queue.pop_front();
      broken = broken_;
    }
    Status s;
    if (!broken.ok()) {
      s = FailedPrecondition(q.work->what() + " #" + std::to_string(q.work->sequence()) +
                             " not run: the group failed earlier (" + broken.message() +
                             "); hint: rebuild the group");
    } else {
      const double t0 = now_seconds();
      t_current_sequence = q.work->sequence();
      recorder_.started(q.work->sequence());
      if (debug_checks_ && q.collective) s = check_agreement(q.work->sequence(), q.desc, q.opts);
      if (s.ok()) s = q.run();
      recorder_.completed(q.work->sequence(), s.ok());
      t_current_sequence = 0;
      const double dt = now_seconds() - t0;
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.ops++;
      stats_.busy_seconds += dt;
      if (!s.ok() && broken_.ok()) broken_ = s;
    }
    q.work->complete(std::move(s));
  }
}

// Every rank publishes (sequence, op, count, type, root) through the backend's own allgather,
// so a mismatch is caught before the real operation reads or writes a single buffer.
Status AsyncGroup::check_agreement(uint64_t seq, const OpDescriptor& d, const Options& opts) {
  const int64_t mine[5] = {static_cast<int64_t>(seq), d.op, d.count, d.dtype, d.arg};
  std::vector<int64_t> all(5 * static_cast<size_t>(size_));
  Status s = run_allgather(all.data(), mine, 5, DataType::kInt64, opts);
  if (!s.ok()) return s;
  for (int r = 0; r < size_; ++r) {
    const int64_t* theirs = &all[5 * static_cast<size_t>(r)];
    if (std::equal(theirs, theirs + 5, mine)) continue;
    auto describe = [](const int64_t* v) {
      std::string arg;
      if (v[1] == kAllreduce || v[1] == kReduceScatter)
        arg = " (" + std::string(reduce_op_name(static_cast<ReduceOp>(v[4]))) + ")";
      else if (v[1] == kBroadcast)
        arg = " from root " + std::to_string(v[4]);
      return std::string(op_name(v[1])) + " #" + std::to_string(v[0]) + " of " +
             std::to_string(v[2]) + " " + std::string(dtype_name(static_cast<DataType>(v[3]))) +
             arg;
    };
    return FailedPrecondition("collective mismatch in " + backend() + " group: rank " +
                              std::to_string(rank_) + " issued " + describe(mine) + ", rank " +
                              std::to_string(r) + " issued " + describe(theirs) +
                              "; hint: every rank must issue the same collectives in the same "
                              "order");
  }
  return OkStatus();
}

std::shared_ptr<Work> AsyncGroup::allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                            const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane,
                 {kAllreduce, static_cast<int64_t>(count), static_cast<int64_t>(type),
                  static_cast<int64_t>(op)},
                 opts, [=, this] { return run_allreduce(data, count, type, op, opts); });
}

std::shared_ptr<Work> AsyncGroup::reduce_scatter(void* out, const void* in, size_t count,
                                                 DataType type, ReduceOp op, const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane,
                 {kReduceScatter, static_cast<int64_t>(count), static_cast<int64_t>(type),
                  static_cast<int64_t>(op)},
                 opts, [=, this] { return run_reduce_scatter(out, in, count, type, op, opts); });
}

std::shared_ptr<Work> AsyncGroup::allgather(void* out, const void* in, size_t count, DataType type,
                                            const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane,
                 {kAllgather, static_cast<int64_t>(count), static_cast<int64_t>(type), -1}, opts,
                 [=, this] { return run_allgather(out, in, count, type, opts); });
}

std::shared_ptr<Work> AsyncGroup::allgatherv(void* out, const void* in,
                                             std::span<const size_t> counts, DataType type,
                                             const Options& given) {
  const Options opts = resolve(given);
  auto owned = std::make_shared<std::vector<size_t>>(counts.begin(), counts.end());
  return enqueue(kCollectiveLane, {kAllgatherv, total(counts), static_cast<int64_t>(type), -1},
                 opts, [=, this] { return run_allgatherv(out, in, *owned, type, opts); });
}

std::shared_ptr<Work> AsyncGroup::broadcast(void* data, size_t count, DataType type, int root,
                                            const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane,
                 {kBroadcast, static_cast<int64_t>(count), static_cast<int64_t>(type), root}, opts,
                 [=, this] { return run_broadcast(data, count, type, root, opts); });
}

std::shared_ptr<Work> AsyncGroup::alltoall(void* out, const void* in, size_t count, DataType type,
                                           const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane,
                 {kAlltoall, static_cast<int64_t>(count), static_cast<int64_t>(type), -1}, opts,
                 [=, this] { return run_alltoall(out, in, count, type, opts); });
}

std::shared_ptr<Work> AsyncGroup::alltoallv(void* out, std::span<const size_t> out_counts,
                                            const void* in, std::span<const size_t> in_counts,
                                            DataType type, const Options& given) {
  const Options opts = resolve(given);
  auto oc = std::make_shared<std::vector<size_t>>(out_counts.begin(), out_counts.end());
  auto ic = std::make_shared<std::vector<size_t>>(in_counts.begin(), in_counts.end());
  // Per-rank counts legitimately differ; the agreement check covers op and type only.
  return enqueue(kCollectiveLane, {kAlltoallv, 0, static_cast<int64_t>(type), -1}, opts,
                 [=, this] { return run_alltoallv(out, *oc, in, *ic, type, opts); });
}

std::shared_ptr<Work> AsyncGroup::send(const void* data, size_t count, DataType type, int dst,
                                       uint32_t tag, const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kSendLane, {kSend, static_cast<int64_t>(count), static_cast<int64_t>(type), dst},
                 opts, [=, this] { return run_send(data, count, type, dst, tag, opts); });
}

std::shared_ptr<Work> AsyncGroup::recv(void* data, size_t count, DataType type, int src,
                                       uint32_t tag, const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kRecvLane, {kRecv, static_cast<int64_t>(count), static_cast<int64_t>(type), src},
                 opts, [=, this] { return run_recv(data, count, type, src, tag, opts); });
}

std::shared_ptr<Work> AsyncGroup::barrier(const Options& given) {
  const Options opts = resolve(given);
  return enqueue(kCollectiveLane, {kBarrier, 0, 0, -1}, opts,
                 [=, this] { return run_barrier(opts); });
}

}  // namespace cann::comm
