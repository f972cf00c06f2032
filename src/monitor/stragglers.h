// "Who is slow": stragglers from per-rank timing features, and slow links from the bandwidths
// that collectives measured between pairs of ranks. Both answer in one printable line per
// finding ("rank 3 on host h2: backward 1.8x the median", "pair 2-3 at 0.3x the median
// bandwidth"). Pure functions over numbers the caller gathered; no I/O, no state.
//
// Stragglers need two signals to agree. The median-ratio rule says which feature is slow and by
// how much, and keeps the least typical rank of a healthy, tight group (every group has one)
// from being named: a 3% difference is never a straggler. The isolation forest
// (isolation_forest.h) says the rank's combination of timings stands apart from the bulk; it
// drops ranks that pass the ratio only because a feature is noisy for everyone (with 30%
// noise on one feature, 60-80% of the ranks at 1.3x the median score under the threshold).
//
// The forest's sub-sample is n/4 ranks (within 16..256), not all of them: a whole slow host
// (8 ranks of 64 at 1.5x) is a cluster, and a forest grown on every rank isolates a cluster
// slowly (masking, in the paper's terms: 0.54 at the first percentile on 64 ranks, 0.49 on
// 256). On sub-samples of n/4 such a host scores 0.57 or more at the first percentile up to
// 256 ranks, and a single 1.3x straggler 0.57 or more; homogeneous ranks have a median score
// of 0.44-0.50. Hence the threshold 0.55, just above "as isolated as a typical rank" (0.5).
// With fewer than 8 ranks a forest's sub-samples are too small for its scores to mean much
// (with n = 4 every path is at most 2 cuts long), so the ratio rule decides alone.
//
// Slow links: a link below a fraction of the median bandwidth is slow; but when every link of
// a rank is slow the rank is the cause (its NIC, its PCIe switch, a throttled host), and it is
// reported as the rank, not as a list of links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::monitor {

struct Straggler {
  int rank = 0;
  std::string host;
  std::string feature;  // the worst feature by ratio to the median rank
  double value = 0.0;   // this rank's value of that feature
  double median = 0.0;  // the median over ranks of that feature
  double ratio = 0.0;   // value / median
  double score = -1.0;  // isolation score; -1 when the ranks were too few for the forest
  std::string message;  // "rank 3 on host h2: backward 1.8x the median"
};

struct StragglerOptions {
  double score_threshold = 0.55;  // isolation score above this: stands apart (see above)
  double min_ratio = 1.3;         // the worst feature at least this times the median rank's
  // And at least this much above the median in absolute terms (seconds, for timing features):
  // a feature with a near-zero median (exposed communication when it all overlaps) has
  // meaningless ratios, 2 ms against 1 ms is not a straggler.
  double min_excess = 1e-3;
  int min_ranks_for_forest = 8;
  int forest_trees = 100;
  int forest_sample_size = 0;  // 0: n / 4 within 16..256 (and at most n)
  uint64_t forest_seed = 0x15f0;
};

// per_rank_features is (ranks, features): one row per rank, one column per name in `names`
// (larger = slower, e.g. forward s, backward s, comm exposed s, step s). ranks and hosts label
// the rows (hosts may be empty). Rows with a non-finite value are left out of the medians and
// the forest and never reported. The stragglers come back worst ratio first.
// Errors: kInvalidArgument when the shapes disagree.
StatusOr<std::vector<Straggler>> find_stragglers(
    const std::vector<std::vector<double>>& per_rank_features,
    const std::vector<std::string>& names, const std::vector<int>& ranks,
    const std::vector<std::string>& hosts, const StragglerOptions& options = {});

struct LinkBandwidth {
  int a = 0;
  int b = 0;
  double gbps = 0.0;  // measured bandwidth, GB/s
};

struct SlowLink {
  int a = 0;  // a < b
  int b = 0;
  double gbps = 0.0;
  double ratio = 0.0;   // gbps / the median over pairs
  std::string message;  // "pair 2-3 at 0.3x the median bandwidth"
};

struct SlowRank {
  int rank = 0;
  int links = 0;  // how many links it has (all of them slow)
  double min_ratio = 0.0;
  double max_ratio = 0.0;
  std::string message;  // "rank 2: all 3 links at 0.3-0.4x the median: the rank, not a link"
};

struct SlowLinkReport {
  double median_gbps = 0.0;
  std::vector<SlowLink> links;  // slow links not explained by a slow rank, slowest first
  std::vector<SlowRank> ranks;  // slowest first
};

struct SlowLinkOptions {
  double fraction = 0.5;  // slow: below this times the median bandwidth
  // A rank is blamed only when it has at least this many links and all are slow: with one
  // link, the rank and the link cannot be told apart, so the link is reported.
  int min_links_for_rank = 2;
};

// Repeated measurements of a pair (either order) are combined by their median first; pairs of
// a rank with itself and non-finite or negative bandwidths are ignored.
SlowLinkReport find_slow_links(const std::vector<LinkBandwidth>& pair_bandwidths,
                               const SlowLinkOptions& options = {});

}  // namespace cann::monitor
