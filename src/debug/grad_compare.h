// Two gradient dumps (`run --dump-grads`) compared tensor by tensor: the largest absolute
// difference, relative to the reference tensor's largest entry. That measure suits gradients
// of very different scales in one model: a layernorm shift and an embedding row differ by
// orders of magnitude, and a split that only changes the fp32 summation order stays near 1e-7
// of each tensor's own scale, while a missing reduction or a misplaced shard is off by O(1).
//
// Depends on ckpt (the safetensors reader). Thread safety: plain functions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::ckpt {
struct SafeTensors;
}

namespace cann::debug {

struct TensorDeviation {
  std::string name;
  size_t numel = 0;
  double max_abs_diff = 0;  // max |got - ref|
  double ref_max_abs = 0;   // max |ref|
  double relative = 0;      // max_abs_diff / ref_max_abs (0 when both are zero)
};

// Every tensor of `ref`, in its order. The two must hold the same names and shapes (a dump of
// another model is an error naming the first difference); non-finite values give an infinite
// deviation.
StatusOr<std::vector<TensorDeviation>> compare_grads(const ckpt::SafeTensors& got,
                                                     const ckpt::SafeTensors& ref,
                                                     const std::string& got_path,
                                                     const std::string& ref_path);

// The table `debug grads --compare` prints: one line per tensor, then the worst; with
// tolerance > 0 the tensors above it are marked and counted.
std::string format_grad_comparison(const std::vector<TensorDeviation>& rows, double tolerance);

// Per-tensor norms of one dump, for `debug grads FILE`.
std::string format_grad_dump(const ckpt::SafeTensors& dump, const std::string& path);

}  // namespace cann::debug
