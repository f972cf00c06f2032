// Process mesh: the rank <-> coordinates bijection and every group's membership over many
// world sizes and shapes (including odd and prime ones), the errors for shapes that do not fit,
// and real sub-groups built over threads whose collectives reach exactly their members.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "comm_test_util.h"
#include "parallel/mesh.h"

namespace cann {
namespace {

using parallel::MeshShape;

// Every factorization of world into dp*pp*tp*cp, with every ep that divides dp.
std::vector<MeshShape> shapes_of(int world) {
  std::vector<MeshShape> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int cp = 1; cp <= world; ++cp)
      for (int pp = 1; pp <= world; ++pp) {
        if (world % (tp * cp * pp) != 0) continue;
        const int dp = world / (tp * cp * pp);
        for (int ep = 1; ep <= dp; ++ep)
          if (dp % ep == 0) out.push_back({dp, pp, tp, cp, ep});
      }
  return out;
}

TEST(MeshTest, CoordinatesAreABijectionInMegatronOrder) {
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    for (const MeshShape& s : shapes_of(world)) {
      ASSERT_TRUE(parallel::check_mesh_shape(s, world).ok());
      for (int r = 0; r < world; ++r) {
        const auto c = parallel::mesh_coords(s, r);
        EXPECT_EQ(parallel::mesh_rank(s, c), r);
        EXPECT_EQ(r, c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)));
        EXPECT_EQ(c.dp, c.expert_block * s.ep + c.ep);
      }
    }
  }
}

// Each kind of group partitions the world: every rank is in exactly one group of each kind,
// of the right size, and agrees with every other member about who is in it.
TEST(MeshTest, GroupsPartitionTheWorld) {
  using Fn = std::vector<int> (*)(const MeshShape&, int);
  struct Kind {
    const char* name;
    Fn fn;
    int (*size)(const MeshShape&);
  };
  const Kind kinds[] = {
      {"tp", parallel::tp_group_ranks, [](const MeshShape& s) { return s.tp; }},
      {"cp", parallel::cp_group_ranks, [](const MeshShape& s) { return s.cp; }},
      {"dp", parallel::dp_group_ranks, [](const MeshShape& s) { return s.dp; }},
      {"pp", parallel::pp_group_ranks, [](const MeshShape& s) { return s.pp; }},
      {"ep", parallel::ep_group_ranks, [](const MeshShape& s) { return s.ep; }},
      {"edp", parallel::expert_dp_group_ranks, [](const MeshShape& s) { return s.dp / s.ep; }},
      {"mp", parallel::mp_group_ranks, [](const MeshShape& s) { return s.tp * s.pp; }},
  };
  for (int world : {1, 2, 3, 4, 6, 8, 9, 12, 16}) {
    for (const MeshShape& s : shapes_of(world)) {
      for (const Kind& k : kinds) {
        std::set<std::vector<int>> groups;
        for (int r = 0; r < world; ++r) {
          const auto g = k.fn(s, r);
          ASSERT_EQ(static_cast<int>(g.size()), k.size(s)) << k.name;
          ASSERT_TRUE(std::is_sorted(g.begin(), g.end())) << k.name;
          ASSERT_NE(std::find(g.begin(), g.end(), r), g.end()) << k.name;
          for (int other : g) ASSERT_EQ(k.fn(s, other), g) << k.name;
          groups.insert(g);
        }
        EXPECT_EQ(static_cast<int>(groups.size()) * k.size(s), world)
            << k.name << " " << parallel::describe_mesh_shape(s);
      }
      // The expert groups split each data group; expert-data groups stride across the blocks.
      for (int r = 0; r < world; ++r) {
        const auto dp = parallel::dp_group_ranks(s, r);
        for (int e : parallel::ep_group_ranks(s, r))
          EXPECT_NE(std::find(dp.begin(), dp.end(), e), dp.end());
        for (int e : parallel::expert_dp_group_ranks(s, r))
          EXPECT_EQ(parallel::mesh_coords(s, e).ep, parallel::mesh_coords(s, r).ep);
      }
    }
  }
}

TEST(MeshTest, WorkedExampleAndPipelineNeighbours) {
  const MeshShape s{2, 2, 2, 1, 1};  // dp, pp, tp, cp, ep
  const auto c = parallel::mesh_coords(s, 5);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(parallel::tp_group_ranks(s, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(parallel::dp_group_ranks(s, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(parallel::pp_prev_rank(s, 5), 1);
  EXPECT_EQ(parallel::pp_next_rank(s, 5), -1);
  EXPECT_EQ(parallel::pp_next_rank(s, 1), 5);
  EXPECT_EQ(parallel::pp_prev_rank(s, 1), -1);
  // dp=4, ep=2: expert groups {dp0,dp1} and {dp2,dp3}; expert-data groups {dp0,dp2}, {dp1,dp3}.
  const MeshShape e{4, 1, 1, 1, 2};
  EXPECT_EQ(parallel::ep_group_ranks(e, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(parallel::expert_dp_group_ranks(e, 3), (std::vector<int>{1, 3}));
  const std::string table = parallel::describe_mesh_ranks(s);
  EXPECT_NE(table.find("   5   1  0  0  1  0"), std::string::npos) << table;
}

TEST(MeshTest, ShapesThatDoNotFitAreRefusedWithTheNumbers) {
  auto msg = [](const MeshShape& s, int world) {
    const Status st = parallel::check_mesh_shape(s, world);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.message().find('\n'), std::string::npos);
    return st.message();
  };
  EXPECT_NE(msg({2, 1, 2, 1, 1}, 6).find("2*1*2*1 = 4, but 6 processes"), std::string::npos);
  EXPECT_NE(msg({3, 1, 1, 1, 2}, 3).find("ep=2 does not divide dp=3"), std::string::npos);
  EXPECT_NE(msg({0, 1, 1, 1, 1}, 0).find("at least 1"), std::string::npos);
  EXPECT_NE(msg({1, 1, 7, 1, 1}, 5).find("= 7, but 5"), std::string::npos);
}

// Real groups over threads: an all-reduce of the world rank over each group sums exactly the
// members the arithmetic names.
TEST(MeshTest, BuiltGroupsReachExactlyTheirMembers) {
  const std::vector<MeshShape> shapes = {{2, 1, 2, 1, 1}, {1, 1, 4, 1, 1}, {4, 1, 1, 1, 2},
                                         {2, 2, 2, 1, 2}, {1, 3, 1, 1, 1}, {3, 1, 1, 1, 3},
                                         {1, 1, 2, 3, 1}, {5, 1, 1, 1, 5}, {1, 1, 1, 1, 1}};
  for (const MeshShape& s : shapes) {
    test::run_group("shm", s.world(), [&](int rank, comm::Group& world) {
      auto mesh = parallel::ProcessMesh::build(world, s);
      ASSERT_TRUE(mesh.ok()) << mesh.status().message();
      auto& m = **mesh;
      auto check = [&](comm::Group& g, const std::vector<int>& members, const char* kind) {
        int sum = 0;
        for (int r : members) sum += r + 1;
        int v = rank + 1;
        ASSERT_TRUE(g.allreduce(&v, 1, comm::DataType::kInt32, comm::ReduceOp::kSum)->wait().ok());
        EXPECT_EQ(v, sum) << kind << " " << parallel::describe_mesh_shape(s) << " rank " << rank;
        EXPECT_EQ(g.size(), static_cast<int>(members.size()));
      };
      check(m.tp(), parallel::tp_group_ranks(s, rank), "tp");
      check(m.cp(), parallel::cp_group_ranks(s, rank), "cp");
      check(m.dp(), parallel::dp_group_ranks(s, rank), "dp");
      check(m.ep(), parallel::ep_group_ranks(s, rank), "ep");
      check(m.expert_dp(), parallel::expert_dp_group_ranks(s, rank), "edp");
      check(m.pp(), parallel::pp_group_ranks(s, rank), "pp");
      check(m.mp(), parallel::mp_group_ranks(s, rank), "mp");
      EXPECT_EQ(m.pp_prev(), parallel::pp_prev_rank(s, rank));
      EXPECT_EQ(m.pp_next(), parallel::pp_next_rank(s, rank));
      EXPECT_NE(m.describe().find("rank " + std::to_string(rank) + " is tp"), std::string::npos);
    });
  }
  // A shape that does not match the world fails on every rank without building anything.
  test::run_group("shm", 3, [&](int, comm::Group& world) {
    auto mesh = parallel::ProcessMesh::build(world, {2, 1, 2, 1, 1});
    EXPECT_FALSE(mesh.ok());
  });
}

}  // namespace
}  // namespace cann
