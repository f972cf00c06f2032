// Exchange-based collectives of the gloo backend (costs in the header).
#include "comm/gloo_collectives.h"

#include <cstring>
#include <vector>

#include "comm/gloo_reduce.h"

namespace cann::comm {
namespace {

char* at(void* base, size_t offset) {
  return static_cast<char*>(base) + offset;
}
char* at(const void* base, size_t offset) {
  return const_cast<char*>(static_cast<const char*>(base)) + offset;
}

// out (len) = reduction of srcs[0..P-1] in rank order. out may alias none of srcs, except for
// bf16, whose accumulator is separate (scratch area 1 of the channel).
void reduce_in_rank_order(GlooChannel& ch, void* out, const std::vector<const void*>& srcs,
                          size_t len, DataType type, ReduceOp op) {
  const int p = static_cast<int>(srcs.size());
  if (len == 0) return;  // an empty block (count < ranks): its pointers may be null
  if (type == DataType::kBFloat16) {
    float* acc = reinterpret_cast<float*>(ch.scratch(1, len * sizeof(float)));
    bf16_widen(acc, static_cast<const uint16_t*>(srcs[0]), len);
    for (int j = 1; j < p; ++j)
      bf16_accumulate(acc, static_cast<const uint16_t*>(srcs[j]), len, op);
    bf16_narrow(static_cast<uint16_t*>(out), acc, len,
                op == ReduceOp::kAvg ? static_cast<float>(p) : 1.0f);
    return;
  }
  std::memcpy(out, srcs[0], len * dtype_size(type));
  for (int j = 1; j < p; ++j) reduce_inplace(out, srcs[j], len, type, op);
  if (op == ReduceOp::kAvg) divide_inplace(out, len, type, p);
}

}  // namespace

Status allreduce_small(GlooChannel& ch, void* data, size_t count, DataType type, ReduceOp op,
                       Traffic& traffic) {
  const size_t bytes = count * dtype_size(type);
  std::vector<const char*> blocks;
  CANN_RETURN_IF_ERROR(ch.exchange_small(data, bytes, blocks, traffic));
  // The own block is `data`, which the reduction writes: it reads a copy.
  char* own = ch.scratch(0, bytes);
  std::memcpy(own, data, bytes);
  std::vector<const void*> srcs(blocks.begin(), blocks.end());
  srcs[ch.rank()] = own;
  reduce_in_rank_order(ch, data, srcs, count, type, op);
  return OkStatus();
}

Status allgather_small(GlooChannel& ch, void* out, const void* in, size_t stride_bytes,
                       size_t bytes, Traffic& traffic) {
  std::vector<const char*> blocks;
  CANN_RETURN_IF_ERROR(ch.exchange_small(in, bytes, blocks, traffic));
  for (int j = 0; j < ch.size(); ++j) {
    char* dst = at(out, static_cast<size_t>(j) * stride_bytes);
    if (dst != blocks[j]) std::memmove(dst, blocks[j], bytes);
  }
  return OkStatus();
}

// direct: alpha + (P-1) n beta.
Status allgather_direct(GlooChannel& ch, void* out, const void* in, size_t stride_bytes,
                        size_t bytes, Deadline deadline, Traffic& traffic) {
  const int p = ch.size(), r = ch.rank();
  char* own = at(out, static_cast<size_t>(r) * stride_bytes);
  if (own != in && bytes > 0) std::memmove(own, in, bytes);
  std::vector<PeerTransfer> sends, recvs;
  for (int j = 0; j < p; ++j) {
    if (j == r) continue;
    sends.push_back({j, own, bytes});
    recvs.push_back({j, at(out, static_cast<size_t>(j) * stride_bytes), bytes});
  }
  return ch.exchange(sends, recvs, deadline, traffic);
}

// direct: alpha + (P-1) n beta, plus (P-1) n local adds.
Status reduce_scatter_direct(GlooChannel& ch, void* out, const void* in, size_t stride, size_t len,
                             DataType type, ReduceOp op, Deadline deadline, Traffic& traffic) {
  const int p = ch.size(), r = ch.rank();
  const size_t es = dtype_size(type), block = len * es;
  // Slot j holds rank j's contribution to this rank's block; slot `r` a copy of our own, so
  // `out` may alias our block of `in`.
  char* contributions = ch.scratch(0, static_cast<size_t>(p) * block);
  std::vector<PeerTransfer> sends, recvs;
  for (int j = 0; j < p; ++j) {
    char* slot = contributions + static_cast<size_t>(j) * block;
    const char* mine_for_j = at(in, static_cast<size_t>(j) * stride * es);
    if (j == r) {
      if (block > 0) std::memcpy(slot, mine_for_j, block);
      continue;
    }
    sends.push_back({j, const_cast<char*>(mine_for_j), block});
    recvs.push_back({j, slot, block});
  }
  CANN_RETURN_IF_ERROR(ch.exchange(sends, recvs, deadline, traffic));
  std::vector<const void*> srcs(static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) srcs[j] = contributions + static_cast<size_t>(j) * block;
  reduce_in_rank_order(ch, out, srcs, len, type, op);
  return OkStatus();
}

// direct: 2 alpha + 2 (P-1)/P n beta, the bytes of a ring in 2 rounds instead of 2(P-1).
Status allreduce_direct(GlooChannel& ch, void* data, size_t count, DataType type, ReduceOp op,
                        Deadline deadline, Traffic& traffic) {
  const int p = ch.size(), r = ch.rank();
  const size_t es = dtype_size(type);
  // Chunk j = [j*m, min(count, (j+1)*m)), m = ceil(count / P); e.g. count 7, P 4: 2,2,2,1.
  const size_t m = (count + p - 1) / p;
  auto begin = [&](int j) { return std::min(count, static_cast<size_t>(j) * m); };
  auto length = [&](int j) { return std::min(count, static_cast<size_t>(j + 1) * m) - begin(j); };
  const size_t mine = length(r), mine_bytes = mine * es;

  // Round 1 (reduce-scatter): chunk j goes to rank j; rank j's copy of our chunk comes back.
  char* contributions = ch.scratch(0, static_cast<size_t>(p) * mine_bytes);
  std::vector<PeerTransfer> sends, recvs;
  for (int j = 0; j < p; ++j) {
    char* slot = contributions + static_cast<size_t>(j) * mine_bytes;
    if (j == r) {
      if (mine_bytes > 0) std::memcpy(slot, at(data, begin(r) * es), mine_bytes);
      continue;
    }
    sends.push_back({j, at(data, begin(j) * es), length(j) * es});
    recvs.push_back({j, slot, mine_bytes});
  }
  CANN_RETURN_IF_ERROR(ch.exchange(sends, recvs, deadline, traffic));
  std::vector<const void*> srcs(static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) srcs[j] = contributions + static_cast<size_t>(j) * mine_bytes;
  reduce_in_rank_order(ch, at(data, begin(r) * es), srcs, mine, type, op);

  // Round 2 (allgather): our reduced chunk to everyone, theirs into place.
  sends.clear();
  recvs.clear();
  for (int j = 0; j < p; ++j) {
    if (j == r) continue;
    sends.push_back({j, at(data, begin(r) * es), mine_bytes});
    recvs.push_back({j, at(data, begin(j) * es), length(j) * es});
  }
  return ch.exchange(sends, recvs, deadline, traffic);
}

// direct: alpha + (bytes addressed to others) beta.
Status alltoallv_direct(GlooChannel& ch, void* out, std::span<const size_t> out_bytes,
                        std::span<const size_t> out_offsets, const void* in,
                        std::span<const size_t> in_bytes, std::span<const size_t> in_offsets,
                        Deadline deadline, Traffic& traffic) {
  const int p = ch.size(), r = ch.rank();
  if (in_bytes[r] != out_bytes[r])
    return InvalidArgument("alltoallv: rank " + std::to_string(r) + " sends itself " +
                           std::to_string(in_bytes[r]) + " bytes but expects " +
                           std::to_string(out_bytes[r]));
  if (in_bytes[r] > 0) std::memmove(at(out, out_offsets[r]), at(in, in_offsets[r]), in_bytes[r]);
  std::vector<PeerTransfer> sends, recvs;
  for (int j = 0; j < p; ++j) {
    if (j == r) continue;
    sends.push_back({j, at(in, in_offsets[j]), in_bytes[j]});
    recvs.push_back({j, at(out, out_offsets[j]), out_bytes[j]});
  }
  return ch.exchange(sends, recvs, deadline, traffic);
}

// binomial tree: ceil(log2 P) (alpha + n beta); the root sends ceil(log2 P) n bytes.
// Ranks relabelled so the root is 0 (v = (rank - root) mod P). In the round with distance d
// (1, 2, 4, ...), every v < d already has the data and sends it to v + d. P = 6: round 1
// 0->1; round 2 0->2, 1->3; round 4 0->4, 1->5.
Status broadcast_binomial(GlooChannel& ch, void* data, size_t bytes, int root, Deadline deadline,
                          Traffic& traffic) {
  const int p = ch.size();
  const int v = (ch.rank() - root + p) % p;
  auto real = [&](int u) { return (u + root) % p; };
  for (int d = 1; d < p; d *= 2) {
    std::vector<PeerTransfer> sends, recvs;
    if (v < d && v + d < p) sends.push_back({real(v + d), data, bytes});
    if (v >= d && v < 2 * d) recvs.push_back({real(v - d), data, bytes});
    CANN_RETURN_IF_ERROR(ch.exchange(sends, recvs, deadline, traffic));
  }
  return OkStatus();
}

// dissemination: ceil(log2 P) alpha.
// Round k: send to rank + 2^k, receive from rank - 2^k (mod P). After ceil(log2 P) rounds every
// rank has heard, directly or through others, from every rank that entered the barrier.
Status barrier_dissemination(GlooChannel& ch, Deadline deadline) {
  const int p = ch.size(), r = ch.rank();
  Traffic ignored;  // a barrier moves no payload
  char out_byte = 0, in_byte = 0;
  for (int d = 1; d < p; d *= 2) {
    const PeerTransfer send{(r + d) % p, &out_byte, 1};
    const PeerTransfer recv{(r - d + p) % p, &in_byte, 1};
    CANN_RETURN_IF_ERROR(ch.exchange({&send, 1}, {&recv, 1}, deadline, ignored));
  }
  return OkStatus();
}

}  // namespace cann::comm
