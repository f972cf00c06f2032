// Alpha-beta costs of collectives at the right level of the topology: the planner's network
// clock. The formulas are the ones next to the algorithms in comm/ (DESIGN.md,
// "Communication"); the group's place in the Megatron rank layout decides which links it uses.
//
// A group of n ranks has g members on each node it touches and spans k = n/g nodes. Collectives
// run hierarchically (inside the node, then between nodes on every member's own NIC, as NCCL's
// rail-aligned rings and HCCL's hierarchical algorithms do), so for S bytes per rank:
//
//   all-reduce     2*(g-1)/g * S/B_intra + 2*(k-1)/k * (S/g)/B_inter   (+ latency terms)
//   reduce-scatter, all-gather: half of that
//   all-to-all     max(S*(g-1)/n / B_intra, S*(n-g)/n / B_inter)
//   send/recv      alpha + S/B of the link between the two ranks
//
// plus the latency terms of collective_latency_seconds (below).
//
// Worked example: the 8-way tensor group of an A100 node (switch, 300 GB/s at efficiency 0.8 =
// 240 GB/s) all-gathering 100 MB: (7/8) * 100e6 / 240e9 = 0.36 ms. The same
// 8 ranks spread over 8 nodes (g = 1, k = 8) on 25 GB/s NICs at 0.9: (7/8) * 100e6 / 22.5e9 =
// 3.9 ms. B_intra for a full mesh (Ascend HCCS) is (g-1) links, since every device drives a
// link to each local peer at once: 8 devices with 56 GB/s links reach 7 * 56 = 392 GB/s, but
// a 2-device group only 56.
#pragma once

#include "plan/cluster.h"

namespace cann::plan {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kAllToAll };

// A process group in the rank layout: `size` members whose consecutive ranks are `stride`
// apart, optionally times an outer dimension (size2 members at stride2), e.g. the gradient
// group of expert parameters under context parallelism.
struct GroupShape {
  int size = 1;
  int stride = 1;
  int size2 = 1;
  int stride2 = 1;
  int members() const { return size * size2; }
};

// Members of the group that share a node (g above).
int members_per_node(const ClusterSpec& c, const GroupShape& g);
// Achievable bandwidth (bytes/s) one device gets for traffic to its local group peers.
double intra_bandwidth(const ClusterSpec& c, int local_members);
double inter_bandwidth(const ClusterSpec& c);
// The latency part of one collective, as NCCL's tuning model counts it (tuning.cc): the
// cluster's collective_launch_us (NCCL's base latency of a ring with its Simple protocol,
// 8.4 us, on the NVIDIA presets), then, for a ring over
// n ranks on k nodes takes n-1 steps for a reduce-scatter or all-gather, k-1 of them between
// nodes, each paying its link's latency_us; an all-reduce takes twice those or, when shorter,
// a tree's 2*((g-1) local + log2 k network) steps. Worked example: all-gather over 1536 A100s
// (192 nodes, 3.4 us per NVLink step, 9.6 us per network step): 8.4 + 1344*3.4 + 191*9.6 us
// = 6.4 ms, paid by every collective whatever its size, so thousands of small ZeRO-3 gathers
// at that scale cannot hide behind compute.
double collective_latency_seconds(const ClusterSpec& c, Collective kind, const GroupShape& g);
// Seconds for one collective over `bytes` per rank (the full buffer each rank holds; for
// all-gather, the gathered size).
double collective_seconds(const ClusterSpec& c, Collective kind, double bytes, const GroupShape& g);
// Seconds for one point-to-point message over a node's internal links or the network.
double p2p_seconds(const ClusterSpec& c, double bytes, bool inter_node);

}  // namespace cann::plan
