// Straggler and slow-link localization; the rules and their reasons are in stragglers.h.
#include "monitor/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "monitor/isolation_forest.h"

namespace cann::monitor {
namespace {

// Two significant digits: "0.3", "1.8", "12". Enough to act on, short enough for a log line.
std::string format_ratio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2g", ratio);
  return text;
}

double median_of(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return 0.5 * (*std::max_element(v.begin(), v.begin() + mid) + upper);
}

bool all_finite(const std::vector<double>& row) {
  return std::all_of(row.begin(), row.end(), [](double v) { return std::isfinite(v); });
}

}  // namespace

StatusOr<std::vector<Straggler>> find_stragglers(
    const std::vector<std::vector<double>>& per_rank_features,
    const std::vector<std::string>& names, const std::vector<int>& ranks,
    const std::vector<std::string>& hosts, const StragglerOptions& options) {
  const size_t n = per_rank_features.size();
  const size_t d = names.size();
  if (d == 0) {
    return InvalidArgument("find_stragglers: no feature names; hint: name each column");
  }
  if (ranks.size() != n) {
    return InvalidArgument("find_stragglers: " + std::to_string(n) + " feature rows but " +
                           std::to_string(ranks.size()) +
                           " rank ids; hint: pass one rank id per row");
  }
  if (!hosts.empty() && hosts.size() != n) {
    return InvalidArgument("find_stragglers: " + std::to_string(n) + " feature rows but " +
                           std::to_string(hosts.size()) +
                           " hosts; hint: pass one host per row, or none");
  }
  for (size_t i = 0; i < n; ++i) {
    if (per_rank_features[i].size() != d) {
      return InvalidArgument("find_stragglers: rank " + std::to_string(ranks[i]) + " has " +
                             std::to_string(per_rank_features[i].size()) + " features, " +
                             std::to_string(d) + " names; hint: one value per name in each row");
    }
  }

  std::vector<size_t> kept;  // rows with every value finite
  for (size_t i = 0; i < n; ++i) {
    if (all_finite(per_rank_features[i])) kept.push_back(i);
  }
  std::vector<Straggler> stragglers;
  if (kept.size() < 2) return stragglers;  // nothing to compare against

  // (kept, d) row-major, and each column's median over the kept ranks.
  std::vector<double> x(kept.size() * d);
  for (size_t k = 0; k < kept.size(); ++k) {
    std::copy(per_rank_features[kept[k]].begin(), per_rank_features[kept[k]].end(),
              x.begin() + static_cast<std::ptrdiff_t>(k * d));
  }
  std::vector<double> medians(d);
  std::vector<double> column(kept.size());
  for (size_t j = 0; j < d; ++j) {
    for (size_t k = 0; k < kept.size(); ++k) column[k] = x[k * d + j];
    medians[j] = median_of(column);
  }

  const bool use_forest = static_cast<int>(kept.size()) >= options.min_ranks_for_forest;
  IsolationForest::Options forest_options;
  forest_options.trees = options.forest_trees;
  forest_options.seed = options.forest_seed;
  forest_options.sample_size = options.forest_sample_size > 0
                                   ? options.forest_sample_size
                                   : std::clamp(static_cast<int>(kept.size()) / 4, 16, 256);
  IsolationForest forest(forest_options);
  if (use_forest) forest.fit(x, static_cast<int>(kept.size()), static_cast<int>(d));

  for (size_t k = 0; k < kept.size(); ++k) {
    const std::span<const double> row(x.data() + k * d, d);
    // The worst feature among those far enough above a positive median to mean something.
    int worst = -1;
    double worst_ratio = 0.0;
    for (size_t j = 0; j < d; ++j) {
      if (medians[j] <= 0.0 || row[j] - medians[j] < options.min_excess) continue;
      const double ratio = row[j] / medians[j];
      if (ratio > worst_ratio) {
        worst = static_cast<int>(j);
        worst_ratio = ratio;
      }
    }
    if (worst < 0 || worst_ratio < options.min_ratio) continue;
    const double score = use_forest ? forest.score(row) : -1.0;
    if (use_forest && score <= options.score_threshold) continue;

    const size_t i = kept[k];
    Straggler s;
    s.rank = ranks[i];
    s.host = hosts.empty() ? std::string() : hosts[i];
    s.feature = names[worst];
    s.value = row[worst];
    s.median = medians[worst];
    s.ratio = worst_ratio;
    s.score = score;
    s.message = "rank " + std::to_string(s.rank);
    if (!s.host.empty()) s.message += " on host " + s.host;
    s.message += ": " + s.feature + " " + format_ratio(s.ratio) + "x the median";
    stragglers.push_back(std::move(s));
  }
  std::sort(stragglers.begin(), stragglers.end(), [](const Straggler& l, const Straggler& r) {
    return l.ratio != r.ratio ? l.ratio > r.ratio : l.rank < r.rank;
  });
  return stragglers;
}

SlowLinkReport find_slow_links(const std::vector<LinkBandwidth>& pair_bandwidths,
                               const SlowLinkOptions& options) {
  std::map<std::pair<int, int>, std::vector<double>> samples;
  for (const LinkBandwidth& link : pair_bandwidths) {
    if (link.a == link.b || !std::isfinite(link.gbps) || link.gbps < 0.0) continue;
    samples[{std::min(link.a, link.b), std::max(link.a, link.b)}].push_back(link.gbps);
  }
  SlowLinkReport report;
  if (samples.empty()) return report;

  struct Pair {
    int a, b;
    double gbps;
  };
  std::vector<Pair> pairs;
  std::vector<double> all;
  for (auto& [key, values] : samples) {
    pairs.push_back({key.first, key.second, median_of(values)});
    all.push_back(pairs.back().gbps);
  }
  report.median_gbps = median_of(all);
  if (report.median_gbps <= 0.0) return report;  // no healthy reference to compare with

  // Per rank: its links, how many are slow, and the range of their ratios.
  struct RankLinks {
    int links = 0;
    int slow = 0;
    double min_ratio = 0.0;
    double max_ratio = 0.0;
  };
  std::map<int, RankLinks> per_rank;
  auto note = [&](int rank, double ratio, bool slow) {
    RankLinks& r = per_rank[rank];
    ++r.links;
    if (!slow) return;
    r.min_ratio = r.slow == 0 ? ratio : std::min(r.min_ratio, ratio);
    r.max_ratio = r.slow == 0 ? ratio : std::max(r.max_ratio, ratio);
    ++r.slow;
  };
  for (const Pair& p : pairs) {
    const double ratio = p.gbps / report.median_gbps;
    const bool slow = ratio < options.fraction;
    note(p.a, ratio, slow);
    note(p.b, ratio, slow);
  }

  for (const auto& [rank, r] : per_rank) {
    if (r.links < options.min_links_for_rank || r.slow != r.links) continue;
    SlowRank s;
    s.rank = rank;
    s.links = r.links;
    s.min_ratio = r.min_ratio;
    s.max_ratio = r.max_ratio;
    const std::string lo = format_ratio(r.min_ratio);
    const std::string hi = format_ratio(r.max_ratio);
    const std::string range = lo == hi ? lo : lo + "-" + hi;
    s.message = "rank " + std::to_string(rank);
    if (r.links == 2) {
      s.message += ": both links at ";
    } else {
      s.message += ": all " + std::to_string(r.links) + " links at ";
    }
    s.message += range + "x the median: the rank, not a link";
    report.ranks.push_back(std::move(s));
  }
  auto is_slow_rank = [&](int rank) {
    return std::any_of(report.ranks.begin(), report.ranks.end(),
                       [rank](const SlowRank& s) { return s.rank == rank; });
  };
  for (const Pair& p : pairs) {
    const double ratio = p.gbps / report.median_gbps;
    if (ratio >= options.fraction || is_slow_rank(p.a) || is_slow_rank(p.b)) continue;
    SlowLink link;
    link.a = p.a;
    link.b = p.b;
    link.gbps = p.gbps;
    link.ratio = ratio;
    link.message = "pair " + std::to_string(p.a) + "-" + std::to_string(p.b) + " at " +
                   format_ratio(ratio) + "x the median bandwidth";
    report.links.push_back(std::move(link));
  }
  std::sort(report.links.begin(), report.links.end(),
            [](const SlowLink& l, const SlowLink& r) { return l.ratio < r.ratio; });
  std::sort(report.ranks.begin(), report.ranks.end(),
            [](const SlowRank& l, const SlowRank& r) { return l.max_ratio < r.max_ratio; });
  return report;
}

}  // namespace cann::monitor
