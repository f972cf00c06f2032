// The gloo backend's own collective algorithms, built from GlooChannel::exchange. They run on
// one channel; GlooGroup splits large messages into slices over several channels and calls
// these once per slice. Each function is a collective over the channel's ranks and calls
// exchange() the same number of times on every rank.
//
// Costs per rank (P ranks; n bytes per rank's buffer, or per block where stated; alpha = the
// latency of one round, beta = seconds per byte on this rank's link). "Direct" means every rank
// exchanges with every other in one round of P-1 concurrent messages: the bytes of a ring in 1
// round instead of P-1.
//   allgather (n per block)       direct: alpha + (P-1) n beta
//   reduce_scatter (n per block)  direct: alpha + (P-1) n beta, then (P-1) n local adds
//   allreduce                     direct: 2 alpha + 2 (P-1)/P n beta (reduce-scatter, allgather)
//   allreduce, allgather (small)  alpha + (P-1) n beta, over buffers registered once
//   alltoall(v)                   direct: alpha + (bytes addressed to others) beta
//   broadcast                     binomial tree: ceil(log2 P) (alpha + n beta)
//   barrier                       dissemination: ceil(log2 P) alpha
#pragma once

#include <cstddef>
#include <span>

#include "comm/gloo_channel.h"

namespace cann::comm {

// Block j of `out` (at j * stride_bytes) receives rank j's `in` (bytes). `in` may be out's own
// block.
Status allgather_direct(GlooChannel& ch, void* out, const void* in, size_t stride_bytes,
                        size_t bytes, Deadline deadline, Traffic& traffic);

// in: P blocks at `stride` elements apart, each `len` elements; out (len) = the reduction over
// ranks of block `rank`. Accumulates in rank order 0..P-1 (fp32 for bf16; avg divides at the
// end), so every rank's result is bitwise what a naive rank-order loop produces.
Status reduce_scatter_direct(GlooChannel& ch, void* out, const void* in, size_t stride, size_t len,
                             DataType type, ReduceOp op, Deadline deadline, Traffic& traffic);

// data (count) in place; any type and op (bf16 accumulates in fp32 and rounds once).
Status allreduce_direct(GlooChannel& ch, void* data, size_t count, DataType type, ReduceOp op,
                        Deadline deadline, Traffic& traffic);

// data (count) in place, for messages of at most ch.small_capacity() bytes: every rank's whole
// buffer to every other in one round (GlooChannel::exchange_small), then each rank reduces the
// P buffers in rank order, as the direct algorithms do (bitwise the same on every rank).
//   small: alpha + (P-1) n beta
Status allreduce_small(GlooChannel& ch, void* data, size_t count, DataType type, ReduceOp op,
                       Traffic& traffic);
// Block j of `out` (at j * stride_bytes) receives rank j's `in` (bytes, at most
// ch.small_capacity()) in one round over the small-message buffers.
Status allgather_small(GlooChannel& ch, void* out, const void* in, size_t stride_bytes,
                       size_t bytes, Traffic& traffic);

// Byte counts and offsets per peer; own block copied locally.
Status alltoallv_direct(GlooChannel& ch, void* out, std::span<const size_t> out_bytes,
                        std::span<const size_t> out_offsets, const void* in,
                        std::span<const size_t> in_bytes, std::span<const size_t> in_offsets,
                        Deadline deadline, Traffic& traffic);

Status broadcast_binomial(GlooChannel& ch, void* data, size_t bytes, int root, Deadline deadline,
                          Traffic& traffic);

Status barrier_dissemination(GlooChannel& ch, Deadline deadline);

}  // namespace cann::comm
