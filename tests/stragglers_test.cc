// The straggler detectors on synthetic per-rank timings from a seeded generator: the isolation
// forest names an outlier rank with its feature and ratio, a slow host names all its ranks,
// homogeneous ranks raise nothing, and slow links are told apart from slow ranks. The
// anomaly detectors on series are detectors_test.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/rng.h"
#include "monitor/isolation_forest.h"
#include "monitor/stragglers.h"

namespace cann::monitor {
namespace {

// ---- IsolationForest ----

// 64 ranks x (forward, backward, comm exposed, step) seconds with 2-5% noise; step is the sum
// of the others plus an optimizer step, as a trainer measures it.
std::vector<std::vector<double>> rank_timings(Rng& rng, int ranks) {
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < ranks; ++r) {
    const double forward = 0.10 * (1 + 0.02 * rng.normal());
    const double backward = 0.20 * (1 + 0.02 * rng.normal());
    const double exposed = 0.03 * (1 + 0.05 * rng.normal());
    const double step = forward + backward + exposed + 0.02 * (1 + 0.05 * rng.normal());
    rows.push_back({forward, backward, exposed, step});
  }
  return rows;
}

const std::vector<std::string> kFeatures = {"forward", "backward", "comm_exposed", "step"};

void make_straggler(std::vector<double>& row, double backward_ratio) {
  const double extra = 0.20 * backward_ratio - row[1];
  row[1] += extra;
  row[3] += extra;
}

std::vector<double> flatten(const std::vector<std::vector<double>>& rows) {
  std::vector<double> x;
  for (const auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  return x;
}

TEST(IsolationForest, PathLengthNormalization) {
  EXPECT_DOUBLE_EQ(IsolationForest::expected_path_length(1), 0.0);
  EXPECT_DOUBLE_EQ(IsolationForest::expected_path_length(2), 1.0);
  EXPECT_NEAR(IsolationForest::expected_path_length(3), 2 * 1.5 - 4.0 / 3, 1e-12);
  // Around n = 50 the exact sum hands over to the asymptotic series: no visible seam.
  double exact = 0.0;
  for (int k = 1; k <= 255; ++k) exact += 1.0 / k;
  EXPECT_NEAR(IsolationForest::expected_path_length(256), 2 * exact - 2 * 255.0 / 256, 1e-9);
}

TEST(IsolationForest, OutlierRankScoresFarAboveInliers) {
  Rng rng(21);
  auto rows = rank_timings(rng, 64);
  make_straggler(rows[17], 1.8);
  const std::vector<double> x = flatten(rows);
  IsolationForest forest;
  forest.fit(x, 64, 4);
  EXPECT_EQ(forest.sample_size(), 64);
  double max_inlier = 0.0, sum_inlier = 0.0;
  for (int r = 0; r < 64; ++r) {
    if (r == 17) continue;
    const double s = forest.score(rows[r]);
    max_inlier = std::max(max_inlier, s);
    sum_inlier += s;
  }
  const double outlier = forest.score(rows[17]);
  std::printf("outlier score %.3f, inliers mean %.3f max %.3f\n", outlier, sum_inlier / 63,
              max_inlier);
  EXPECT_GT(outlier, 0.7);
  EXPECT_LT(max_inlier, 0.6);
  EXPECT_GT(outlier - max_inlier, 0.15);
  EXPECT_LT(forest.average_path_length(rows[17]), 0.5 * forest.average_path_length(rows[0]));
}

TEST(IsolationForest, DeterministicForASeed) {
  Rng rng(22);
  const std::vector<double> x = flatten(rank_timings(rng, 300));  // 300 > psi: sub-sampled
  IsolationForest a, b;
  a.fit(x, 300, 4);
  b.fit(x, 300, 4);
  IsolationForest::Options other;
  other.seed = 99;
  IsolationForest c(other);
  c.fit(x, 300, 4);
  EXPECT_EQ(a.sample_size(), 256);
  bool any_differs = false;
  for (int r = 0; r < 300; ++r) {
    const std::span<const double> row(x.data() + 4 * r, 4);
    EXPECT_EQ(a.score(row), b.score(row));  // bit for bit
    any_differs |= a.score(row) != c.score(row);
  }
  EXPECT_TRUE(any_differs);
}

// ---- find_stragglers ----

std::vector<std::string> hosts_of(int ranks) {
  std::vector<std::string> hosts;
  for (int r = 0; r < ranks; ++r) hosts.push_back(std::string("h").append(std::to_string(r / 8)));
  return hosts;
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  return ranks;
}

TEST(Stragglers, NamesTheOutlierRankWithFeatureAndRatio) {
  Rng rng(23);
  auto rows = rank_timings(rng, 64);
  make_straggler(rows[17], 1.8);
  const auto found = find_stragglers(rows, kFeatures, iota_ranks(64), hosts_of(64));
  ASSERT_TRUE(found.ok()) << found.status().message();
  ASSERT_EQ(found->size(), 1u);
  const Straggler& s = (*found)[0];
  EXPECT_EQ(s.rank, 17);
  EXPECT_EQ(s.host, "h2");
  EXPECT_EQ(s.feature, "backward");
  EXPECT_NEAR(s.ratio, 1.8, 0.02);
  EXPECT_GT(s.score, 0.55);
  EXPECT_EQ(s.message, "rank 17 on host h2: backward 1.8x the median");
}

TEST(Stragglers, NoneAmongHomogeneousRanks) {
  for (uint64_t seed = 100; seed < 120; ++seed) {
    Rng rng(seed);
    const auto rows = rank_timings(rng, 64);
    const auto found = find_stragglers(rows, kFeatures, iota_ranks(64), hosts_of(64));
    ASSERT_TRUE(found.ok());
    EXPECT_TRUE(found->empty()) << "seed " << seed << ": " << found->front().message;
  }
}

TEST(Stragglers, ASlowHostNamesAllItsRanks) {
  Rng rng(31);
  auto rows = rank_timings(rng, 64);
  for (int r = 24; r < 32; ++r) make_straggler(rows[r], 1.5);  // host h3
  const auto found = find_stragglers(rows, kFeatures, iota_ranks(64), hosts_of(64));
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 8u);
  for (const Straggler& s : *found) {
    EXPECT_EQ(s.host, "h3");
    EXPECT_EQ(s.feature, "backward");
    std::printf("%s (score %.3f)\n", s.message.c_str(), s.score);
  }
}

TEST(Stragglers, ModestStragglerStillScoresAboveThreshold) {
  Rng rng(24);
  auto rows = rank_timings(rng, 64);
  make_straggler(rows[40], 1.35);
  const auto found = find_stragglers(rows, kFeatures, iota_ranks(64), hosts_of(64));
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].rank, 40);
  EXPECT_EQ((*found)[0].feature, "backward");
}

TEST(Stragglers, FewRanksFallBackToTheMedianRatio) {
  Rng rng(25);
  auto rows = rank_timings(rng, 4);
  const std::vector<int> ranks = {0, 1, 2, 3};
  auto none = find_stragglers(rows, kFeatures, ranks, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  make_straggler(rows[2], 1.2);  // under 1.3x: not a straggler
  none = find_stragglers(rows, kFeatures, ranks, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  make_straggler(rows[2], 1.6);
  const auto found = find_stragglers(rows, kFeatures, ranks, {});
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].rank, 2);
  EXPECT_EQ((*found)[0].score, -1.0);  // no forest under 8 ranks
  EXPECT_EQ((*found)[0].message, "rank 2: backward 1.6x the median");
}

TEST(Stragglers, TinyFeaturesNeedARealExcess) {
  Rng rng(26);
  auto rows = rank_timings(rng, 16);
  for (auto& r : rows) r[2] = 0.0004 * (1 + 0.05 * rng.normal());  // exposed comm ~0.4 ms
  rows[5][2] = 0.0012;                                             // 3x, but only 0.8 ms more
  const auto found = find_stragglers(rows, kFeatures, iota_ranks(16), hosts_of(16));
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->empty());
}

TEST(Stragglers, NonFiniteRowsLeftOutAndBadShapesRejected) {
  Rng rng(27);
  auto rows = rank_timings(rng, 16);
  rows[3][0] = std::nan("");
  make_straggler(rows[9], 2.0);
  const auto found = find_stragglers(rows, kFeatures, iota_ranks(16), hosts_of(16));
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].rank, 9);

  EXPECT_FALSE(find_stragglers(rows, kFeatures, iota_ranks(15), {}).ok());
  EXPECT_FALSE(find_stragglers(rows, kFeatures, iota_ranks(16), {"h0"}).ok());
  rows[4].pop_back();
  const auto ragged = find_stragglers(rows, kFeatures, iota_ranks(16), {});
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.status().message().find("rank 4 has 3 features"), std::string::npos);
  EXPECT_TRUE(find_stragglers({}, kFeatures, {}, {})->empty());
}

// ---- find_slow_links ----

// Every pair of n ranks at 12 GB/s, with relative noise.
std::vector<LinkBandwidth> mesh(Rng& rng, int n, double noise) {
  std::vector<LinkBandwidth> links;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) links.push_back({a, b, 12.0 * (1 + noise * rng.normal())});
  }
  return links;
}

TEST(SlowLinks, NamesASingleSlowPair) {
  Rng rng(28);
  auto links = mesh(rng, 8, 0.03);
  for (auto& l : links) {
    if (l.a == 2 && l.b == 3) l.gbps = 3.6;
  }
  const SlowLinkReport report = find_slow_links(links);
  EXPECT_NEAR(report.median_gbps, 12.0, 0.3);
  EXPECT_TRUE(report.ranks.empty());
  ASSERT_EQ(report.links.size(), 1u);
  EXPECT_EQ(report.links[0].a, 2);
  EXPECT_EQ(report.links[0].b, 3);
  EXPECT_EQ(report.links[0].message, "pair 2-3 at 0.3x the median bandwidth");
}

TEST(SlowLinks, AllLinksOfARankSlowBlamesTheRank) {
  Rng rng(29);
  // 8 ranks, every pair measured except that rank 2 talks only to 1, 3 and 6. No noise, so
  // the median is 12 and the ratios print exactly.
  std::vector<LinkBandwidth> links;
  const double slow[] = {0.3, 0.35, 0.4};
  int k = 0;
  for (const LinkBandwidth& l : mesh(rng, 8, 0.0)) {
    if (l.a != 2 && l.b != 2) {
      links.push_back(l);
    } else if (l.a == 1 || l.b == 3 || l.b == 6) {
      links.push_back({l.a, l.b, 12.0 * slow[k++]});
    }
  }
  ASSERT_EQ(k, 3);
  links.push_back({1, 0, 12.0});  // a repeated measurement, reversed: combined by median
  const SlowLinkReport report = find_slow_links(links);
  EXPECT_TRUE(report.links.empty());
  ASSERT_EQ(report.ranks.size(), 1u);
  EXPECT_EQ(report.ranks[0].rank, 2);
  EXPECT_EQ(report.ranks[0].links, 3);
  EXPECT_EQ(report.ranks[0].message,
            "rank 2: all 3 links at 0.3-0.4x the median: the rank, not a link");
}

TEST(SlowLinks, RingNeighboursOfASlowRank) {
  // A ring of 8 as ring all-reduce measures it: rank 5's two links slow, its neighbours'
  // other links fine, plus one slow pair elsewhere.
  std::vector<LinkBandwidth> links;
  for (int r = 0; r < 8; ++r) {
    const int next = (r + 1) % 8;
    double gbps = 20.0;
    if (r == 4 || r == 5) gbps = 8.0;  // 4-5 and 5-6
    if (r == 0) gbps = 9.0;            // 0-1
    links.push_back({r, next, gbps});
  }
  const SlowLinkReport report = find_slow_links(links);
  ASSERT_EQ(report.ranks.size(), 1u);
  EXPECT_EQ(report.ranks[0].message, "rank 5: both links at 0.4x the median: the rank, not a link");
  ASSERT_EQ(report.links.size(), 1u);
  EXPECT_EQ(report.links[0].message, "pair 0-1 at 0.45x the median bandwidth");
}

TEST(SlowLinks, HealthyAndDegenerateInputs) {
  Rng rng(30);
  const SlowLinkReport healthy = find_slow_links(mesh(rng, 16, 0.03));
  EXPECT_TRUE(healthy.links.empty());
  EXPECT_TRUE(healthy.ranks.empty());
  EXPECT_TRUE(find_slow_links({}).links.empty());
  const SlowLinkReport junk = find_slow_links({{1, 1, 5.0}, {0, 1, std::nan("")}, {0, 2, -1.0}});
  EXPECT_EQ(junk.median_gbps, 0.0);
  EXPECT_TRUE(junk.links.empty());
}

}  // namespace
}  // namespace cann::monitor
