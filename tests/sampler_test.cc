// Tests for src/data's sampler and masking: the resumable sampler across epochs, restarts and
// world sizes, and BERT's masked-LM corruption against its stated rates.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/rng.h"
#include "data/sampler.h"

namespace cann::data {
namespace {

std::vector<int> iota_tokens(size_t n, int start = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Sampler

Sampler make_sampler(size_t n, int seq_len, uint64_t seed) {
  StatusOr<Sampler> s = Sampler::create(n, seq_len, seed);
  CANN_CHECK(s.ok()) << s.status().message();
  return std::move(s).value();
}

TEST(Sampler, WindowCount) {
  EXPECT_EQ(make_sampler(101, 10, 0).windows(), 10u);  // the last window ends at token 100
  EXPECT_EQ(make_sampler(100, 10, 0).windows(), 9u);   // window 9 would need token 100
  EXPECT_EQ(make_sampler(11, 10, 0).windows(), 1u);
  EXPECT_EQ(make_sampler(2, 1, 0).windows(), 1u);
}

TEST(Sampler, OffsetsAreWindowStartsInRange) {
  const size_t n = 1001;
  const int T = 16;
  Sampler s = make_sampler(n, T, 7);
  ASSERT_EQ(s.windows(), 62u);
  for (uint64_t i = 0; i < 5 * s.windows(); ++i) {
    const size_t off = s.offset(i);
    EXPECT_EQ(off % T, 0u);
    EXPECT_LE(off + T + 1, n);
  }
}

TEST(Sampler, EveryWindowOncePerEpoch) {
  for (size_t n : {11u, 12u, 100u, 1001u, 4099u}) {
    Sampler s = make_sampler(n, 10, 3);
    const size_t W = s.windows();
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      std::vector<size_t> seen;
      for (uint64_t i = epoch * W; i < (epoch + 1) * W; ++i) seen.push_back(s.offset(i) / 10);
      std::sort(seen.begin(), seen.end());
      std::vector<size_t> all(W);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(seen, all) << "n=" << n << " epoch " << epoch;
    }
  }
}

std::vector<size_t> epoch_order(const Sampler& s, uint64_t epoch) {
  std::vector<size_t> order;
  for (uint64_t i = 0; i < s.windows(); ++i) order.push_back(s.offset(epoch * s.windows() + i));
  return order;
}

TEST(Sampler, EpochsDifferAndSeedsDetermineTheOrder) {
  Sampler a = make_sampler(10001, 10, 42), b = make_sampler(10001, 10, 42);
  Sampler c = make_sampler(10001, 10, 43);
  // Two permutations of 1000 windows agree by chance with probability 1/1000!.
  EXPECT_NE(epoch_order(a, 0), epoch_order(a, 1));
  EXPECT_NE(epoch_order(a, 1), epoch_order(a, 2));
  EXPECT_NE(epoch_order(a, 0), epoch_order(c, 0));
  for (uint64_t e : {0u, 1u, 5u}) EXPECT_EQ(epoch_order(a, e), epoch_order(b, e));
  // Going back to an earlier epoch after the cache moved on gives the same order.
  const std::vector<size_t> first = epoch_order(a, 0);
  epoch_order(a, 9);
  EXPECT_EQ(epoch_order(a, 0), first);
}

TEST(Sampler, NextBatchCopiesShiftedWindows) {
  const int T = 8, B = 5;
  std::vector<int> tokens(203);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>(i * 31 % 257);
  Sampler s = make_sampler(tokens.size(), T, 1);
  Sampler reference = make_sampler(tokens.size(), T, 1);
  std::vector<int> inputs(B * T), targets(B * T);
  for (int step = 0; step < 12; ++step) {  // 25 windows, so batches cross epochs
    const uint64_t consumed = s.state().consumed;
    s.next_batch(tokens, B, inputs.data(), targets.data());
    for (int j = 0; j < B; ++j) {
      const size_t off = reference.offset(consumed + j);
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(inputs[j * T + t], tokens[off + t]);
        ASSERT_EQ(targets[j * T + t], tokens[off + t + 1]);
      }
    }
    EXPECT_EQ(s.state().consumed, consumed + B);
  }
}

TEST(Sampler, RestoredStateContinuesIdentically) {
  const int T = 6, B = 7;
  const std::vector<int> tokens = iota_tokens(150);  // 24 windows
  Sampler a = make_sampler(tokens.size(), T, 99);
  std::vector<int> in(B * T), tg(B * T);
  for (int step = 0; step < 5; ++step) a.next_batch(tokens, B, in.data(), tg.data());
  const SamplerState saved = a.state();
  EXPECT_EQ(saved.seed, 99u);
  EXPECT_EQ(saved.consumed, 35u);
  std::vector<int> after_a, after_b;
  for (int step = 0; step < 10; ++step) {
    a.next_batch(tokens, B, in.data(), tg.data());
    after_a.insert(after_a.end(), in.begin(), in.end());
    after_a.insert(after_a.end(), tg.begin(), tg.end());
  }
  // A fresh sampler with another seed, whose cache holds another permutation, then restored.
  Sampler b = make_sampler(tokens.size(), T, 1);
  b.next_batch(tokens, B, in.data(), tg.data());
  b.restore(saved);
  EXPECT_EQ(b.state().seed, saved.seed);
  EXPECT_EQ(b.state().consumed, saved.consumed);
  for (int step = 0; step < 10; ++step) {
    b.next_batch(tokens, B, in.data(), tg.data());
    after_b.insert(after_b.end(), in.begin(), in.end());
    after_b.insert(after_b.end(), tg.begin(), tg.end());
  }
  EXPECT_EQ(after_a, after_b);
  EXPECT_EQ(a.state().consumed, b.state().consumed);
}

// The inputs of `batch` samples per rank, world ranks per step, laid out in global sample
// order (rank r's j-th sample is global sample j * world + r of the step).
std::vector<int> run_ranks(std::vector<Sampler>& ranks, const std::vector<int>& tokens, int batch) {
  const int world = static_cast<int>(ranks.size());
  const int T = ranks[0].seq_len();
  std::vector<int> global(static_cast<size_t>(batch) * world * T);
  std::vector<int> in(batch * T), tg(batch * T);
  for (int r = 0; r < world; ++r) {
    ranks[r].next_batch(tokens, batch, in.data(), tg.data(), r, world);
    for (int j = 0; j < batch; ++j) {
      std::copy(in.begin() + j * T, in.begin() + (j + 1) * T,
                global.begin() + (static_cast<size_t>(j) * world + r) * T);
    }
  }
  return global;
}

TEST(Sampler, RanksTogetherSeeTheSingleRankSequence) {
  const int T = 4, B = 3;
  const std::vector<int> tokens = iota_tokens(4 * 37 + 1);  // 37 windows: no world divides it
  for (int world = 1; world <= 8; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    Sampler single = make_sampler(tokens.size(), T, 5);
    std::vector<Sampler> ranks(world, make_sampler(tokens.size(), T, 5));
    for (int step = 0; step < 8; ++step) {
      std::vector<int> in(B * world * T), tg(B * world * T);
      single.next_batch(tokens, B * world, in.data(), tg.data());
      ASSERT_EQ(run_ranks(ranks, tokens, B), in) << "step " << step;
      for (const Sampler& r : ranks) ASSERT_EQ(r.state().consumed, single.state().consumed);
    }
  }
}

TEST(Sampler, ReStridesToANewWorldSizeFromState) {
  // The elastic case: 2 ranks train, one dies, 3 ranks resume from rank 0's state.
  const int T = 5, B = 4;
  const std::vector<int> tokens = iota_tokens(5 * 41 + 3);
  Sampler single = make_sampler(tokens.size(), T, 11);
  std::vector<Sampler> two(2, make_sampler(tokens.size(), T, 11));
  for (int step = 0; step < 3; ++step) {
    std::vector<int> in(2 * B * T), tg(2 * B * T);
    single.next_batch(tokens, 2 * B, in.data(), tg.data());
    ASSERT_EQ(run_ranks(two, tokens, B), in);
  }
  std::vector<Sampler> three(3, make_sampler(tokens.size(), T, 0));
  for (Sampler& r : three) r.restore(two[0].state());
  for (int step = 0; step < 4; ++step) {
    std::vector<int> in(3 * B * T), tg(3 * B * T);
    single.next_batch(tokens, 3 * B, in.data(), tg.data());
    ASSERT_EQ(run_ranks(three, tokens, B), in) << "step " << step;
  }
}

TEST(Sampler, TooShortStreamIsInvalidArgument) {
  StatusOr<Sampler> s = Sampler::create(10, 10, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("hint: use a shorter --seq-len or more data"),
            std::string::npos)
      << s.status().message();
  EXPECT_FALSE(Sampler::create(0, 1, 0).ok());
  EXPECT_FALSE(Sampler::create(100, 0, 0).ok());
  EXPECT_TRUE(Sampler::create(11, 10, 0).ok());
}

// ---------------------------------------------------------------------------------------------
// Masked-LM corruption

constexpr int kMask = 5000;
constexpr int kRandomVocab = 256;

// Original tokens in [1000, 2000): outside the random range and not the mask, so every
// corrupted input says which of the three branches produced it.
std::vector<int> mlm_tokens(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> v(n);
  for (int& t : v) t = 1000 + static_cast<int>(rng.below(1000));
  return v;
}

// |observed - n p| within 5 binomial standard deviations: a correct implementation fails such
// a check with probability 6e-7, while a wrong rate (0.2 for 0.15) is off by dozens of sd.
void expect_binomial(size_t observed, size_t n, double p, const char* what) {
  const double mean = static_cast<double>(n) * p;
  const double sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(observed), mean, 5 * sd)
      << what << ": " << observed << " of " << n << ", expected rate " << p;
}

TEST(MlmMasking, RatesMatchBert) {
  // 400 sequences of 512: a sequence has no natural selection with probability
  // 0.85^512 ~ 1e-36, so the at-least-one rule does not move the rate here.
  const int seq_len = 512;
  const size_t n = 400 * seq_len;
  const std::vector<int> original = mlm_tokens(n, 1);
  std::vector<int> inputs = original, targets(n, 12345);
  Rng rng(2);
  apply_mlm_masking(inputs.data(), targets.data(), n, seq_len, kMask, kRandomVocab, rng);
  size_t selected = 0, masked = 0, randomized = 0, kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (targets[i] == -1) {
      ASSERT_EQ(inputs[i], original[i]) << "unselected position " << i << " was changed";
      continue;
    }
    ASSERT_EQ(targets[i], original[i]) << "selected position " << i;
    ++selected;
    if (inputs[i] == kMask) {
      ++masked;
    } else if (inputs[i] == original[i]) {
      ++kept;
    } else {
      ASSERT_GE(inputs[i], 0);
      ASSERT_LT(inputs[i], kRandomVocab);
      ++randomized;
    }
  }
  expect_binomial(selected, n, 0.15, "selected");
  // Given the selected count, each branch count is binomial in it.
  expect_binomial(masked, selected, 0.8, "masked");
  expect_binomial(randomized, selected, 0.1, "random");
  expect_binomial(kept, selected, 0.1, "kept");
}

TEST(MlmMasking, EverySequenceIsScored) {
  // seq_len 4 leaves 0.85^4 = 52% of sequences without a natural selection; 1 always has none
  // or one. The last sequence is partial (n is not a multiple of seq_len).
  for (int seq_len : {1, 4, 7}) {
    const size_t n = static_cast<size_t>(seq_len) * 3000 + (seq_len > 1 ? 2 : 0);
    std::vector<int> inputs = mlm_tokens(n, 3), targets(n);
    Rng rng(4);
    apply_mlm_masking(inputs.data(), targets.data(), n, seq_len, kMask, kRandomVocab, rng);
    for (size_t begin = 0; begin < n; begin += seq_len) {
      const size_t end = std::min(n, begin + seq_len);
      ASSERT_TRUE(std::any_of(targets.begin() + begin, targets.begin() + end,
                              [](int t) { return t != -1; }))
          << "seq_len " << seq_len << ", sequence at " << begin;
    }
  }
}

TEST(MlmMasking, DeterministicForASeed) {
  const size_t n = 64 * 128;
  const std::vector<int> original = mlm_tokens(n, 5);
  auto run = [&](uint64_t seed, std::vector<int>& inputs, std::vector<int>& targets) {
    inputs = original;
    targets.assign(n, 0);
    Rng rng(seed);
    apply_mlm_masking(inputs.data(), targets.data(), n, 128, kMask, kRandomVocab, rng);
    return rng.state();
  };
  std::vector<int> in1, tg1, in2, tg2, in3, tg3;
  EXPECT_EQ(run(6, in1, tg1), run(6, in2, tg2));
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tg1, tg2);
  run(7, in3, tg3);
  EXPECT_NE(tg1, tg3);
}

}  // namespace
}  // namespace cann::data
