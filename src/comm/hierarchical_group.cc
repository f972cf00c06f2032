// The hierarchical backend: shared memory inside a host, Gloo between hosts.
//
// All-reduce runs in reduce-scatter form (the scheme of Horovod's hierarchical all-reduce and
// NCCL's tree-of-rings): with L ranks per host and H hosts,
//   1. shm reduce-scatter inside the host: local rank l holds the host's sum of slice l (n/L);
//   2. Gloo all-reduce of slice l among the H ranks with local index l, one per host;
//   3. shm all-gather inside the host.
// Every local rank carries 1/L of the inter-host traffic, and the L cross-host all-reduces run
// at once. Cost: 2 (L-1)/L n over shared memory plus 2 (H-1)/H n/L over the network per rank,
// against 2 (P-1)/P n over the network for a flat ring. Operations whose data does not shrink
// under this scheme (all-to-all, send/recv, gather-type calls) use a flat Gloo group of all
// ranks.
#include <algorithm>
#include <cstring>
#include <map>

#include "comm/async_group.h"
#include "comm/backends.h"

namespace cann::comm {
namespace {

class HierarchicalGroup : public AsyncGroup {
 public:
  HierarchicalGroup(const GroupConfig& c, std::unique_ptr<Group> local,
                    std::unique_ptr<Group> cross, std::unique_ptr<Group> flat)
      : AsyncGroup(c.rank, c.size, c.debug_checks),
        config_(c),
        local_(std::move(local)),
        cross_(std::move(cross)),
        flat_(std::move(flat)) {}
  ~HierarchicalGroup() override { stop(); }

  std::string backend() const override { return "hierarchical"; }

  StatusOr<std::unique_ptr<Group>> new_subgroup(const std::vector<int>& ranks,
                                                const std::string& name) override {
    auto pos = std::find(ranks.begin(), ranks.end(), rank());
    // Every member of the parent takes part in the barrier, so non-members leave in step.
    CANN_RETURN_IF_ERROR(flat_->barrier()->wait(config_.timeout));
    if (pos == ranks.end()) return std::unique_ptr<Group>();
    GroupConfig c = config_;
    c.prefix = config_.prefix + "/sub/" + name;
    c.rank = static_cast<int>(pos - ranks.begin());
    c.size = static_cast<int>(ranks.size());
    return make_hierarchical_group(c);
  }

 protected:
  Status run_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                       const Options& opts) override {
    // One host: the shared-memory all-reduce is the whole job.
    if (cross_->size() == 1)
      return local_->allreduce(data, count, type, op, opts)->wait(opts.timeout);
    const size_t L = static_cast<size_t>(local_->size());
    const size_t esize = dtype_size(type);
    const size_t slice = (count + L - 1) / L;
    // When L does not divide count, work in a buffer padded to L equal slices (the padding
    // reduces to zero and is dropped); otherwise in place.
    char* buffer = static_cast<char*>(data);
    if (slice * L != count) {
      if (padded_.size() < slice * L * esize) padded_.resize(slice * L * esize);
      std::memcpy(padded_.data(), data, count * esize);
      std::memset(padded_.data() + count * esize, 0, (slice * L - count) * esize);
      buffer = padded_.data();
    }
    if (mine_.size() < slice * esize) mine_.resize(slice * esize);
    const ReduceOp inner = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    CANN_RETURN_IF_ERROR(
        local_->reduce_scatter(mine_.data(), buffer, slice, type, inner, opts)->wait(opts.timeout));
    CANN_RETURN_IF_ERROR(
        cross_->allreduce(mine_.data(), slice, type, inner, opts)->wait(opts.timeout));
    // Averages divide the full sum once, so integer averages round exactly as a flat group's.
    if (op == ReduceOp::kAvg) divide(mine_.data(), slice, type, static_cast<double>(size()));
    CANN_RETURN_IF_ERROR(
        local_->allgather(buffer, mine_.data(), slice, type, opts)->wait(opts.timeout));
    if (buffer != data) std::memcpy(data, buffer, count * esize);
    return OkStatus();
  }
  Status run_reduce_scatter(void* out, const void* in, size_t count, DataType type, ReduceOp op,
                            const Options& opts) override {
    return flat_->reduce_scatter(out, in, count, type, op, opts)->wait(opts.timeout);
  }
  Status run_allgather(void* out, const void* in, size_t count, DataType type,
                       const Options& opts) override {
    return flat_->allgather(out, in, count, type, opts)->wait(opts.timeout);
  }
  Status run_allgatherv(void* out, const void* in, std::span<const size_t> counts, DataType type,
                        const Options& opts) override {
    return flat_->allgatherv(out, in, counts, type, opts)->wait(opts.timeout);
  }
  Status run_broadcast(void* data, size_t count, DataType type, int root,
                       const Options& opts) override {
    return flat_->broadcast(data, count, type, root, opts)->wait(opts.timeout);
  }
  Status run_alltoall(void* out, const void* in, size_t count, DataType type,
                      const Options& opts) override {
    return flat_->alltoall(out, in, count, type, opts)->wait(opts.timeout);
  }
  Status run_alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                       std::span<const size_t> in_counts, DataType type,
                       const Options& opts) override {
    return flat_->alltoallv(out, out_counts, in, in_counts, type, opts)->wait(opts.timeout);
  }
  Status run_send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                  const Options& opts) override {
    return flat_->send(data, count, type, dst, tag, opts)->wait(opts.timeout);
  }
  Status run_recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                  const Options& opts) override {
    return flat_->recv(data, count, type, src, tag, opts)->wait(opts.timeout);
  }
  Status run_barrier(const Options& opts) override {
    return flat_->barrier(opts)->wait(opts.timeout);
  }

  GroupStats stats() const override {
    GroupStats s = AsyncGroup::stats();
    for (const Group* g : {local_.get(), cross_.get(), flat_.get()}) {
      const GroupStats gs = g->stats();
      s.bytes_sent += gs.bytes_sent;
      s.bytes_received += gs.bytes_received;
    }
    return s;
  }

 private:
  static void divide(void* data, size_t n, DataType type, double by) {
    switch (type) {
      case DataType::kFloat32: {
        float* p = static_cast<float*>(data);
        for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] / by);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t* p = static_cast<uint16_t*>(data);
        for (size_t i = 0; i < n; ++i)
          p[i] = float_to_bf16(static_cast<float>(bf16_to_float(p[i]) / by));
        break;
      }
      case DataType::kInt32: {
        int32_t* p = static_cast<int32_t*>(data);
        for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(p[i] / static_cast<int64_t>(by));
        break;
      }
      case DataType::kInt64: {
        int64_t* p = static_cast<int64_t*>(data);
        for (size_t i = 0; i < n; ++i) p[i] = p[i] / static_cast<int64_t>(by);
        break;
      }
    }
  }

  const GroupConfig config_;
  std::unique_ptr<Group> local_, cross_, flat_;
  std::vector<char> padded_, mine_;  // used on the collective lane only
};

}  // namespace

StatusOr<std::unique_ptr<Group>> make_hierarchical_group(const GroupConfig& config) {
  // Learn every rank's host through the store.
  std::shared_ptr<Store> store = prefix_store(config.store, config.prefix + "/hosts");
  CANN_RETURN_IF_ERROR(store->set(std::to_string(config.rank), config.host_id));
  std::vector<std::string> hosts(config.size);
  for (int r = 0; r < config.size; ++r) {
    CANN_ASSIGN_OR_RETURN(hosts[r], store->get(std::to_string(r), config.timeout));
  }
  // Hosts in order of their lowest rank; local ranks in rank order.
  std::vector<std::string> host_order;
  std::map<std::string, std::vector<int>> members;
  for (int r = 0; r < config.size; ++r) {
    if (!members.count(hosts[r])) host_order.push_back(hosts[r]);
    members[hosts[r]].push_back(r);
  }
  const std::vector<int>& mine = members[config.host_id];
  const size_t L = mine.size();
  for (const auto& [host, ranks] : members)
    if (ranks.size() != L)
      return InvalidArgument("hierarchical backend needs the same number of ranks on every host: " +
                             std::to_string(L) + " on this host, " + std::to_string(ranks.size()) +
                             " on host '" + host +
                             "'; hint: use --backend gloo for uneven layouts");
  const int host_index = static_cast<int>(
      std::find(host_order.begin(), host_order.end(), config.host_id) - host_order.begin());
  const int local_index =
      static_cast<int>(std::find(mine.begin(), mine.end(), config.rank) - mine.begin());

  GroupConfig local = config;
  local.backend = "shm";
  local.prefix = config.prefix + "/local" + std::to_string(host_index);
  local.rank = local_index;
  local.size = static_cast<int>(L);
  CANN_ASSIGN_OR_RETURN(auto local_group, make_shm_group(local));

  GroupConfig cross = config;
  cross.backend = "gloo";
  cross.prefix = config.prefix + "/cross" + std::to_string(local_index);
  cross.rank = host_index;
  cross.size = static_cast<int>(host_order.size());
  CANN_ASSIGN_OR_RETURN(auto cross_group, make_gloo_group(cross));

  GroupConfig flat = config;
  flat.backend = "gloo";
  flat.prefix = config.prefix + "/flat";
  CANN_ASSIGN_OR_RETURN(auto flat_group, make_gloo_group(flat));

  return std::unique_ptr<Group>(new HierarchicalGroup(
      config, std::move(local_group), std::move(cross_group), std::move(flat_group)));
}

}  // namespace cann::comm
