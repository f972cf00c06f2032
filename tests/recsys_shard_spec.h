// The spec the shard tests share: a DLRM with two tables of 10 and 7 rows of width 3, ids
// indexing rows directly, so a test can name rows and shards by hand (row r on shard r % S).
#pragma once

#include <gtest/gtest.h>

#include "recsys/rec_spec.h"

namespace cann::recsys {

inline RecSpec tiny_shard_spec() {
  auto s = parse_rec_spec(
      "architecture: dlrm\ndense_features: 2\nsparse_features: 2\ntable_rows: [10, 7]\n"
      "hash_ids: false\nembedding_dim: 3\nbottom_mlp: [3]\ntop_mlp: [1]\n",
      "shard_test.yaml");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

}  // namespace cann::recsys
