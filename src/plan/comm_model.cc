// Hierarchical alpha-beta collective costs (formulas and a worked example in comm_model.h).
#include "plan/comm_model.h"

#include <algorithm>
#include <cmath>

namespace cann::plan {

int members_per_node(const ClusterSpec& c, const GroupShape& g) {
  // Each dimension contributes the members that fit in a node's span of ranks: a dimension with
  // stride >= devices_per_node has one member per node.
  const int dpn = c.devices_per_node;
  auto local = [&](int size, int stride) {
    if (size <= 1) return 1;
    return std::clamp(dpn / std::max(1, stride), 1, size);
  };
  int l1 = local(g.size, g.stride);
  int l2 = 1;
  // The outer dimension only adds local members when the inner one fits inside the node.
  if (static_cast<long long>(g.size) * g.stride <= dpn) l2 = local(g.size2, g.stride2);
  return std::max(1, l1 * l2);
}

double intra_bandwidth(const ClusterSpec& c, int local_members) {
  const LinkSpec& l = c.intra_node;
  const double bw = l.bandwidth_GBps * 1e9 * l.efficiency;
  if (l.topology == IntraTopology::kFullMesh) return bw * std::max(1, local_members - 1);
  return bw;
}

double inter_bandwidth(const ClusterSpec& c) {
  return c.inter_node.bandwidth_GBps * 1e9 * c.inter_node.efficiency;
}

double collective_latency_seconds(const ClusterSpec& c, Collective kind, const GroupShape& group) {
  const int n = group.members();
  if (n <= 1) return 0;
  const int local = std::min(n, members_per_node(c, group));
  const double k = std::ceil(static_cast<double>(n) / local);  // nodes spanned
  const double a_intra = c.intra_node.latency_us * 1e-6, a_inter = c.inter_node.latency_us * 1e-6;
  // A full mesh reaches every local peer in one step; a switch-attached ring walks them.
  const bool mesh = c.intra_node.topology == IntraTopology::kFullMesh;
  const double inter_steps = k - 1;
  const double launch = c.collective_launch_us * 1e-6;
  const double intra_steps = mesh ? (local > 1 ? 1 : 0) : n - k;
  const double ring = launch + intra_steps * a_intra + inter_steps * a_inter;
  switch (kind) {
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      return ring;
    case Collective::kAllReduce: {
      // Twice the ring's steps, or NCCL's tree: up and down the local chain, then log2 k
      // levels between nodes; the library picks the faster (NCCL tuning.cc).
      const double ring2 = launch + 2 * (intra_steps * a_intra + inter_steps * a_inter);
      const double tree = launch +
                          2 * ((mesh ? (local > 1 ? 1 : 0) : local - 1) * a_intra +
                               std::ceil(std::log2(k)) * a_inter);
      return std::min(ring2, tree);
    }
    case Collective::kAllToAll:
      // Sends to every peer, posted together: the local peers in turn (one step on a mesh),
      // and one message to each other node.
      return launch + (local > 1 ? (mesh ? 1 : local - 1) * a_intra : 0) +
             inter_steps * a_inter;
  }
  return 0;
}

double collective_seconds(const ClusterSpec& c, Collective kind, double bytes,
                          const GroupShape& group) {
  const int n = group.members();
  if (n <= 1 || bytes <= 0) return 0;
  const int local = std::min(n, members_per_node(c, group));
  const double k = std::ceil(static_cast<double>(n) / local);  // nodes spanned
  const double b_intra = intra_bandwidth(c, local), b_inter = inter_bandwidth(c);
  const double g = local;
  const double latency = collective_latency_seconds(c, kind, group);
  switch (kind) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter:
    case Collective::kAllGather: {
      // One reduce-scatter or all-gather: intra phase over the full buffer, then an inter phase
      // over the node-leader shard S/g on each member's own NIC.
      double t = 0;
      if (local > 1) t += (g - 1) / g * bytes / b_intra;
      if (k > 1) t += (k - 1) / k * (bytes / g) / b_inter;
      return latency + (kind == Collective::kAllReduce ? 2 * t : t);
    }
    case Collective::kAllToAll: {
      // Every rank sends S/n to each peer: (g-1) shares stay in the node, (n-g) leave it.
      const double t_intra = local > 1 ? bytes * (g - 1) / n / b_intra : 0;
      const double t_inter = k > 1 ? bytes * (n - g) / n / b_inter : 0;
      return std::max(t_intra, t_inter) + latency;
    }
  }
  return 0;
}

double p2p_seconds(const ClusterSpec& c, double bytes, bool inter_node) {
  if (bytes <= 0) return 0;
  if (inter_node) return c.inter_node.latency_us * 1e-6 + bytes / inter_bandwidth(c);
  // A single peer link: on a full mesh that is one link, on a switch the device's whole port.
  const LinkSpec& l = c.intra_node;
  return l.latency_us * 1e-6 + bytes / (l.bandwidth_GBps * 1e9 * l.efficiency);
}

}  // namespace cann::plan
