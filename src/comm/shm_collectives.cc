// The shm backend's operations. Each collective describes its chunks to SlotPipeline (what to
// copy in, reduce and copy out; shm_pipeline.h has the protocol), point-to-point calls stream
// through the mailboxes, and every call counts its payload traffic.
//
// Traffic is counted as an algorithm that moves only what a rank must send and receive would
// (the convention that makes busbw comparable across backends): allreduce 2(P-1)/P of the
// buffer each way, reduce_scatter and alltoall the blocks of other ranks, and so on.
#include <algorithm>
#include <cstring>

#include "comm/shm_group.h"
#include "comm/shm_reduce.h"

namespace cann::comm::shm {

namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// Elements of a block of `block` elements that fall into chunk i of `per_chunk` elements:
// a block of 10 in chunks of 4 has 4, 4, 2, then 0 in every later chunk.
size_t piece(size_t block, size_t i, size_t per_chunk) {
  const size_t begin = i * per_chunk;
  return block > begin ? std::min(per_chunk, block - begin) : 0;
}

// Start of each block when blocks of `counts` elements are laid out back to back.
std::vector<size_t> block_offsets(std::span<const size_t> counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t q = 1; q < counts.size(); ++q) offsets[q] = offsets[q - 1] + counts[q - 1];
  return offsets;
}

}  // namespace

size_t ShmGroup::sub_slot_elements(DataType type) const {
  // 256 KiB slot, 3 ranks, fp32: 262144 / 3 = 87381 bytes, down to whole cache lines 87360,
  // which is 21840 elements per sub-slot.
  const size_t bytes = pipeline_.slot_bytes() / static_cast<size_t>(size());
  return bytes / kCacheLine * kCacheLine / dtype_size(type);
}

Status ShmGroup::run_steps(const ChunkSteps& steps, const char* op, const Options& opts) {
  return abort_with(pipeline_.run(steps, describe(op, opts), opts.timeout));
}

// Allreduce: chunked reduce-scatter + all-gather in which all P ranks reduce at once. Per chunk
// of up to C elements every rank copies its input chunk into its slot, except its own 1/P
// share, which only it reads; it reduces that share from its own buffer and the P-1 other
// slots (fp32 accumulation for bf16), in place in its buffer, and copies the result into its
// slot; then it copies the other P-1 reduced shares out of their owners' slots. The copy-in of
// chunk i+1 overlaps the reduction of chunk i (shm_pipeline.h). Sources are combined in rank
// order 0..P-1 for every share, so all ranks end with bit-identical results.
// Cost (alpha-beta): t = 3 * ceil(S/C) * alpha + (5 - 2/P) * S * beta_mem, with S the buffer
// bytes, C = 256 KiB, alpha ~ 1 us (a cache-line handoff plus a wakeup) and beta_mem a core's
// time per byte read or written: per rank, copy-in reads and writes (P-1)/P * S, the reduction
// reads S and writes 2 * S/P, copy-out reads and writes (P-1)/P * S. Only the caller's buffer
// (read once, written once, like a memcpy) need come from memory; the slots stay in cache.
// Ranks run on their own cores in parallel, so P adds no steps, unlike the ring's
// 2(P-1) * alpha + 2(P-1)/P * S * beta_link; on a host whose memory bandwidth B the ranks
// share, the floor is that of P concurrent memcpys of S: t >= 2 * P * S / B.
Status ShmGroup::run_allreduce(void* data, size_t count, DataType type, ReduceOp op,
                               const Options& opts) {
  const size_t world = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  if (world == 1) return OkStatus();  // sum, avg and max of one buffer are the buffer
  const size_t es = dtype_size(type);
  const size_t per_chunk = pipeline_.slot_bytes() / es;
  auto* bytes = static_cast<std::byte*>(data);
  // Rank q's share of a chunk of n elements: ceil(n / P) rounded up to whole cache lines, so
  // shares never split a line. n = 1000 fp32 on 3 ranks: 334 -> 336, so [0, 336), [336, 672)
  // and [672, 1000); n = 7 on 8 ranks: rank 0 takes [0, 7), the others nothing.
  const size_t line = kCacheLine / es;
  auto share = [&](size_t n, size_t q) {
    const size_t per = ceil_div(ceil_div(n, world), line) * line;
    const size_t begin = std::min(q * per, n);
    return std::pair<size_t, size_t>(begin, std::min(begin + per, n));
  };
  std::vector<const std::byte*> sources(world);
  ChunkSteps steps;
  steps.chunks = ceil_div(count, per_chunk);
  steps.fill = [&](size_t i, std::byte* slot) {
    const size_t n = piece(count, i, per_chunk);
    const auto [begin, end] = share(n, me);
    const std::byte* chunk = bytes + i * per_chunk * es;
    std::memcpy(slot, chunk, begin * es);
    std::memcpy(slot + end * es, chunk + end * es, (n - end) * es);
  };
  steps.reduce = [&](size_t i, std::span<std::byte* const> slots) {
    const auto [begin, end] = share(piece(count, i, per_chunk), me);
    if (begin == end) return;
    std::byte* mine = bytes + (i * per_chunk + begin) * es;
    for (size_t q = 0; q < world; ++q) sources[q] = q == me ? mine : slots[q] + begin * es;
    reduce_buffers(mine, sources, end - begin, type, op);
    std::memcpy(slots[me] + begin * es, mine, (end - begin) * es);
  };
  steps.drain = [&](size_t i, std::span<std::byte* const> slots) {
    const size_t n = piece(count, i, per_chunk);
    for (size_t q = 0; q < world; ++q) {
      if (q == me) continue;
      const auto [begin, end] = share(n, q);
      std::memcpy(bytes + (i * per_chunk + begin) * es, slots[q] + begin * es, (end - begin) * es);
    }
  };
  CANN_RETURN_IF_ERROR(run_steps(steps, "allreduce", opts));
  const uint64_t moved = 2 * (world - 1) * count * es / world;
  count_traffic(moved, moved);
  return OkStatus();
}

// Reduce-scatter: each rank copies chunk i of all P blocks into P sub-slots of its slot; rank r
// then reduces sub-slot r of every slot straight into its output. No copy-out step.
// Cost: t = 2 * ceil(S/(P*c)) * alpha + (3 + 1/P) * S * beta_mem for an input of S bytes and
// sub-slots of c bytes (copy-in reads and writes S, the reduction reads S and writes S/P).
Status ShmGroup::run_reduce_scatter(void* out, const void* in, size_t count, DataType type,
                                    ReduceOp op, const Options& opts) {
  const size_t world = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  const size_t es = dtype_size(type);
  const size_t per_chunk = sub_slot_elements(type);
  const auto* input = static_cast<const std::byte*>(in);
  auto* output = static_cast<std::byte*>(out);
  std::vector<const std::byte*> sources(world);
  ChunkSteps steps;
  steps.chunks = ceil_div(count, per_chunk);
  steps.fill = [&](size_t i, std::byte* slot) {
    const size_t n = piece(count, i, per_chunk);
    for (size_t j = 0; j < world; ++j)
      std::memcpy(slot + j * per_chunk * es, input + (j * count + i * per_chunk) * es, n * es);
  };
  steps.reduce = [&](size_t i, std::span<std::byte* const> slots) {
    for (size_t q = 0; q < world; ++q) sources[q] = slots[q] + me * per_chunk * es;
    reduce_buffers(output + i * per_chunk * es, sources, piece(count, i, per_chunk), type, op);
  };
  CANN_RETURN_IF_ERROR(run_steps(steps, "reduce_scatter", opts));
  count_traffic((world - 1) * count * es, (world - 1) * count * es);
  return OkStatus();
}

// All-gather(v): each rank copies chunk i of its block into its slot, then every rank copies
// chunk i of every block out. Cost: t = 2 * ceil(max_count/C) * alpha + beta_mem * (2 * own +
// 2 * total) bytes, the copy-out of all P blocks dominating.
Status ShmGroup::gather(void* out, const void* in, std::span<const size_t> counts, DataType type,
                        const char* op, const Options& opts) {
  const size_t world = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  if (counts.size() != world)
    return abort_with(InvalidArgument(describe(op, opts) + ": " + std::to_string(counts.size()) +
                                      " counts for a group of " + std::to_string(world)));
  const size_t es = dtype_size(type);
  const size_t per_chunk = pipeline_.slot_bytes() / es;
  const std::vector<size_t> offsets = block_offsets(counts);
  const auto* input = static_cast<const std::byte*>(in);
  auto* output = static_cast<std::byte*>(out);
  ChunkSteps steps;
  steps.chunks = ceil_div(*std::max_element(counts.begin(), counts.end()), per_chunk);
  steps.fill = [&](size_t i, std::byte* slot) {
    std::memcpy(slot, input + i * per_chunk * es, piece(counts[me], i, per_chunk) * es);
  };
  steps.drain = [&](size_t i, std::span<std::byte* const> slots) {
    for (size_t q = 0; q < world; ++q)
      std::memcpy(output + (offsets[q] + i * per_chunk) * es, slots[q],
                  piece(counts[q], i, per_chunk) * es);
  };
  CANN_RETURN_IF_ERROR(run_steps(steps, op, opts));
  const size_t total = offsets.back() + counts.back();
  count_traffic((world - 1) * counts[me] * es, (total - counts[me]) * es);
  return OkStatus();
}

Status ShmGroup::run_allgather(void* out, const void* in, size_t count, DataType type,
                               const Options& opts) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return gather(out, in, counts, type, "allgather", opts);
}

Status ShmGroup::run_allgatherv(void* out, const void* in, std::span<const size_t> counts,
                                DataType type, const Options& opts) {
  return gather(out, in, counts, type, "allgatherv", opts);
}

// Broadcast: the root copies chunk i into its slot; the others copy it out. Cost: t = 2 *
// ceil(S/C) * alpha + 2 * S * beta_mem on every rank, independent of P.
Status ShmGroup::run_broadcast(void* data, size_t count, DataType type, int root,
                               const Options& opts) {
  if (root < 0 || root >= size())
    return abort_with(InvalidArgument(describe("broadcast", opts) + ": root " +
                                      std::to_string(root) + " is not a rank of a group of " +
                                      std::to_string(size())));
  const size_t es = dtype_size(type);
  const size_t per_chunk = pipeline_.slot_bytes() / es;
  auto* bytes = static_cast<std::byte*>(data);
  ChunkSteps steps;
  steps.chunks = ceil_div(count, per_chunk);
  steps.only_source = root;
  if (rank() == root) {
    steps.fill = [&](size_t i, std::byte* slot) {
      std::memcpy(slot, bytes + i * per_chunk * es, piece(count, i, per_chunk) * es);
    };
  } else {
    steps.drain = [&](size_t i, std::span<std::byte* const> slots) {
      std::memcpy(bytes + i * per_chunk * es, slots[static_cast<size_t>(root)],
                  piece(count, i, per_chunk) * es);
    };
  }
  CANN_RETURN_IF_ERROR(run_steps(steps, "broadcast", opts));
  const uint64_t bytes_total = count * es;
  if (rank() == root)
    count_traffic(bytes_total * static_cast<uint64_t>(size() - 1), 0);
  else
    count_traffic(0, bytes_total);
  return OkStatus();
}

// All-to-all(v): each rank copies chunk i of its block for rank j into sub-slot j of its slot;
// rank r then copies sub-slot r of every slot out. Cost: t = 2 * ceil(max_block/c) * alpha +
// 2 * (S_in + S_out) * beta_mem.
Status ShmGroup::exchange(void* out, std::span<const size_t> out_counts, const void* in,
                          std::span<const size_t> in_counts, size_t largest_block, DataType type,
                          const char* op, const Options& opts) {
  const size_t world = static_cast<size_t>(size());
  const size_t me = static_cast<size_t>(rank());
  const size_t es = dtype_size(type);
  const size_t per_chunk = sub_slot_elements(type);
  const std::vector<size_t> in_offsets = block_offsets(in_counts);
  const std::vector<size_t> out_offsets = block_offsets(out_counts);
  const auto* input = static_cast<const std::byte*>(in);
  auto* output = static_cast<std::byte*>(out);
  ChunkSteps steps;
  steps.chunks = ceil_div(largest_block, per_chunk);
  steps.fill = [&](size_t i, std::byte* slot) {
    for (size_t j = 0; j < world; ++j)
      std::memcpy(slot + j * per_chunk * es, input + (in_offsets[j] + i * per_chunk) * es,
                  piece(in_counts[j], i, per_chunk) * es);
  };
  steps.drain = [&](size_t i, std::span<std::byte* const> slots) {
    for (size_t q = 0; q < world; ++q)
      std::memcpy(output + (out_offsets[q] + i * per_chunk) * es, slots[q] + me * per_chunk * es,
                  piece(out_counts[q], i, per_chunk) * es);
  };
  CANN_RETURN_IF_ERROR(run_steps(steps, op, opts));
  count_traffic((in_offsets.back() + in_counts.back() - in_counts[me]) * es,
                (out_offsets.back() + out_counts.back() - out_counts[me]) * es);
  return OkStatus();
}

Status ShmGroup::run_alltoall(void* out, const void* in, size_t count, DataType type,
                              const Options& opts) {
  const std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return exchange(out, counts, in, counts, count, type, "alltoall", opts);
}

// The chunk count depends on the largest block anywhere in the P x P matrix, which no rank
// knows alone: every rank first gathers all ranks' (in_counts, out_counts), which also lets
// every rank check every pair and fail with the same message instead of reading stale slots.
Status ShmGroup::run_alltoallv(void* out, std::span<const size_t> out_counts, const void* in,
                               std::span<const size_t> in_counts, DataType type,
                               const Options& opts) {
  const size_t world = static_cast<size_t>(size());
  if (in_counts.size() != world || out_counts.size() != world)
    return abort_with(InvalidArgument(
        describe("alltoallv", opts) + ": counts for " + std::to_string(in_counts.size()) + " and " +
        std::to_string(out_counts.size()) + " ranks in a group of " + std::to_string(world)));
  // mine = in_counts then out_counts; all[q] is rank q's pair of vectors.
  std::vector<int64_t> mine(2 * world);
  for (size_t j = 0; j < world; ++j) {
    mine[j] = static_cast<int64_t>(in_counts[j]);
    mine[world + j] = static_cast<int64_t>(out_counts[j]);
  }
  std::vector<int64_t> all(2 * world * world);
  const std::vector<size_t> pair_counts(world, 2 * world);
  CANN_RETURN_IF_ERROR(
      gather(all.data(), mine.data(), pair_counts, DataType::kInt64, "alltoallv", opts));
  size_t largest = 0;
  for (size_t src = 0; src < world; ++src) {
    for (size_t dst = 0; dst < world; ++dst) {
      const int64_t sent = all[src * 2 * world + dst];
      largest = std::max(largest, static_cast<size_t>(sent));
      const int64_t expected = all[dst * 2 * world + world + src];
      if (sent != expected)
        return abort_with(InvalidArgument(
            describe("alltoallv", opts) + ": rank " + std::to_string(src) + " sends " +
            std::to_string(sent) + " elements to rank " + std::to_string(dst) + ", which expects " +
            std::to_string(expected) +
            "; hint: in_counts[j] on rank i must equal out_counts[i] on rank j (exchange counts "
            "with alltoall first)"));
    }
  }
  return exchange(out, out_counts, in, in_counts, largest, type, "alltoallv", opts);
}

Status ShmGroup::run_barrier(const Options& opts) {
  ChunkSteps steps;
  steps.chunks = 1;  // an empty chunk: filling it announces arrival, waiting for it is the barrier
  return run_steps(steps, "barrier", opts);
}

Status ShmGroup::run_send(const void* data, size_t count, DataType type, int dst, uint32_t tag,
                          const Options& opts) {
  if (dst < 0 || dst >= size())
    return abort_with(InvalidArgument(describe("send", opts) + ": rank " + std::to_string(dst) +
                                      " is not in a group of " + std::to_string(size())));
  const size_t bytes = count * dtype_size(type);
  CANN_RETURN_IF_ERROR(abort_with(
      mailboxes_.send(data, bytes, type, dst, tag, describe("send", opts), opts.timeout)));
  count_traffic(bytes, 0);
  return OkStatus();
}

Status ShmGroup::run_recv(void* data, size_t count, DataType type, int src, uint32_t tag,
                          const Options& opts) {
  if (src < 0 || src >= size())
    return abort_with(InvalidArgument(describe("recv", opts) + ": rank " + std::to_string(src) +
                                      " is not in a group of " + std::to_string(size())));
  const size_t bytes = count * dtype_size(type);
  CANN_RETURN_IF_ERROR(abort_with(
      mailboxes_.recv(data, bytes, type, src, tag, describe("recv", opts), opts.timeout)));
  count_traffic(0, bytes);
  return OkStatus();
}

}  // namespace cann::comm::shm
