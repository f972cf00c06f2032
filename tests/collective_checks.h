// The collective conformance checks: every collective of comm::Group (allreduce and
// reduce_scatter with sum, avg and max; allgather, in place too; allgatherv and alltoallv with
// uneven and empty blocks; broadcast; alltoall; barrier; point to point around the ring) run
// once on a group and compared bit for bit with a naive reference. Shared by the conformance
// suite (comm_conformance_test.cc) and the backends' forked-process tests.
//
// Data are small integers ((37r + 11i + 5s) mod 23 - 11), so sums of up to 8 ranks stay exact
// in bf16 and a backend must match the reference bit for bit in every dtype.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/shm_reduce.h"

namespace cann::comm::conformance {

using Bytes = std::vector<std::byte>;
inline constexpr size_t kBig = (size_t{1} << 20) + 3;
inline constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32,
                                      DataType::kInt64};

inline void put(DataType t, std::byte* p, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kBFloat16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kInt32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
  }
}

inline double get(DataType t, const std::byte* p, size_t i) {
  switch (t) {
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(p)[i];
    case DataType::kBFloat16:
      return bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::kInt32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

// Elements [start, start + n) of rank r's sequence number `salt`.
inline Bytes pattern(DataType t, size_t n, int r, int salt, size_t start = 0) {
  Bytes b(n * dtype_size(t));
  for (size_t i = 0; i < n; ++i)
    put(t, b.data(), i, static_cast<double>((r * 37 + (start + i) * 11 + salt * 5) % 23) - 11);
  return b;
}

inline std::string compare(const Bytes& got, const Bytes& want, DataType t,
                           const std::string& what) {
  if (got.size() != want.size()) return what + ": size " + std::to_string(got.size());
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  const size_t n = got.size() / dtype_size(t);
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(got.data() + i * dtype_size(t), want.data() + i * dtype_size(t),
                    dtype_size(t)) != 0)
      return what + ": element " + std::to_string(i) + " of " + std::to_string(n) + " is " +
             std::to_string(get(t, got.data(), i)) + ", expected " +
             std::to_string(get(t, want.data(), i));
  }
  return "";
}

inline Bytes concat(const std::vector<Bytes>& parts) {
  Bytes all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// The naive reduction of `inputs` (one per rank).
inline Bytes reference(const std::vector<Bytes>& inputs, size_t n, DataType t, ReduceOp op) {
  std::vector<const std::byte*> srcs;
  for (const auto& in : inputs) srcs.push_back(in.data());
  Bytes out(n * dtype_size(t));
  shm::reduce_buffers_reference(out.data(), srcs, n, t, op);
  return out;
}

// The naive reduction over ranks 0..world-1 of pattern(t, n, q, salt, start), built 16K
// elements at a time so that no rank holds all P inputs of a large count at once.
inline Bytes reference(DataType t, ReduceOp op, int world, int salt, size_t start, size_t n) {
  constexpr size_t kPiece = 1 << 14;
  Bytes out(n * dtype_size(t));
  for (size_t b = 0; b < n; b += kPiece) {
    const size_t m = std::min(kPiece, n - b);
    std::vector<Bytes> inputs;
    for (int q = 0; q < world; ++q) inputs.push_back(pattern(t, m, q, salt, start + b));
    const Bytes piece = reference(inputs, m, t, op);
    std::copy(piece.begin(), piece.end(), out.begin() + static_cast<ptrdiff_t>(b * dtype_size(t)));
  }
  return out;
}

// Runs every collective of group.h once on `g` and returns what went wrong ("" when nothing).
// Returns strings rather than asserting so that forked ranks can use it too. Without `growing`
// only the collectives whose buffers do not grow with the world size run (allreduce,
// broadcast, barrier, the ring): a large count at every world size stays affordable. Without
// `self_send` a group of one rank skips the ring, which would send to itself (gloo's pairs
// connect distinct ranks only).
inline std::string check_collectives(Group& g, DataType t, size_t count, bool growing = true,
                                     bool self_send = true) {
  const int world = g.size(), r = g.rank();
  const size_t es = dtype_size(t), p = static_cast<size_t>(world);
  std::string errors;
  auto label = [&](const char* op) {
    return std::string(op) + " " + std::string(dtype_name(t)) + " x" + std::to_string(count) +
           " on rank " + std::to_string(r) + "/" + std::to_string(world);
  };
  auto check = [&](const std::shared_ptr<Work>& work, const std::string& what,
                   const std::function<std::string()>& verify) {
    const Status s = work->wait(std::chrono::seconds(60));
    const std::string e = s.ok() ? verify() : what + ": " + s.message();
    if (!e.empty()) errors += e + "\n";
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    const int salt = static_cast<int>(op);
    Bytes data = pattern(t, count, r, salt);
    const std::string ar = label("allreduce") + " " + std::string(reduce_op_name(op));
    check(g.allreduce(data.data(), count, t, op), ar,
          [&] { return compare(data, reference(t, op, world, salt, 0, count), t, ar); });
    if (!growing) continue;
    const Bytes in = pattern(t, p * count, r, 3 + salt);
    Bytes out(count * es);
    const std::string rs = label("reduce_scatter") + " " + std::string(reduce_op_name(op));
    check(g.reduce_scatter(out.data(), in.data(), count, t, op), rs, [&] {
      return compare(out, reference(t, op, world, 3 + salt, static_cast<size_t>(r) * count, count),
                     t, rs);
    });
  }
  if (growing) {
    std::vector<Bytes> blocks, vblocks;
    std::vector<size_t> vcounts;
    for (int q = 0; q < world; ++q) {
      blocks.push_back(pattern(t, count, q, 10));
      vcounts.push_back(q % 3 == 1 ? 0 : count + static_cast<size_t>(q));  // uneven, some empty
      vblocks.push_back(pattern(t, vcounts.back(), q, 11));
    }
    Bytes gathered(p * count * es);
    check(g.allgather(gathered.data(), blocks[static_cast<size_t>(r)].data(), count, t),
          label("allgather"),
          [&] { return compare(gathered, concat(blocks), t, label("allgather")); });
    Bytes in_place(p * count * es);  // `in` aliases out's own block
    std::copy(blocks[static_cast<size_t>(r)].begin(), blocks[static_cast<size_t>(r)].end(),
              in_place.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r) * count * es));
    check(g.allgather(in_place.data(), in_place.data() + static_cast<size_t>(r) * count * es, count,
                      t),
          label("allgather in place"),
          [&] { return compare(in_place, concat(blocks), t, label("allgather in place")); });
    Bytes vgathered(concat(vblocks).size());
    check(g.allgatherv(vgathered.data(), vblocks[static_cast<size_t>(r)].data(), vcounts, t),
          label("allgatherv"),
          [&] { return compare(vgathered, concat(vblocks), t, label("allgatherv")); });
  }

  const int root = static_cast<int>(count % p);
  Bytes bcast = pattern(t, count, r == root ? root : r + 100, 12);
  check(g.broadcast(bcast.data(), count, t, root), label("broadcast"),
        [&] { return compare(bcast, pattern(t, count, root, 12), t, label("broadcast")); });

  if (growing) {
    std::vector<Bytes> from(p);
    for (int q = 0; q < world; ++q)
      from[static_cast<size_t>(q)] = pattern(t, count, q, 13, static_cast<size_t>(r) * count);
    const Bytes a2a_in = pattern(t, p * count, r, 13);
    Bytes a2a_out(p * count * es);
    check(g.alltoall(a2a_out.data(), a2a_in.data(), count, t), label("alltoall"),
          [&] { return compare(a2a_out, concat(from), t, label("alltoall")); });

    // Rank s sends f(s, d) elements to rank d: uneven, a third of the pairs empty.
    auto f = [&](int s, int d) {
      return (s + 2 * d) % 3 == 0 ? 0 : count + static_cast<size_t>(s + d);
    };
    std::vector<size_t> in_counts, out_counts;
    std::vector<Bytes> sent, received;
    for (int q = 0; q < world; ++q) {
      in_counts.push_back(f(r, q));
      out_counts.push_back(f(q, r));
      sent.push_back(pattern(t, f(r, q), r, 14 + q));
      received.push_back(pattern(t, f(q, r), q, 14 + r));
    }
    const Bytes v_in = concat(sent);
    Bytes v_out(concat(received).size());
    check(g.alltoallv(v_out.data(), out_counts, v_in.data(), in_counts, t), label("alltoallv"),
          [&] { return compare(v_out, concat(received), t, label("alltoallv")); });
  }

  check(g.barrier(), label("barrier"), [] { return std::string(); });
  if (world == 1 && !self_send) return errors;

  // The ring: every rank sends to r+1 and receives from r-1 at the same time.
  const int next = (r + 1) % world, prev = (r + world - 1) % world;
  const uint32_t tag = 7 + static_cast<uint32_t>(count % 5);
  const Bytes mine = pattern(t, count, r, 15);
  Bytes theirs(count * es);
  auto send = g.send(mine.data(), count, t, next, tag);
  check(g.recv(theirs.data(), count, t, prev, tag), label("ring recv"),
        [&] { return compare(theirs, pattern(t, count, prev, 15), t, label("ring recv")); });
  check(send, label("ring send"), [] { return std::string(); });
  return errors;
}

}  // namespace cann::comm::conformance
