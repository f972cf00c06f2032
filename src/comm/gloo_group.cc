// GlooGroup: the gloo backend's Group. The algorithms are in gloo_collectives.cc and the
// transport in gloo_channel.cc; this file decides which algorithm and channel each call uses,
// splits large messages over the parallel channels, and builds groups and subgroups.
#include "comm/gloo_group.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "comm/async_group.h"
#include "comm/backends.h"
#include "comm/gloo_channel.h"
#include "comm/gloo_collectives.h"
#include "comm/gloo_failure.h"
#include "comm/gloo_reduce.h"
#include "comm/store_backends.h"

namespace cann::comm {
namespace {

char* at(void* base, size_t offset) {
  return static_cast<char*>(base) + offset;
}
const char* at(const void* base, size_t offset) {
  return static_cast<const char*>(base) + offset;
}

// Slice boundaries are multiples of this many elements (cache lines stay with one thread).
constexpr size_t kSliceGranule = 64;

}  // namespace

class GlooGroup final : public AsyncGroup {
 public:
  GlooGroup(const GroupConfig& config, const GlooOptions& options)
      : AsyncGroup(config.rank, config.size, config.debug_checks),
        config_(config),
        options_(options),
        store_(prefix_store(config.store, config.prefix)),
        failures_(store_, config.rank) {}
  ~GlooGroup() override { stop(); }

  std::string backend() const override { return "gloo"; }

  Status connect();
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
  using SliceFn = std::function<Status(GlooChannel&, size_t begin, size_t len)>;

  StatusOr<bool> join();
  Deadline deadline_for(const Options& opts) const {
    const auto t = opts.timeout == kDefaultTimeout ? config_.timeout : opts.timeout;
    return std::chrono::steady_clock::now() + t;
  }
  // Whether a collective of `bytes` per rank goes over the small-message channel: there is one,
  // it fits its buffers, and the call waits as long as the group's timeout (that channel's
  // waits cannot be shorter).
  bool small(const Options& opts, size_t bytes) const {
    return small_ != nullptr && bytes > 0 && bytes <= small_->small_capacity() &&
           (opts.timeout == kDefaultTimeout || opts.timeout >= config_.timeout);
  }
  // Runs fn over [0, n) elements: one call on channel 0, or, when `bytes` reaches the split
  // threshold, one slice per channel on threads of its own.
  Status run_sliced(size_t n, size_t bytes, const SliceFn& fn);
  // Counts the traffic and, on failure, names the culprit and aborts the group's connections.
  Status finish(const char* op, const Options& opts, const Traffic& traffic, Status s);
  Status check_peer(const char* op, int peer) const;

  const GroupConfig config_;
  const GlooOptions options_;
  const std::shared_ptr<Store> store_;  // config.store under config.prefix
  // Collective channels ([0] also carries the small messages that small_ does not) and the
  // point-to-point one.
  // Built by connect() before any call; read-only afterwards.
  std::vector<std::unique_ptr<GlooChannel>> channels_;
  std::unique_ptr<GlooChannel> p2p_;
  // Small all-reduces and all-gathers (GlooChannel::exchange_small), on connections of their
  // own: Gloo fixes a connection's send buffer at the size of the first registered-buffer
  // message it sends (it sets SO_SNDBUF, which ends the kernel's autotuning), which would
  // throttle large transfers sharing the connection about 15x. Null on ibverbs, with bound
  // buffers forced, and above GlooChannel::kSmallMaxRanks ranks.
  std::unique_ptr<GlooChannel> small_;
  GlooFailureReport failures_;
  std::mutex subgroup_mutex_;  // guards subgroup_names_
  std::set<std::string> subgroup_names_;
};

// Every rank announces its host; compare_set keeps the first announcement, so any rank on
// another host sees a mismatch and flags the group as multi-host before it counts itself in.
// Once the count reaches the size, every flag that will ever be set is set.
StatusOr<bool> GlooGroup::join() {
  const std::string me = config_.host_id;
  CANN_ASSIGN_OR_RETURN(std::string first, store_->compare_set("join/host", std::nullopt, me));
  if (first != me) CANN_RETURN_IF_ERROR(store_->set("join/multihost", "1"));
  CANN_RETURN_IF_ERROR(store_->set("join/rank/" + std::to_string(rank()), me));
  CANN_ASSIGN_OR_RETURN(const int64_t joined, store_->add("join/count", 1));
  if (joined > size())
    return FailedPrecondition("gloo group '" + config_.prefix + "': more than " +
                              std::to_string(size()) +
                              " ranks joined under this prefix; hint: "
                              "every group needs a fresh prefix (Gloo keys are write-once)");
  PollBackoff backoff(config_.timeout);
  do {
    CANN_ASSIGN_OR_RETURN(auto count, store_->try_get("join/count"));
    if (count && std::atoll(count->c_str()) >= size()) {
      CANN_ASSIGN_OR_RETURN(auto multihost, store_->try_get("join/multihost"));
      return !multihost.has_value();
    }
  } while (backoff.sleep());
  std::string missing;
  for (int r = 0; r < size(); ++r) {
    auto v = store_->try_get("join/rank/" + std::to_string(r));
    if (v.ok() && !v->has_value()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return IoError("gloo group '" + config_.prefix + "': rank(s) " + missing +
                 " did not join within " + std::to_string(config_.timeout.count()) + " ms (store " +
                 store_->address() +
                 "); hint: check that every rank started and uses the same store and prefix");
}

Status GlooGroup::connect() {
  if (size() == 1) return OkStatus();  // every call is a local copy
  CANN_ASSIGN_OR_RETURN(const bool all_local, join());
  TransportConfig t;
  t.transport = config_.transport;
  t.ib_device = config_.ib_device;
  t.ib_port = config_.ib_port;
  t.ib_index = config_.ib_index;
  t.bound_buffers = options_.bound_buffers;
  if (config_.hostname.empty() && t.transport == "tcp") {
    CANN_ASSIGN_OR_RETURN(t.hostname, default_tcp_address(all_local));
  } else {
    t.hostname = config_.hostname;
  }
  const int contexts = std::max(1, config_.parallel_contexts);
  for (int k = 0; k < contexts; ++k) {
    CANN_ASSIGN_OR_RETURN(
        auto ch, GlooChannel::connect(t, prefix_store(store_, "ctx" + std::to_string(k)), rank(),
                                      size(), config_.timeout));
    channels_.push_back(std::move(ch));
  }
  CANN_ASSIGN_OR_RETURN(
      p2p_, GlooChannel::connect(t, prefix_store(store_, "p2p"), rank(), size(), config_.timeout));
  if (GlooChannel::small_messages_fit(t, size())) {
    CANN_ASSIGN_OR_RETURN(small_, GlooChannel::connect(t, prefix_store(store_, "small"), rank(),
                                                       size(), config_.timeout,
                                                       /*small_messages=*/true));
  }
  return OkStatus();
}

Status GlooGroup::run_sliced(size_t n, size_t bytes, const SliceFn& fn) {
  const size_t k = channels_.size();
  if (k == 1 || bytes < config_.split_bytes) return fn(*channels_[0], 0, n);
  // e.g. n = 1,000,003 over 2 channels: slices of 500,032 and 499,971 elements.
  const size_t per = ((n + k - 1) / k + kSliceGranule - 1) / kSliceGranule * kSliceGranule;
  std::vector<Status> results(k);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < k && i * per < n; ++i)
    threads.emplace_back(
        [&, i] { results[i] = fn(*channels_[i], i * per, std::min(per, n - i * per)); });
  results[0] = fn(*channels_[0], 0, std::min(per, n));
  for (auto& t : threads) t.join();
  for (auto& s : results)
    if (!s.ok()) return s;
  return OkStatus();
}

Status GlooGroup::finish(const char* op, const Options& opts, const Traffic& traffic, Status s) {
  count_traffic(traffic.sent, traffic.received);
  if (s.ok()) return s;
  std::string what = std::string("gloo ") + op;
  if (!opts.tag.empty()) what += " [" + opts.tag + "]";
  what += " on rank " + std::to_string(rank()) + " of " + std::to_string(size());
  std::vector<GlooChannel*> all;
  for (auto& ch : channels_) all.push_back(ch.get());
  all.push_back(p2p_.get());
  if (small_) all.push_back(small_.get());
  return failures_.report(what, s, all);
}

Status GlooGroup::check_peer(const char* op, int peer) const {
  if (peer < 0 || peer >= size() || peer == rank())
    return InvalidArgument(std::string(op) + ": peer rank " + std::to_string(peer) +
                           " is not another rank of this group of " + std::to_string(size()));
  return OkStatus();
}

Status GlooGroup::run_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                const Options& opts) {
  if (size() == 1 || count == 0) return OkStatus();  // the reduction of one contribution
  const Deadline deadline = deadline_for(opts);
  const size_t es = dtype_size(type);
  Traffic traffic;
  if (small(opts, count * es)) {
    Status s = allreduce_small(*small_, data, count, type, op, traffic);
    return finish("allreduce", opts, traffic, std::move(s));
  }
  const bool direct =
      allreduce_algorithm_for(config_.allreduce_rules, count * es) == AllreduceAlgorithm::kDirect;
  Status s = run_sliced(count, count * es, [&](GlooChannel& ch, size_t begin, size_t len) {
    void* d = at(data, begin * es);
    if (direct || type == DataType::kBFloat16 || !ch.unbound())
      return allreduce_direct(ch, d, len, type, op, deadline, traffic);
    const ReduceOp ring_op = op == ReduceOp::kMax ? ReduceOp::kMax : ReduceOp::kSum;
    CANN_RETURN_IF_ERROR(ch.ring_allreduce(d, len, type, ring_op, deadline, traffic));
    if (op == ReduceOp::kAvg) divide_inplace(d, len, type, size());
    return OkStatus();
  });
  return finish("allreduce", opts, traffic, std::move(s));
}

Status GlooGroup::run_reduce_scatter(void* out, const void* in, size_t count, DataType type,
                                     ReduceOp op, const Options& opts) {
  const size_t es = dtype_size(type);
  if (size() == 1) {
    if (count > 0) std::memmove(out, in, count * es);
    return OkStatus();
  }
  const Deadline deadline = deadline_for(opts);
  Traffic traffic;
  Status s = run_sliced(count, count * es * size(), [&](GlooChannel& ch, size_t begin, size_t len) {
    return reduce_scatter_direct(ch, at(out, begin * es), at(in, begin * es), count, len, type, op,
                                 deadline, traffic);
  });
  return finish("reduce_scatter", opts, traffic, std::move(s));
}

Status GlooGroup::run_allgather(void* out, const void* in, size_t count, DataType type,
                                const Options& opts) {
  const size_t es = dtype_size(type);
  if (size() == 1) {
    if (count > 0 && out != in) std::memmove(out, in, count * es);
    return OkStatus();
  }
  Traffic traffic;
  if (small(opts, count * es)) {
    Status s = allgather_small(*small_, out, in, count * es, count * es, traffic);
    return finish("allgather", opts, traffic, std::move(s));
  }
  const Deadline deadline = deadline_for(opts);
  Status s = run_sliced(count, count * es * size(), [&](GlooChannel& ch, size_t begin, size_t len) {
    return allgather_direct(ch, at(out, begin * es), at(in, begin * es), count * es, len * es,
                            deadline, traffic);
  });
  return finish("allgather", opts, traffic, std::move(s));
}

Status GlooGroup::run_allgatherv(void* out, const void* in, std::span<const size_t> counts,
                                 DataType type, const Options& opts) {
  if (counts.size() != static_cast<size_t>(size()))
    return InvalidArgument("allgatherv: " + std::to_string(counts.size()) +
                           " counts for a group of " + std::to_string(size()));
  const size_t es = dtype_size(type);
  std::vector<size_t> out_bytes(size()), out_offsets(size()), in_bytes(size()), in_offsets(size());
  size_t offset = 0;
  for (int j = 0; j < size(); ++j) {
    out_bytes[j] = counts[j] * es;
    out_offsets[j] = offset;
    offset += out_bytes[j];
    in_bytes[j] = counts[rank()] * es;  // the same block to everyone
    in_offsets[j] = 0;
  }
  Traffic traffic;
  Status s;
  if (size() == 1) {
    if (in_bytes[0] > 0) std::memmove(out, in, in_bytes[0]);
  } else {
    s = alltoallv_direct(*channels_[0], out, out_bytes, out_offsets, in, in_bytes, in_offsets,
                         deadline_for(opts), traffic);
  }
  return finish("allgatherv", opts, traffic, std::move(s));
}

Status GlooGroup::run_broadcast(void* data, size_t count, DataType type, int root,
                                const Options& opts) {
  if (root < 0 || root >= size())
    return InvalidArgument("broadcast: root " + std::to_string(root) + " is outside a group of " +
                           std::to_string(size()));
  if (size() == 1 || count == 0) return OkStatus();
  const Deadline deadline = deadline_for(opts);
  const size_t es = dtype_size(type);
  Traffic traffic;
  Status s = run_sliced(count, count * es, [&](GlooChannel& ch, size_t begin, size_t len) {
    return broadcast_binomial(ch, at(data, begin * es), len * es, root, deadline, traffic);
  });
  return finish("broadcast", opts, traffic, std::move(s));
}

Status GlooGroup::run_alltoall(void* out, const void* in, size_t count, DataType type,
                               const Options& opts) {
  std::vector<size_t> counts(size(), count);
  return run_alltoallv(out, counts, in, counts, type, opts);
}

Status GlooGroup::run_alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                                std::span<const size_t> in_counts, DataType type,
                                const Options& opts) {
  const size_t p = static_cast<size_t>(size()), es = dtype_size(type);
  if (out_counts.size() != p || in_counts.size() != p)
    return InvalidArgument("alltoallv: counts must have one entry per rank (" + std::to_string(p) +
                           ")");
  std::vector<size_t> out_bytes(p), out_offsets(p), in_bytes(p), in_offsets(p);
  for (size_t j = 0, o = 0, i = 0; j < p; ++j) {
    out_bytes[j] = out_counts[j] * es;
    out_offsets[j] = o;
    o += out_bytes[j];
    in_bytes[j] = in_counts[j] * es;
    in_offsets[j] = i;
    i += in_bytes[j];
  }
  Traffic traffic;
  Status s;
  if (p == 1) {
    if (in_bytes[0] != out_bytes[0]) return InvalidArgument("alltoallv: own counts differ");
    if (in_bytes[0] > 0) std::memmove(out, in, in_bytes[0]);
  } else {
    s = alltoallv_direct(*channels_[0], out, out_bytes, out_offsets, in, in_bytes, in_offsets,
                         deadline_for(opts), traffic);
  }
  return finish("alltoallv", opts, traffic, std::move(s));
}

Status GlooGroup::run_send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                           const Options& opts) {
  CANN_RETURN_IF_ERROR(check_peer("send", dst));
  Traffic traffic;
  Status s = p2p_->send(data, count * dtype_size(type), dst, tag, deadline_for(opts), traffic);
  return finish("send", opts, traffic, std::move(s));
}

Status GlooGroup::run_recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                           const Options& opts) {
  CANN_RETURN_IF_ERROR(check_peer("recv", src));
  Traffic traffic;
  Status s = p2p_->recv(data, count * dtype_size(type), src, tag, deadline_for(opts), traffic);
  return finish("recv", opts, traffic, std::move(s));
}

Status GlooGroup::run_barrier(const Options& opts) {
  if (size() == 1) return OkStatus();
  Traffic traffic;
  return finish("barrier", opts, traffic, barrier_dissemination(*channels_[0], deadline_for(opts)));
}

StatusOr<std::unique_ptr<Group>> GlooGroup::new_subgroup(const std::vector<int>& ranks,
                                                         const std::string& name) {
  const std::string what = "new_subgroup '" + name + "'";
  if (name.empty()) return InvalidArgument("new_subgroup needs a name");
  if (ranks.empty()) return InvalidArgument(what + ": the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1]))
      return InvalidArgument(what + ": ranks must be ascending, distinct ranks of this group of " +
                             std::to_string(size()));
  {
    std::lock_guard<std::mutex> lock(subgroup_mutex_);
    if (!subgroup_names_.insert(name).second)
      return InvalidArgument(what +
                             ": the name is already used in this group; hint: Gloo keys "
                             "are write-once, so every subgroup needs a name of its own");
  }
  // The members of the new group must agree on (name, ranks): compare a hash through this
  // group. Other ranks may be building other subgroups in the same call (a process mesh: each
  // rank names its own tensor group), so only the members' hashes must equal this rank's.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (unsigned char c : name) mix(c);
  for (int r : ranks) mix(static_cast<uint64_t>(r) + 0x100);
  const int64_t mine = static_cast<int64_t>(h);
  std::vector<int64_t> all(size());
  Options opts;
  opts.tag = what;
  CANN_RETURN_IF_ERROR(
      allgather(all.data(), &mine, 1, DataType::kInt64, opts)->wait(config_.timeout));
  int disagree = -1;  // a member of this rank's list that passed something else
  for (int r : ranks)
    if (all[r] != mine) disagree = r;
  // Then every rank learns whether any rank found a disagreement, so none goes on to connect
  // a group that another rank will not join.
  const int64_t verdict = disagree;
  std::vector<int64_t> verdicts(size());
  CANN_RETURN_IF_ERROR(
      allgather(verdicts.data(), &verdict, 1, DataType::kInt64, opts)->wait(config_.timeout));
  for (int r = 0; r < size(); ++r)
    if (verdicts[r] >= 0)
      return FailedPrecondition(what + ": rank " + std::to_string(verdicts[r]) +
                                " passed a different name or rank list than rank " +
                                std::to_string(r) +
                                "; hint: the members of a subgroup must call new_subgroup with "
                                "the same name and ranks");
  const auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end()) return std::unique_ptr<Group>();
  GroupConfig c = config_;
  c.rank = static_cast<int>(it - ranks.begin());
  c.size = static_cast<int>(ranks.size());
  c.prefix = config_.prefix + "/sub/" + name;
  return make_gloo_group(c, options_);
}

StatusOr<std::unique_ptr<Group>> make_gloo_group(const GroupConfig& config,
                                                 const GlooOptions& options) {
  if (!config.store) return InvalidArgument("gloo group needs a store for rendezvous");
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size)
    return InvalidArgument("rank " + std::to_string(config.rank) + " is outside a group of size " +
                           std::to_string(config.size));
  GroupConfig c = config;
  if (c.host_id.empty()) c.host_id = default_host_id();
  auto group = std::make_unique<GlooGroup>(c, options);
  CANN_RETURN_IF_ERROR(group->connect());
  return std::unique_ptr<Group>(std::move(group));
}

StatusOr<std::unique_ptr<Group>> make_gloo_group(const GroupConfig& config) {
  return make_gloo_group(config, GlooOptions{});
}

}  // namespace cann::comm
