// The hierarchical backend over "hosts" simulated by host_id: ranks 2h and 2h+1 share host h
// (shared memory between them, Gloo between hosts). Checks the reduce-scatter-form all-reduce
// against a naive reference for sum/avg/max, fp32/int32/bf16, awkward counts and world sizes,
// and that the operations it delegates to the flat group work.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm_test_util.h"

namespace cann::comm {
namespace {

struct Case {
  int world;
  int per_host;
};

class HierarchicalTest : public ::testing::TestWithParam<Case> {};

float value(int rank, size_t i) {
  return static_cast<float>((rank * 7 + i * 3) % 11) - 5.0f;
}

TEST_P(HierarchicalTest, AllreduceMatchesReference) {
  const Case c = GetParam();
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{(1u << 20) + 3}}) {
    test::run_group(
        "hierarchical", c.world,
        [&](int rank, Group& g) {
          ASSERT_EQ(g.backend(), "hierarchical");
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
            std::vector<float> f(count);
            std::vector<int32_t> n(count);
            for (size_t i = 0; i < count; ++i) {
              f[i] = value(rank, i);
              n[i] = static_cast<int32_t>(value(rank, i));
            }
            ASSERT_TRUE(g.allreduce(f.data(), count, DataType::kFloat32, op)->wait().ok());
            ASSERT_TRUE(g.allreduce(n.data(), count, DataType::kInt32, op)->wait().ok());
            for (size_t i = 0; i < count; i += (count > 1000 ? 997 : 1)) {
              double sum = 0, mx = -1e9;
              for (int r = 0; r < c.world; ++r) {
                sum += value(r, i);
                mx = std::max<double>(mx, value(r, i));
              }
              const double want = op == ReduceOp::kSum   ? sum
                                  : op == ReduceOp::kAvg ? sum / c.world
                                                         : mx;
              ASSERT_NEAR(f[i], want, 1e-5) << "fp32 count " << count << " i " << i;
              const int64_t want_int = op == ReduceOp::kSum   ? static_cast<int64_t>(sum)
                                       : op == ReduceOp::kAvg ? static_cast<int64_t>(sum) / c.world
                                                              : static_cast<int64_t>(mx);
              ASSERT_EQ(n[i], want_int) << "int32 count " << count << " i " << i;
            }
          }
          // bf16 accumulates in fp32 and rounds once: small integers stay exact.
          std::vector<uint16_t> b(count);
          for (size_t i = 0; i < count; ++i) b[i] = float_to_bf16(value(rank, i));
          ASSERT_TRUE(
              g.allreduce(b.data(), count, DataType::kBFloat16, ReduceOp::kSum)->wait().ok());
          for (size_t i = 0; i < std::min<size_t>(count, 50); ++i) {
            double sum = 0;
            for (int r = 0; r < c.world; ++r) sum += value(r, i);
            ASSERT_EQ(bf16_to_float(b[i]), static_cast<float>(sum));
          }
        },
        [&](GroupConfig& g) { g.host_id = "host" + std::to_string(g.rank / c.per_host); });
  }
}

TEST_P(HierarchicalTest, DelegatedCollectives) {
  const Case c = GetParam();
  test::run_group(
      "hierarchical", c.world,
      [&](int rank, Group& g) {
        const size_t n = 5;
        std::vector<int32_t> in(n * c.world), out(n * c.world);
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(rank * 100 + i);
        ASSERT_TRUE(g.alltoall(out.data(), in.data(), n, DataType::kInt32)->wait().ok());
        for (int j = 0; j < c.world; ++j)
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(out[j * n + i], static_cast<int32_t>(j * 100 + rank * n + i));
        std::vector<int32_t> gathered(n * c.world);
        ASSERT_TRUE(g.allgather(gathered.data(), in.data(), n, DataType::kInt32)->wait().ok());
        for (int j = 0; j < c.world; ++j) ASSERT_EQ(gathered[j * n], j * 100);
        ASSERT_TRUE(g.barrier()->wait().ok());
      },
      [&](GroupConfig& g) { g.host_id = "host" + std::to_string(g.rank / c.per_host); });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalTest,
                         ::testing::Values(Case{1, 1}, Case{2, 1}, Case{2, 2}, Case{3, 1},
                                           Case{4, 2}, Case{5, 1}, Case{6, 2}, Case{7, 1},
                                           Case{6, 3}, Case{8, 2}, Case{8, 4}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) + "_per_host" +
                                  std::to_string(info.param.per_host);
                         });

TEST(HierarchicalErrorTest, UnevenHostsAreRejected) {
  auto store = test::fresh_memory_store();
  test::run_ranks(3, [&](int rank) {
    GroupConfig c;
    c.backend = "hierarchical";
    c.store = store;
    c.prefix = "uneven";
    c.rank = rank;
    c.size = 3;
    c.host_id = rank < 2 ? "a" : "b";
    auto g = create_group(c);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("same number of ranks on every host"), std::string::npos);
  });
}

}  // namespace
}  // namespace cann::comm
