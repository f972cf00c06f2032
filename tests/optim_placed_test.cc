// AdamW writing its output elsewhere (optim/adamw.h's step_to): the update the in-place step
// makes, bit for bit, with the word sums of what it wrote, in place or apart, on one thread or
// several.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/word_sum.h"
#include "model/param_table.h"
#include "optim/adamw.h"

namespace cann {
namespace {

// Tensors of awkward sizes (tails shorter than a 64-byte block), one the optimizer does not
// train, and enough floats that two threads split the work.
model::ParamTable awkward_table() {
  model::ParamTable t;
  t.add("a", {37, 5}, 0, model::TpSplit::kReplicated, true);
  t.add("b", {16}, 0, model::TpSplit::kReplicated, false);
  const size_t frozen = t.add("c", {3}, 0, model::TpSplit::kReplicated, false);
  t.set_untrained(frozen);
  t.add("d", {200, 71}, 1, model::TpSplit::kReplicated, true);
  t.add("e", {70001}, 1, model::TpSplit::kReplicated, false);
  return t;
}

void fill(float* p, size_t n, std::mt19937& rng, float scale, bool positive) {
  std::normal_distribution<float> d(0.0f, scale);
  for (size_t i = 0; i < n; ++i) p[i] = positive ? std::abs(d(rng)) : d(rng);
}

TEST(AdamWStepToTest, WritesWhatTheInPlaceStepWritesAndSumsIt) {
  const model::ParamTable table = awkward_table();
  const size_t n = table.total_floats();
  ASSERT_GT(n, size_t{1} << 16);
  std::mt19937 rng(3);
  AlignedBuffer<float> p0(n), g(n);
  fill(p0.data(), n, rng, 0.1f, false);
  fill(g.data(), n, rng, 0.01f, false);
  optim::AdamWConfig config;
  config.grad_clip = 0.5f;  // clipped: the scale reaches the update
  for (int threads : {1, 2}) {
    for (bool apart : {true, false}) {
      omp_set_num_threads(threads);
      // The reference: two in-place steps (the second with moments that are not zero).
      optim::AdamW ref(table, config);
      AlignedBuffer<float> p_ref(n);
      std::memcpy(p_ref.data(), p0.data(), n * sizeof(float));
      ref.step(p_ref.data(), g.data(), 1e-3f);
      ref.step(p_ref.data(), g.data(), 2e-3f);

      optim::AdamW adam(table, config);
      AlignedBuffer<float> p(n), p_out(n), m_out(n), v_out(n);
      std::memcpy(p.data(), p0.data(), n * sizeof(float));
      adam.step(p.data(), g.data(), 1e-3f);
      optim::StateSums sums;
      optim::UpdateTarget to{p.data(), adam.m(), adam.v(), &sums};
      if (apart) to = {p_out.data(), m_out.data(), v_out.data(), &sums};
      adam.step_to(p.data(), g.data(), 2e-3f, to);
      const std::string where = std::to_string(threads) + (apart ? " threads, apart" : " threads, in place");
      EXPECT_EQ(adam.m(), to.m) << where;
      EXPECT_EQ(adam.v(), to.v) << where;
      EXPECT_EQ(std::memcmp(to.params, p_ref.data(), n * sizeof(float)), 0) << where;
      EXPECT_EQ(std::memcmp(adam.m(), ref.m(), n * sizeof(float)), 0) << where;
      EXPECT_EQ(std::memcmp(adam.v(), ref.v(), n * sizeof(float)), 0) << where;
      ASSERT_TRUE(sums.valid) << where;
      const float* out[3] = {to.params, to.m, to.v};
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(word_sum_finish(sums.parts[k]), word_sum(out[k], n * sizeof(float)))
            << where << ", buffer " << k;
      // The untrained tensor came along unchanged.
      const model::TensorInfo& c = table.at(2);
      EXPECT_EQ(std::memcmp(to.params + c.offset, p0.data() + c.offset, c.numel * sizeof(float)), 0)
          << where;
    }
  }
  omp_set_num_threads(1);
}

// The moments can move into memory the caller keeps and back, unchanged.
TEST(AdamWStepToTest, MomentsMoveOutAndBack) {
  const model::ParamTable table = awkward_table();
  const size_t n = table.total_floats();
  optim::AdamW adam(table, {});
  std::mt19937 rng(4);
  AlignedBuffer<float> p(n), g(n), m(n), v(n);
  fill(g.data(), n, rng, 0.01f, false);
  adam.step(p.data(), g.data(), 1e-3f);
  std::vector<float> m0(adam.m(), adam.m() + n), v0(adam.v(), adam.v() + n);
  adam.place_moments(m.data(), v.data(), true);
  EXPECT_EQ(adam.m(), m.data());
  EXPECT_EQ(std::memcmp(m.data(), m0.data(), n * sizeof(float)), 0);
  adam.place_moments(nullptr, nullptr, true);
  EXPECT_NE(adam.m(), m.data());
  EXPECT_EQ(std::memcmp(adam.m(), m0.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(adam.v(), v0.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace cann
