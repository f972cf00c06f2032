// Gradient buckets: contiguous ranges of the flat gradient buffer taken from its end, so the
// first bucket holds the last layers, whose gradients backward finishes first (PyTorch DDP's
// reverse-order buckets). The first bucket is small (1 MiB) so communication starts early; the
// rest are bucket_bytes each.
//
// Worked example: 10,000 floats, first bucket 1,024 floats, then 4,096: buckets are
// [8976, 10000), [4880, 8976), [784, 4880), [0, 784).
#pragma once

#include <cstddef>
#include <vector>

#include "model/param_table.h"

namespace cann::parallel {

struct Bucket {
  size_t begin = 0;  // float offsets in the flat buffer
  size_t end = 0;
  // Layers (ParamTable layer indices) with a tensor inside [begin, end): the bucket is ready
  // when backward has finished all of them.
  std::vector<int> layers;
  size_t size() const { return end - begin; }
};

std::vector<Bucket> plan_buckets(const model::ParamTable& table, size_t first_bucket_bytes,
                                 size_t bucket_bytes);

// One bucket per layer, in the same reverse order (bucket 0 holds the highest layer index).
// ZeRO stage 3 gathers parameters in these units. Empty when some layer's tensors are not
// contiguous in the flat buffer.
std::vector<Bucket> plan_layer_buckets(const model::ParamTable& table);

}  // namespace cann::parallel
