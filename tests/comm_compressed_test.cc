// Compressed all-reduce: the error-feedback identity, a per-step error bound, agreement of all
// ranks, and the bytes on the wire.
//
// Error feedback makes the sum of what was applied exact up to the error still held back:
//   1-bit: sum_t result_t + mean_r(e_r,T) + s_T = sum_t mean_r(x_r,t)
//   top-k: sum_t result_t + mean_r(e_r,T)       = sum_t mean_r(x_r,t)
// (e: worker error buffers, s: the server chunks' errors, placed at their chunk offsets). The
// tests check these identities to fp32 rounding over many steps, which is the property that
// lets 1-bit Adam converge like Adam.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/compressed_allreduce.h"
#include "comm_test_util.h"
#include "core/rng.h"

namespace cann::comm {
namespace {

// Deterministic per-(rank, step) input: mean 0.3 (so sums grow) plus noise.
std::vector<float> input(int rank, int step, size_t n) {
  Rng rng(1000003ULL * rank + step);
  std::vector<float> x(n);
  for (auto& v : x) v = 0.3f + rng.normal();
  return x;
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

class CompressedTest : public ::testing::TestWithParam<int> {};

TEST_P(CompressedTest, OneBitErrorFeedbackIdentity) {
  const int world = GetParam();
  const size_t n = 1000 + 37 * world;  // not a multiple of world or 32
  const int steps = 60;
  std::mutex mu;
  std::vector<double> applied(n, 0.0), truth(n, 0.0), held(n, 0.0);
  std::vector<std::vector<float>> results(world);
  test::run_group("shm", world, [&](int rank, Group& g) {
    OneBitAllreduce ar(g, n);
    std::vector<double> my_applied(n, 0.0), my_truth(n, 0.0);
    for (int t = 0; t < steps; ++t) {
      std::vector<float> x = input(rank, t, n);
      std::vector<float> data = x;
      ASSERT_TRUE(ar.run(data.data()).ok());
      for (size_t i = 0; i < n; ++i) my_applied[i] += data[i];
      if (t == steps - 1) results[rank] = data;
    }
    // Bytes: 1 bit per element plus a scale per chunk, both phases, against fp32's 2(P-1)/P*4n.
    if (world > 1) {
      const double fp32 = 2.0 * (world - 1) / world * 4.0 * n;
      EXPECT_GE(fp32 / ar.last_bytes_sent(), 16.0) << ar.last_bytes_sent();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) applied = my_applied;
    for (size_t i = 0; i < n; ++i) held[i] += ar.worker_error()[i] / world;
    const size_t begin = std::min(n, rank * ar.chunk());
    for (size_t i = begin; i < std::min(n, begin + ar.chunk()); ++i)
      held[i] += ar.server_error()[i - begin];
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(results[r], results[0]) << "ranks disagree";
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < world; ++r) {
      const auto x = input(r, t, n);
      for (size_t i = 0; i < n; ++i) truth[i] += static_cast<double>(x[i]) / world;
    }
  std::vector<double> gap(n);
  for (size_t i = 0; i < n; ++i) gap[i] = applied[i] + held[i] - truth[i];
  // fp32 rounding of 60 steps of O(1) values: 1e-3 of the sum's size is generous, while a
  // missing error term would leave a gap of the order of one step's compression error.
  EXPECT_LT(norm(gap), 1e-3 * norm(truth)) << "error feedback identity broken";
  // And the error held back is bounded: far smaller than what was applied.
  EXPECT_LT(norm(held), 0.1 * norm(truth));
}

TEST_P(CompressedTest, TopKErrorFeedbackIdentity) {
  const int world = GetParam();
  const size_t n = 777;
  const int steps = 80;
  std::mutex mu;
  std::vector<double> applied(n, 0.0), truth(n, 0.0), held(n, 0.0);
  test::run_group("shm", world, [&](int rank, Group& g) {
    TopKAllreduce ar(g, n, 0.05);
    EXPECT_EQ(ar.k(), 38u);
    std::vector<double> my_applied(n, 0.0);
    for (int t = 0; t < steps; ++t) {
      std::vector<float> data = input(rank, t, n);
      ASSERT_TRUE(ar.run(data.data()).ok());
      for (size_t i = 0; i < n; ++i) my_applied[i] += data[i];
    }
    if (world > 1) {
      EXPECT_EQ(ar.last_bytes_sent(), (world - 1) * 2 * ar.k() * 4);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) applied = my_applied;
    for (size_t i = 0; i < n; ++i) held[i] += ar.error()[i] / world;
  });
  for (int t = 0; t < steps; ++t)
    for (int r = 0; r < world; ++r) {
      const auto x = input(r, t, n);
      for (size_t i = 0; i < n; ++i) truth[i] += static_cast<double>(x[i]) / world;
    }
  std::vector<double> gap(n);
  for (size_t i = 0; i < n; ++i) gap[i] = applied[i] + held[i] - truth[i];
  EXPECT_LT(norm(gap), 1e-3 * norm(truth));
}

TEST_P(CompressedTest, OneBitSingleStepErrorBound) {
  // One 1-bit compression of v errs by at most sqrt(2) |v|: |v - s*sign(v)|^2 =
  // 2|v|^2 - 2 s |v|_1 <= 2|v|^2 with s = |v|_2/sqrt(len). The worker stage errs by at most
  // sqrt(2) mean_r |x_r| on average, and the server stage by sqrt(2) times the averaged chunk's
  // norm, itself at most mean_r |x_r|: 2 sqrt(2) = 2.83 mean_r |x_r| in all, checked as 3x.
  const int world = GetParam();
  const size_t n = 4099;
  test::run_group("shm", world, [&](int rank, Group& g) {
    OneBitAllreduce ar(g, n);
    std::vector<float> data = input(rank, 0, n);
    ASSERT_TRUE(ar.run(data.data()).ok());
    double err = 0, mean_norm = 0;
    std::vector<double> mean(n, 0.0);
    for (int r = 0; r < world; ++r) {
      const auto x = input(r, 0, n);
      double sq = 0;
      for (size_t i = 0; i < n; ++i) {
        mean[i] += static_cast<double>(x[i]) / world;
        sq += static_cast<double>(x[i]) * x[i];
      }
      mean_norm += std::sqrt(sq) / world;
    }
    for (size_t i = 0; i < n; ++i) err += (data[i] - mean[i]) * (data[i] - mean[i]);
    EXPECT_LT(std::sqrt(err), 3.0 * mean_norm);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CompressedTest, ::testing::Values(1, 2, 3, 4, 5, 8));

// The identity across a change of world size: steps on `before` ranks, their error buffers
// gathered and resharded (reshard_onebit_errors), steps on `after` ranks. Nothing held back is
// lost, so the sum of what was applied plus what is held at the end equals the sum of the
// inputs' means, as if the world had never changed. Starting the new ranks from zero errors
// instead breaks it by the held-back error at the change (checked too).
TEST(CompressedWorldChangeTest, OneBitIdentityHoldsAcrossAWorldChange) {
  const size_t n = 1003;
  for (const auto& [before, after] :
       std::vector<std::pair<int, int>>{{4, 3}, {2, 5}, {3, 1}, {1, 2}}) {
    const int steps = 20;
    std::vector<double> applied(n, 0.0), truth(n, 0.0), held(n, 0.0);
    const size_t old_chunk = (n + before - 1) / before;
    std::vector<float> worker_all(before * n), server_all(before * old_chunk);
    std::mutex mu;
    auto run = [&](int world, int first_step, bool resharded, bool keep_errors) {
      test::run_group("shm", world, [&](int rank, Group& g) {
        OneBitAllreduce ar(g, n);
        if (resharded)
          reshard_onebit_errors(n, before, worker_all.data(), server_all.data(), world, rank,
                                ar.worker_error().data(), ar.server_error().data());
        std::vector<double> mine(n, 0.0);
        for (int t = first_step; t < first_step + steps; ++t) {
          std::vector<float> data = input(rank, t, n);
          ASSERT_TRUE(ar.run(data.data()).ok());
          for (size_t i = 0; i < n; ++i) mine[i] += data[i];
        }
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0)
          for (size_t i = 0; i < n; ++i) applied[i] += mine[i];
        if (keep_errors) {
          std::copy(ar.worker_error().begin(), ar.worker_error().end(),
                    worker_all.begin() + rank * n);
          std::copy(ar.server_error().begin(), ar.server_error().end(),
                    server_all.begin() + rank * old_chunk);
        } else {
          for (size_t i = 0; i < n; ++i) held[i] += ar.worker_error()[i] / world;
          const size_t begin = std::min(n, rank * ar.chunk());
          for (size_t i = begin; i < std::min(n, begin + ar.chunk()); ++i)
            held[i] += ar.server_error()[i - begin];
        }
      });
      for (int t = first_step; t < first_step + steps; ++t)
        for (int r = 0; r < world; ++r) {
          const auto x = input(r, t, n);
          for (size_t i = 0; i < n; ++i) truth[i] += static_cast<double>(x[i]) / world;
        }
    };
    run(before, 0, false, true);
    const std::vector<double> applied_before = applied, truth_before = truth;
    run(after, steps, true, false);
    std::vector<double> gap(n);
    for (size_t i = 0; i < n; ++i) gap[i] = applied[i] + held[i] - truth[i];
    EXPECT_LT(norm(gap), 1e-3 * norm(truth)) << before << " -> " << after;
    // Dropping the errors at the change leaves a gap of their size.
    applied = applied_before;
    truth = truth_before;
    std::fill(held.begin(), held.end(), 0.0);
    run(after, steps, false, false);
    for (size_t i = 0; i < n; ++i) gap[i] = applied[i] + held[i] - truth[i];
    EXPECT_GT(norm(gap), 1e-2 * norm(truth)) << before << " -> " << after << " without reshard";
  }
}

// One step against a naive reference, on one rank: the result is sign(x) * ||x|| / sqrt(n)
// (the server's second compression of values that are all +-scale is exact) and the worker
// error is x minus it, to the float rounding of the scale's sum. A length that is not a
// multiple of 32 runs the vector and the tail paths.
TEST(OneBitAllreduceTest, OneStepMatchesTheNaiveCompression) {
  for (size_t n : {1u, 31u, 32u, 1000u, 4099u}) {
    test::run_group("shm", 1, [&](int, Group& g) {
      OneBitAllreduce ar(g, n);
      std::vector<float> x = input(0, 7, n);
      for (size_t i = 0; i < n; i += 5) x[i] = -x[i];
      x[0] = 0.0f;  // sign(0) = +1
      std::vector<float> data = x;
      ASSERT_TRUE(ar.run(data.data()).ok());
      double sq = 0;
      for (float v : x) sq += static_cast<double>(v) * v;
      const float scale = static_cast<float>(std::sqrt(sq / n));
      for (size_t i = 0; i < n; ++i) {
        const float want = x[i] >= 0.0f ? scale : -scale;
        ASSERT_NEAR(data[i], want, 1e-5f * scale) << "n " << n << " i " << i;
        ASSERT_NEAR(ar.worker_error()[i], x[i] - want, 1e-5f * scale) << "n " << n << " i " << i;
      }
    });
  }
}

// Top-k sends exactly the k largest magnitudes, ties going to the lower index, however many
// entries share the magnitude at the cut (here: a few magnitudes repeated thousands of times).
TEST(TopKAllreduceTest, SendsTheLargestMagnitudesTiesByIndex) {
  const size_t n = 20000;
  for (double ratio : {0.0001, 0.01, 0.137, 0.5, 1.0}) {
    test::run_group("shm", 1, [&](int, Group& g) {
      TopKAllreduce ar(g, n, ratio);
      Rng rng(11);
      std::vector<float> x(n);
      const float levels[] = {0.5f, 1.0f, 1.0f, 2.0f, 3.0e-8f};
      for (size_t i = 0; i < n; ++i) {
        const float v = levels[rng.next_u64() % 5];
        x[i] = (rng.next_u64() & 1) ? v : -v;
      }
      x[17] = 1e30f;
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
      const size_t k = ar.k();
      std::vector<float> want(n, 0.0f);
      for (size_t j = 0; j < k; ++j) want[order[j]] = x[order[j]];
      std::vector<float> data = x;
      ASSERT_TRUE(ar.run(data.data()).ok());
      EXPECT_EQ(data, want) << "ratio " << ratio << ", k " << k;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(ar.error()[i], x[i] - want[i]) << i;
    });
  }
}

}  // namespace
}  // namespace cann::comm
