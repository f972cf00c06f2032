// The collective conformance suite: every backend at every world size 1..8, every collective
// (collective_checks.h) in every dtype, at element counts 0, 1 and 7 and at 2^20+3, against a
// naive reference, with ranks as threads over a memory store. The large count runs at every
// world size with one dtype for every collective (each dtype meets it at two world sizes), and
// with two more for the collectives whose buffers do not grow with the world (each dtype at
// four sizes); at world sizes 2 and 3, two more dtypes for every collective. The backends'
// own files test what is particular to each (transport paths, failures, forked processes).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "collective_checks.h"
#include "comm_test_util.h"

namespace cann::comm {
namespace {

using namespace conformance;  // check_collectives, kTypes, kBig

class Conformance : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Conformance, EveryCollectiveDtypeAndCount) {
  const auto& [backend, world] = GetParam();
  // Gloo's pairs connect distinct ranks (the hierarchical backend sends point-to-point over
  // them): a group of one has no ring to itself.
  const bool self = backend == "shm";
  // Two hosts of world/2 ranks where that splits evenly, else one rank per host.
  const int per_host = world > 2 && world % 2 == 0 ? world / 2 : 1;
  test::run_group(backend, world, [&, world = world](int, Group& g) {
    for (DataType t : kTypes)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}})
        EXPECT_EQ("", check_collectives(g, t, count, true, self));
    // Wider types where P is small: the all-to-all and all-gather buffers grow as P^2 x dtype.
    const DataType big[] = {DataType::kInt64, DataType::kInt32, DataType::kFloat32,
                            DataType::kBFloat16};
    EXPECT_EQ("", check_collectives(g, big[(world - 1) / 2], kBig, true, self));
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ("", check_collectives(g, kTypes[(world + k) % 4], kBig, /*growing=*/false, self));
    if (world == 2 || world == 3) {
      for (int k = 0; k < 2; ++k)
        EXPECT_EQ("", check_collectives(g, kTypes[(2 * world + k) % 4], kBig, true, self));
    }
  }, [&](GroupConfig& c) {
    if (backend == "hierarchical") c.host_id = "host" + std::to_string(c.rank / per_host);
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::Combine(::testing::Values("shm", "gloo", "hierarchical"),
                                            ::testing::Range(1, 9)),
                         [](const ::testing::TestParamInfo<Conformance::ParamType>& info) {
                           return std::get<0>(info.param) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace cann::comm
