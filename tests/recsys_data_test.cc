// Tests for the recommendation data path: the Criteo TSV reader (good lines, missing fields,
// line endings, every kind of malformed line under both policies), AUC and log loss against
// naive references, the Zipf sampler's frequencies at 10^6 and 10^8 ids, and the synthetic
// generator's determinism and planted ceiling.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "recsys/click_batch.h"
#include "recsys/criteo.h"
#include "recsys/metrics.h"
#include "recsys/synthetic_clicks.h"
#include "test_util.h"

namespace cann::recsys {
namespace {

using test::TempDir;
using test::write_text;

// A Criteo line from its 40 fields, tab-joined.
std::string join_fields(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += '\t';
    line += fields[i];
  }
  return line;
}

// A well-formed line: label, I1..I13 = base .. base + 12, C1..C26 = hex of base * 100 + j.
std::vector<std::string> good_fields(int label, int base) {
  std::vector<std::string> f = {std::to_string(label)};
  for (int j = 0; j < kCriteoDenseFeatures; ++j) f.push_back(std::to_string(base + j));
  for (int j = 0; j < kCriteoSparseFeatures; ++j) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%08x", base * 100 + j);
    f.push_back(hex);
  }
  return f;
}

std::string good_line(int label, int base) {
  return join_fields(good_fields(label, base));
}

std::unique_ptr<CriteoReader> open_or_die(const std::string& path, BadLinePolicy policy) {
  auto reader = CriteoReader::open(path, policy);
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  return std::move(reader).value();
}

TEST(CriteoReader, ParsesFieldsIntoFeatureMajorBags) {
  TempDir dir;
  std::vector<std::string> second = good_fields(0, 7);
  second[2] = "";           // I2 missing
  second[3] = "-5";         // I3 negative
  second[4] = "1000000";    // I4 large
  second[14] = "";          // C1 missing
  second[15] = "ABCDEF01";  // C2 upper case
  write_text(dir.file("d.tsv"), good_line(1, 3) + "\n" + join_fields(second) + "\n");

  auto reader = open_or_die(dir.file("d.tsv"), BadLinePolicy::kFatal);
  ClickBatch batch;
  auto got = reader->next(8, &batch);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(*got, 2);
  EXPECT_EQ(batch.batch, 2);
  EXPECT_EQ(batch.dense_features, 13);
  EXPECT_EQ(batch.sparse_features, 26);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 0}));
  EXPECT_TRUE(batch.click_prob.empty());
  ASSERT_EQ(batch.offsets.size(), 2u * 26 + 1);
  for (size_t k = 0; k < batch.offsets.size(); ++k) EXPECT_EQ(batch.offsets[k], int64_t(k));

  // DLRM's transform log(1 + max(x, 0)), missing as 0.
  EXPECT_FLOAT_EQ(batch.dense[0], std::log(4.0f));       // row 0, I1 = 3
  EXPECT_FLOAT_EQ(batch.dense[12], std::log(16.0f));     // row 0, I13 = 15
  EXPECT_FLOAT_EQ(batch.dense[13 + 0], std::log(8.0f));  // row 1, I1 = 7
  EXPECT_FLOAT_EQ(batch.dense[13 + 1], 0.0f);            // missing
  EXPECT_FLOAT_EQ(batch.dense[13 + 2], 0.0f);            // -5
  EXPECT_FLOAT_EQ(batch.dense[13 + 3], static_cast<float>(std::log1p(1e6)));

  // Feature-major: C(f+1) of row b is ids[f * 2 + b]; hex h is id h + 1, missing is 0.
  EXPECT_EQ(batch.ids[0 * 2 + 0], 300 + 1);
  EXPECT_EQ(batch.ids[0 * 2 + 1], 0);
  EXPECT_EQ(batch.ids[1 * 2 + 0], 301 + 1);
  EXPECT_EQ(batch.ids[1 * 2 + 1], int64_t{0xABCDEF01} + 1);
  EXPECT_EQ(batch.ids[25 * 2 + 1], 725 + 1);
  EXPECT_EQ(batch.bag_begin(1, 25), 51);
  EXPECT_EQ(batch.bag_end(1, 25), 52);

  got = reader->next(8, &batch);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0);
  EXPECT_EQ(batch.batch, 0);
  EXPECT_EQ(batch.offsets, (std::vector<int64_t>{0}));
  EXPECT_EQ(reader->stats().lines, 2);
  EXPECT_EQ(reader->stats().good, 2);
  EXPECT_EQ(describe(reader->stats()), "2 lines, none malformed");
}

TEST(CriteoReader, AllFieldsEmptyIsGood) {
  float label = -1, dense[13];
  int64_t ids[26];
  std::string reason;
  std::vector<std::string> fields(40, "");
  fields[0] = "0";
  ASSERT_TRUE(parse_criteo_line(join_fields(fields), &label, dense, ids, &reason)) << reason;
  EXPECT_EQ(label, 0);
  for (float x : dense) EXPECT_EQ(x, 0);
  for (int64_t id : ids) EXPECT_EQ(id, 0);
  // 16 hex digits fit; the top values fold below 2^62.
  fields[14] = "ffffffffffffffff";
  fields[15] = "0000000000000000";
  ASSERT_TRUE(parse_criteo_line(join_fields(fields), &label, dense, ids, &reason)) << reason;
  EXPECT_GT(ids[0], 0);
  EXPECT_LT(ids[0], int64_t{1} << 62);
  EXPECT_EQ(ids[1], 1);
}

TEST(CriteoReader, CrlfAndMissingTrailingNewline) {
  TempDir dir;
  write_text(dir.file("crlf.tsv"),
             good_line(1, 1) + "\r\n" + good_line(0, 2) + "\r\n" + good_line(1, 3));
  auto reader = open_or_die(dir.file("crlf.tsv"), BadLinePolicy::kFatal);
  ClickBatch batch;
  auto got = reader->next(2, &batch);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(*got, 2);
  EXPECT_EQ(batch.ids[25 * 2 + 0], 125 + 1);  // the last field lost its "\r"
  got = reader->next(2, &batch);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(*got, 1);
  EXPECT_EQ(batch.labels[0], 1);
  EXPECT_EQ(batch.ids[25], 325 + 1);  // the unterminated last line is whole
  got = reader->next(2, &batch);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0);
}

// Many lines across the 1 MiB read chunks, in batches that do not divide the count, compared
// with parsing each line alone; then rewind and read again.
TEST(CriteoReader, LongFileInOddBatchesAndRewind) {
  TempDir dir;
  const int kLines = 12000;
  std::string text;
  Rng rng(3);
  std::vector<std::string> lines;
  for (int i = 0; i < kLines; ++i) {
    std::vector<std::string> f =
        good_fields(static_cast<int>(rng.below(2)), static_cast<int>(rng.below(1000000)));
    f[1 + rng.below(13)] = "";
    f[14 + rng.below(26)] = "";
    lines.push_back(join_fields(f));
    text += lines.back() + "\n";
  }
  write_text(dir.file("long.tsv"), text);
  auto reader = open_or_die(dir.file("long.tsv"), BadLinePolicy::kFatal);
  for (int pass = 0; pass < 2; ++pass) {
    ClickBatch batch;
    int row = 0;
    while (true) {
      auto got = reader->next(777, &batch);
      ASSERT_TRUE(got.ok()) << got.status().message();
      if (*got == 0) break;
      for (int b = 0; b < *got; ++b, ++row) {
        float label, dense[13];
        int64_t ids[26];
        std::string reason;
        ASSERT_TRUE(parse_criteo_line(lines[row], &label, dense, ids, &reason));
        ASSERT_EQ(batch.labels[b], label) << "row " << row;
        for (int j = 0; j < 13; ++j) ASSERT_EQ(batch.dense[b * 13 + j], dense[j]);
        for (int f = 0; f < 26; ++f) ASSERT_EQ(batch.ids[f * *got + b], ids[f]);
      }
    }
    EXPECT_EQ(row, kLines);
    EXPECT_EQ(reader->stats().good, kLines);
    ASSERT_TRUE(reader->rewind().ok());
    EXPECT_EQ(reader->stats().lines, 0);
  }
}

struct BadLine {
  std::string line;
  std::string reason;  // what the message must say
};

std::vector<BadLine> bad_lines() {
  std::vector<BadLine> out;
  std::vector<std::string> f = good_fields(1, 5);
  f.pop_back();
  out.push_back({join_fields(f), "39 fields (expected 40"});
  f = good_fields(1, 5);
  f.push_back("00");
  out.push_back({join_fields(f), "41 fields (expected 40"});
  out.push_back({"", "empty line"});
  f = good_fields(1, 5);
  f[0] = "2";
  out.push_back({join_fields(f), "label is \"2\" (expected 0 or 1)"});
  f = good_fields(1, 5);
  f[5] = "3.5";
  out.push_back({join_fields(f), "integer feature I5 is \"3.5\" (not an integer)"});
  f = good_fields(1, 5);
  f[13] = "99999999999999999999";
  out.push_back({join_fields(f), "integer feature I13 is \"99999999999999999999\" (out of"});
  f = good_fields(1, 5);
  f[16] = "zz12";
  out.push_back({join_fields(f), "categorical feature C3 is \"zz12\" (not hexadecimal)"});
  f = good_fields(1, 5);
  f[39] = "0123456789abcdef0";
  out.push_back({join_fields(f), "categorical feature C26 is \"0123456789abcdef0\" (more than 16"});
  return out;
}

TEST(CriteoReader, SkipCountsEveryMalformedKind) {
  TempDir dir;
  for (const BadLine& bad : bad_lines()) {
    // good, good, bad, good, bad, good: the first bad line is line 3.
    const std::string path = dir.file("skip.tsv");
    write_text(path, good_line(1, 1) + "\n" + good_line(0, 2) + "\n" + bad.line + "\n" +
                         good_line(1, 4) + "\n" + bad.line + "\n" + good_line(0, 6) + "\n");
    auto reader = open_or_die(path, BadLinePolicy::kSkip);
    ClickBatch batch;
    auto got = reader->next(10, &batch);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(*got, 4) << bad.reason;
    EXPECT_EQ(batch.labels, (std::vector<float>{1, 0, 1, 0}));
    EXPECT_EQ(batch.ids[0 * 4 + 2], 400 + 1);  // C1 of row 2 is line 4's
    const CriteoStats& s = reader->stats();
    EXPECT_EQ(s.lines, 6);
    EXPECT_EQ(s.good, 4);
    EXPECT_EQ(s.bad, 2);
    EXPECT_EQ(s.first_bad_line, 3);
    EXPECT_NE(s.first_bad_reason.find(bad.reason), std::string::npos) << s.first_bad_reason;
    const std::string line = describe(s);
    EXPECT_EQ(line.rfind("2 of 6 lines malformed (first at line 3: ", 0), 0u) << line;
    EXPECT_NE(line.find("); skipped"), std::string::npos) << line;
  }
}

TEST(CriteoReader, FatalStopsAtTheFirstMalformedLine) {
  TempDir dir;
  for (const BadLine& bad : bad_lines()) {
    const std::string path = dir.file("data.tsv");
    write_text(path, good_line(1, 1) + "\n" + good_line(0, 2) + "\n" + bad.line + "\n" +
                         good_line(1, 4) + "\n");
    auto reader = open_or_die(path, BadLinePolicy::kFatal);
    ClickBatch batch;
    auto got = reader->next(1, &batch);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, 1);
    got = reader->next(10, &batch);
    ASSERT_FALSE(got.ok()) << bad.reason;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = got.status().message();
    EXPECT_EQ(m.rfind(path + ":3: ", 0), 0u) << m;
    EXPECT_NE(m.find(bad.reason), std::string::npos) << m;
    EXPECT_NE(m.find("; hint: fix the line or pass --bad-lines skip"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(batch.batch, 0);
    EXPECT_EQ(reader->stats().first_bad_line, 3);
    EXPECT_NE(describe(reader->stats(), BadLinePolicy::kFatal).find("; stopped"),
              std::string::npos);
  }
}

TEST(CriteoReader, LongGarbageIsQuotedShort) {
  std::vector<std::string> f = good_fields(1, 5);
  f[16] = std::string(500, 'q');
  float label, dense[13];
  int64_t ids[26];
  std::string reason;
  ASSERT_FALSE(parse_criteo_line(join_fields(f), &label, dense, ids, &reason));
  EXPECT_LT(reason.size(), 120u) << reason;
  EXPECT_NE(reason.find("(500 characters)"), std::string::npos) << reason;
}

TEST(CriteoReader, MissingFileAndDirectory) {
  TempDir dir;
  auto missing = CriteoReader::open(dir.file("nope.tsv"), BadLinePolicy::kSkip);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.tsv: no such file; hint: "), std::string::npos)
      << missing.status().message();
  auto directory = CriteoReader::open(dir.path(), BadLinePolicy::kSkip);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("hint:"), std::string::npos);
}

// The definition: over all (positive, negative) pairs, 1 for the positive above, 1/2 for a tie.
double auc_by_pairs(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] != 1) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] != 0) continue;
      pairs += 1;
      wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
  }
  return wins / pairs;
}

TEST(Metrics, AucMatchesPairCountWithTies) {
  Rng rng(11);
  for (int n : {2, 3, 17, 500, 2001}) {
    for (int levels : {2, 7, 1000000}) {
      std::vector<float> s(n), y(n);
      for (int i = 0; i < n; ++i) {
        y[i] = static_cast<float>(rng.below(2));
        // Scores leaning with the label, quantized so ties are common at few levels.
        s[i] = static_cast<float>(rng.below(levels)) + y[i] * 0.3f * levels;
      }
      y[0] = 0;
      y[1] = 1;
      EXPECT_NEAR(auc(s.data(), y.data(), n), auc_by_pairs(s, y), 1e-12)
          << "n " << n << " levels " << levels;
    }
  }
  // The worked example in metrics.cc.
  std::vector<float> s = {0.1f, 0.4f, 0.4f, 0.8f}, y = {0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(auc(s.data(), y.data(), 4), 0.875);
}

TEST(Metrics, AucUndefinedCases) {
  std::vector<float> s = {0.1f, 0.2f, 0.3f}, ones = {1, 1, 1}, mixed = {0, 1, 1};
  EXPECT_TRUE(std::isnan(auc(s.data(), ones.data(), 3)));
  EXPECT_TRUE(std::isnan(auc(s.data(), mixed.data(), 0)));
  s[1] = std::nanf("");
  EXPECT_TRUE(std::isnan(auc(s.data(), mixed.data(), 3)));
}

TEST(Metrics, LogLossByHand) {
  std::vector<float> p = {0.9f, 0.2f, 0.5f, 0.0f, 1.0f}, y = {1, 0, 1, 1, 1};
  // -(log 0.9 + log 0.8 + log 0.5 + log 1e-7 + log(1 - 1e-7)) / 5: the 0 is clamped to 1e-7.
  const double want = -(std::log(double{0.9f}) + std::log1p(-double{0.2f}) + std::log(0.5) +
                        std::log(1e-7) + std::log1p(-1e-7)) /
                      5;
  EXPECT_NEAR(log_loss(p.data(), y.data(), 5), want, 1e-9);
  EXPECT_TRUE(std::isnan(log_loss(p.data(), y.data(), 0)));
}

TEST(Metrics, AccumulatorOverBatches) {
  Rng rng(5);
  const int n = 3000;
  std::vector<float> z(n), y(n), p(n);
  for (int i = 0; i < n; ++i) {
    z[i] = 3 * rng.normal();
    y[i] = rng.uniform() < 1 / (1 + std::exp(-z[i])) ? 1.0f : 0.0f;
    p[i] = static_cast<float>(1 / (1 + std::exp(-double{z[i]})));
  }
  AucAccumulator acc;
  for (int begin = 0; begin < n; begin += 701) {
    acc.add(z.data() + begin, y.data() + begin, std::min(701, n - begin));
  }
  EXPECT_EQ(acc.count(), n);
  EXPECT_DOUBLE_EQ(acc.auc(), auc(z.data(), y.data(), n));
  // Logits within |z| < 16 never reach the clamp, so the two agree up to float rounding of p.
  EXPECT_NEAR(acc.log_loss_from_logits(), log_loss(p.data(), y.data(), n), 1e-6);

  // A confident mistake: logit 100 for a non-click costs 100, not the clamp's 16.1.
  AucAccumulator one;
  float big = 100, zero = 0;
  one.add(&big, &zero, 1);
  EXPECT_NEAR(one.log_loss_from_logits(), 100.0, 1e-9);
  one.clear();
  EXPECT_EQ(one.count(), 0);
}

// sum_{k=1}^{n} k^-s: the first 10^4 terms exactly, the rest by Euler-Maclaurin (error far
// below the test's statistical tolerance).
double zipf_normalizer(double n, double s) {
  const int64_t m = static_cast<int64_t>(std::min(n, 1e4));
  double sum = 0;
  for (int64_t k = m; k >= 1; --k) sum += std::pow(static_cast<double>(k), -s);
  if (n <= static_cast<double>(m)) return sum;
  const double a = static_cast<double>(m);
  auto f = [&](double x) { return std::pow(x, -s); };
  auto df = [&](double x) { return -s * std::pow(x, -s - 1); };
  const double integral =
      s == 1 ? std::log(n / a) : (std::pow(n, 1 - s) - std::pow(a, 1 - s)) / (1 - s);
  return sum + integral + (f(n) - f(a)) / 2 + (df(n) - df(a)) / 12;
}

// Ranks 1..10 and the tail beyond rank 1000 each within 4.5 binomial standard errors of
// draws * k^-s / H(n, s), and the top ranks within 3% (a few times their standard error).
TEST(ZipfSampler, FrequenciesFollowThePowerLaw) {
  const int kDraws = 1000000;
  struct Case {
    double n, s;
  };
  for (Case c : {Case{1e6, 1.05}, Case{1e8, 1.05}, Case{1e6, 1.0}, Case{1e8, 0.7}}) {
    ZipfSampler zipf(static_cast<uint64_t>(c.n), c.s);
    Rng rng(17);
    std::vector<int64_t> top(11, 0);
    int64_t tail = 0;
    uint64_t largest = 0;
    for (int i = 0; i < kDraws; ++i) {
      const uint64_t k = zipf.sample(rng);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, static_cast<uint64_t>(c.n));
      if (k <= 10) ++top[k];
      if (k > 1000) ++tail;
      largest = std::max(largest, k);
    }
    const double h = zipf_normalizer(c.n, c.s);
    double head = 0;
    for (int k = 1; k <= 1000; ++k) head += std::pow(k, -c.s) / h;
    for (int k = 1; k <= 10; ++k) {
      const double p = std::pow(k, -c.s) / h;
      const double want = kDraws * p, sd = std::sqrt(kDraws * p * (1 - p));
      EXPECT_NEAR(top[k], want, 4.5 * sd) << "n " << c.n << " s " << c.s << " rank " << k;
      if (k <= 3) {
        EXPECT_NEAR(top[k] / want, 1.0, 0.03) << "n " << c.n << " rank " << k;
      }
    }
    const double want_tail = kDraws * (1 - head);
    EXPECT_NEAR(tail, want_tail, 4.5 * std::sqrt(want_tail * head)) << "n " << c.n;
    // The far tail is reached: no table or coarse grid caps the ranks.
    EXPECT_GT(largest, static_cast<uint64_t>(c.n / 10)) << "n " << c.n;
  }
  ZipfSampler one(1, 1.2);
  Rng rng(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one.sample(rng), 1u);
}

TEST(SyntheticClicks, LayoutAndIdRanges) {
  SyntheticClickSpec spec;
  spec.user_features = 3;
  spec.item_features = 2;
  spec.groups = 50;
  SyntheticClicks clicks(spec);
  EXPECT_EQ(clicks.sparse_features(), 5);
  EXPECT_EQ(clicks.dense_features(), 13);
  ClickBatch b;
  const int n = 500;
  clicks.fill(0, n, &b);
  EXPECT_EQ(b.batch, n);
  EXPECT_EQ(b.dense.size(), size_t{n} * 13);
  EXPECT_EQ(b.offsets.size(), size_t{n} * 5 + 1);
  EXPECT_EQ(b.ids.size(), size_t{n} * 5);
  EXPECT_EQ(b.click_prob.size(), size_t{n});
  for (int r = 0; r < n; ++r) {
    const int64_t user = b.ids[0 * n + r], item = b.ids[3 * n + r];
    EXPECT_GE(user, 0);
    EXPECT_LT(user, spec.users);
    EXPECT_GE(item, 0);
    EXPECT_LT(item, spec.items);
    EXPECT_LT(b.ids[1 * n + r], 50);     // user group
    EXPECT_LT(b.ids[2 * n + r], 10000);  // noise
    EXPECT_LT(b.ids[4 * n + r], 50);     // item group
    EXPECT_TRUE(b.labels[r] == 0 || b.labels[r] == 1);
    EXPECT_NEAR(b.click_prob[r], clicks.click_probability(user, item), 1e-6);
  }
  // The group is a function of the id: the same user always lands in the same group.
  for (int r = 1; r < n; ++r) {
    for (int q = 0; q < r; ++q) {
      if (b.ids[q] == b.ids[r]) {
        EXPECT_EQ(b.ids[n + q], b.ids[n + r]);
      }
    }
  }
}

TEST(SyntheticClicks, DeterministicInSeedAndIndex) {
  SyntheticClickSpec spec;
  SyntheticClicks clicks(spec), again(spec);
  ClickBatch a, b, c, whole;
  clicks.fill(1000, 64, &a);
  again.fill(1000, 64, &b);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.click_prob, b.click_prob);
  clicks.fill(1064, 64, &c);
  EXPECT_NE(a.ids, c.ids);
  EXPECT_NE(a.dense, c.dense);
  // Position n is one impression whatever batch it is read in: [1000, 1128) in one call is
  // [1000, 1064) then [1064, 1128).
  clicks.fill(1000, 128, &whole);
  for (int r = 0; r < 128; ++r) {
    const ClickBatch& part = r < 64 ? a : c;
    const int pr = r % 64;
    EXPECT_EQ(whole.click_prob[r], part.click_prob[pr]);
    EXPECT_EQ(whole.labels[r], part.labels[pr]);
    for (int f = 0; f < 4; ++f) EXPECT_EQ(whole.ids[f * 128 + r], part.ids[f * 64 + pr]);
    for (int j = 0; j < 13; ++j) EXPECT_EQ(whole.dense[r * 13 + j], part.dense[pr * 13 + j]);
  }
  spec.seed = 2;
  SyntheticClicks other(spec);
  ClickBatch d;
  other.fill(1000, 64, &d);
  EXPECT_NE(a.click_prob, d.click_prob);
}

TEST(SyntheticClicks, ClickRateAndPlantedCeiling) {
  SyntheticClickSpec spec;
  SyntheticClicks clicks(spec);
  const int n = 200000;
  ClickBatch b;
  clicks.fill(0, n, &b);
  double clicks_seen = 0, mean_p = 0, var = 0;
  for (int r = 0; r < n; ++r) {
    clicks_seen += b.labels[r];
    mean_p += b.click_prob[r];
    var += b.click_prob[r] * (1.0 - b.click_prob[r]);
  }
  // Given the p's, the click count has variance sum p(1 - p).
  EXPECT_NEAR(clicks_seen, mean_p, 3 * std::sqrt(var));
  EXPECT_GT(mean_p / n, 0.05);
  EXPECT_LT(mean_p / n, 0.6);

  const double ceiling = planted_auc(clicks, 0, n);
  EXPECT_GT(ceiling, 0.7);
  EXPECT_DOUBLE_EQ(auc(b.click_prob.data(), b.labels.data(), n), ceiling);

  Rng rng(9);
  std::vector<float> random_score(n), noisy(n);
  for (int r = 0; r < n; ++r) {
    random_score[r] = rng.uniform();
    const double p = b.click_prob[r];
    noisy[r] = static_cast<float>(std::log(p / (1 - p)) + 1.0 * rng.normal());
  }
  // AUC's standard error at this size is about 0.0015.
  EXPECT_NEAR(auc(random_score.data(), b.labels.data(), n), 0.5, 0.01);
  const double noisy_auc = auc(noisy.data(), b.labels.data(), n);
  EXPECT_LT(noisy_auc, ceiling - 0.02);
  EXPECT_GT(noisy_auc, 0.55);

  // The true p also beats predicting the mean rate everywhere.
  const double planted = planted_log_loss(clicks, 0, n);
  std::vector<float> constant(n, static_cast<float>(mean_p / n));
  EXPECT_LT(planted, log_loss(constant.data(), b.labels.data(), n) - 0.02);
  std::printf("planted AUC %.4f, log loss %.4f, click rate %.4f, p+noise AUC %.4f\n", ceiling,
              planted, clicks_seen / n, noisy_auc);
}

TEST(SyntheticClicks, ValidateNamesTheField) {
  SyntheticClickSpec spec;
  EXPECT_TRUE(validate(spec).ok());
  auto expect_bad = [](SyntheticClickSpec s, const std::string& field) {
    Status st = validate(s);
    ASSERT_FALSE(st.ok()) << field;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("hint:"), std::string::npos) << st.message();
  };
  SyntheticClickSpec s = spec;
  s.users = 0;
  expect_bad(s, "users");
  s = spec;
  s.items = int64_t{1} << 62;
  expect_bad(s, "items");
  s = spec;
  s.zipf_s = 0;
  expect_bad(s, "zipf_s");
  s = spec;
  s.latent_dim = 0;
  expect_bad(s, "latent_dim");
  s = spec;
  s.item_features = 0;
  expect_bad(s, "item_features");
  s = spec;
  s.group_share = 1.5;
  expect_bad(s, "group_share");
  s = spec;
  s.dense_noise = -1;
  expect_bad(s, "dense_noise");
}

}  // namespace
}  // namespace cann::recsys
