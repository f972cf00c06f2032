// Reduction kernels of the shm collectives: combine the same element range of every rank's
// slot into one result. This is the inner loop of allreduce and reduce_scatter, so it is written
// to vectorize: it works through a tile of accumulators that stays in L1, adding one source at a
// time over the whole tile (a loop the compiler turns into wide vector adds), then converts and
// stores the tile once.
//
// Semantics, shared with the naive reference beside it (the tests hold one to the other):
//   - sources are combined in order 0, 1, ..., k-1, so every rank that reduces the same range
//     gets bit-identical results;
//   - bf16 is widened to fp32, accumulated in fp32 and rounded to bf16 once (round to nearest
//     even), instead of once per source;
//   - int32 accumulates in int64, then wraps to int32; int64 sums wrap modulo 2^64;
//   - avg is the sum divided by k (integer division truncates toward zero), computed before
//     the final rounding, so bf16 avg is rounded once too;
//   - max compares in the accumulation type.
#pragma once

#include <cstddef>
#include <span>

#include "comm/types.h"

namespace cann::comm::shm {

// dst (n) = op over s of srcs[s] (n each). dst may alias any source; srcs is not empty.
void reduce_buffers(std::byte* dst, std::span<const std::byte* const> srcs, size_t n, DataType type,
                    ReduceOp op);

// The same result, one element at a time with the conversions of types.h.
void reduce_buffers_reference(std::byte* dst, std::span<const std::byte* const> srcs, size_t n,
                              DataType type, ReduceOp op);

}  // namespace cann::comm::shm
