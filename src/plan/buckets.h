// Gradient buckets: contiguous ranges of the flat gradient buffer taken from its end, so the
// first bucket holds the last layers, whose gradients backward finishes first (PyTorch DDP's
// reverse-order buckets). The first bucket is small (1 MiB) so communication starts early; the
// rest are bucket_bytes each (by default a sixteenth of the buffer, within 1-25 MiB). The engine's
// reducer and ZeRO shards are cut by these functions and the planner prices the same cuts
// (engine_memory.h): one copy of the arithmetic, so that the memory the planner predicts is the
// memory the engine allocates.
//
// Worked example: 10,000 floats, first bucket 1,024 floats, then 4,096: buckets are
// [8976, 10000), [4880, 8976), [784, 4880), [0, 784).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/param_table.h"

namespace cann::plan {

// The bucket sizes, named once: `run --bucket-size-mb` defaults to automatic sizing (0), and
// the planner's fp32 figures assume the same.
inline constexpr double kFirstBucketBytes = 1048576.0;  // 1 MiB
inline constexpr double kBucketMiB = 0.0;               // automatic (EngineBuckets::size_bytes)
// Automatic sizing: a sixteenth of the rank's gradient buffer, so that the last bucket, the
// one reduction backward cannot hide, is at most 1/16 of the communication; at least 1 MiB, so
// that each collective stays bandwidth-bound rather than latency-bound, and at most 25 MiB
// (PyTorch DDP's default bucket_cap_mb), past which larger buckets gain no bandwidth.
inline constexpr double kAutoBucketShare = 1.0 / 16;
inline constexpr double kAutoBucketMinBytes = 1048576.0;
inline constexpr double kAutoBucketMaxBytes = 25.0 * 1048576.0;

// Bucket sizes in bytes: the first bucket taken from the end of the flat buffer, then each of
// the others (0: automatic, from the buffer's size).
struct EngineBuckets {
  double first_bytes = kFirstBucketBytes;
  double bytes = kBucketMiB * 1048576.0;
  static EngineBuckets of_mib(double bucket_mib) {
    return {kFirstBucketBytes, bucket_mib * 1048576.0};
  }
  // The size of the buckets after the first for a buffer of `total_floats`.
  double size_bytes(double total_floats) const {
    if (bytes > 0) return bytes;
    return std::clamp(4.0 * total_floats * kAutoBucketShare, kAutoBucketMinBytes,
                      kAutoBucketMaxBytes);
  }
};

// The plain cut of a buffer of `total_floats`: the first bucket, then `full` buckets of
// `size` floats, then a last partial one of `rest` floats (0: none). plan_buckets without
// readiness points cuts exactly these; the planner prices them without building the list.
// Worked example: 10,000 floats, first 1,024, size 4,096: first 1,024, full 2, rest 784.
struct BucketCut {
  size_t first = 0, size = 0, full = 0, rest = 0;
};
BucketCut cut_buckets(size_t total_floats, const EngineBuckets& sizes);

struct Bucket {
  size_t begin = 0;  // float offsets in the flat buffer
  size_t end = 0;
  // Layers (ParamTable layer indices) with a tensor inside [begin, end): the bucket is ready
  // when backward has finished all of them.
  std::vector<int> layers;
  size_t size() const { return end - begin; }
};

// With `ready` (Model::grad_ready_offsets: the offsets from which backward reports every
// gradient final), buckets are cut only there and at layer starts: each takes whole stretches
// between such points, as many as fit in its size (the first 1 MiB, then bucket_bytes; a
// stretch larger than that is a bucket alone, as DDP never splits a parameter). A bucket cut
// by bytes inside a stretch that becomes final at once leaves only when the stretch's bottom
// is done, holding back the bytes above it; cut at the reports, every bucket leaves the moment
// backward finishes it. Everything below the lowest reported offset (the embeddings and the
// first block's first norm, final only when backward ends) is a bucket of its own: the one
// reduction that cannot overlap any compute, kept as small as the model allows.
// Worked example: ready {320, 640, 704, 960} in a 1,024-float buffer whose layers start at 0,
// 320 and 960, first bucket 160 floats and then 256: [960, 1024), [704, 960), [640, 704),
// [320, 640), [0, 320).
std::vector<Bucket> plan_buckets(const model::ParamTable& table, size_t first_bucket_bytes,
                                 size_t bucket_bytes, const std::vector<size_t>& ready = {});

// One bucket per layer, in the same reverse order (bucket 0 holds the highest layer index).
// ZeRO stage 3 gathers parameters in these units. Empty when some layer's tensors are not
// contiguous in the flat buffer.
std::vector<Bucket> plan_layer_buckets(const model::ParamTable& table);

}  // namespace cann::plan
