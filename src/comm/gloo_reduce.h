// The local arithmetic of the gloo backend's collectives: what a rank does with the blocks it
// received before sending anything on. Integer sums wrap (two's complement) instead of
// overflowing; bf16 is widened to fp32, accumulated there, and rounded once at the end, so a sum
// over P ranks carries one bf16 rounding error, not P-1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/types.h"

namespace cann::comm {

// acc (n) = acc op in, elementwise; fp32, int32 or int64 (avg accumulates as sum).
void reduce_inplace(void* acc, const void* in, size_t n, DataType type, ReduceOp op);

// c (n) = a op b: the shape of Gloo's reduction functions, for its ring allreduce.
using GlooReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);
GlooReduceFn gloo_reduce_fn(DataType type, ReduceOp op);

// data (n) /= divisor, for avg: fp32 divides; integers divide and truncate toward zero.
void divide_inplace(void* data, size_t n, DataType type, int divisor);

// bf16 through an fp32 accumulator: acc = widen(in); acc op= widen(in); out = round(acc / div).
void bf16_widen(float* acc, const uint16_t* in, size_t n);
void bf16_accumulate(float* acc, const uint16_t* in, size_t n, ReduceOp op);
void bf16_narrow(uint16_t* out, const float* acc, size_t n, float divisor);

}  // namespace cann::comm
