// Tiled, vectorizable reduction over k sources, and its element-by-element reference.
#include "comm/shm_reduce.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace cann::comm::shm {

namespace {

// 1024 accumulators: 4 KiB (fp32) or 8 KiB (int64), well inside L1 next to the sources' lines.
constexpr size_t kTile = 1024;

// Element <-> accumulator conversions, inline so the tile loops vectorize. bf16 rounding matches
// float_to_bf16 in types.cc bit for bit (NaN stays a quiet NaN; otherwise nearest even).
inline float load_f32(float x) {
  return x;
}
inline float store_f32(float x) {
  return x;
}
inline float load_bf16(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline uint16_t store_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline int64_t load_i32(int32_t x) {
  return x;
}
inline int32_t store_i32(int64_t x) {
  return static_cast<int32_t>(x);
}
inline int64_t load_i64(int64_t x) {
  return x;
}
inline int64_t store_i64(int64_t x) {
  return x;
}

// Addition that wraps instead of overflowing (signed overflow is undefined behaviour).
inline float add(float a, float b) {
  return a + b;
}
inline int64_t add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline float take_max(float a, float b) {
  return a < b ? b : a;
}
inline int64_t take_max(int64_t a, int64_t b) {
  return a < b ? b : a;
}

template <typename T, typename Acc, Acc (*load)(T), T (*store)(Acc)>
void reduce_tiled(std::byte* dst_bytes, std::span<const std::byte* const> srcs, size_t n,
                  ReduceOp op) {
  const Acc divisor = static_cast<Acc>(srcs.size());
  Acc acc[kTile];
  for (size_t i0 = 0; i0 < n; i0 += kTile) {
    const size_t m = std::min(kTile, n - i0);
    const T* first = reinterpret_cast<const T*>(srcs[0]) + i0;
    for (size_t j = 0; j < m; ++j) acc[j] = load(first[j]);
    for (size_t s = 1; s < srcs.size(); ++s) {
      const T* src = reinterpret_cast<const T*>(srcs[s]) + i0;
      if (op == ReduceOp::kMax) {
        for (size_t j = 0; j < m; ++j) acc[j] = take_max(acc[j], load(src[j]));
      } else {
        for (size_t j = 0; j < m; ++j) acc[j] = add(acc[j], load(src[j]));
      }
    }
    if (op == ReduceOp::kAvg)
      for (size_t j = 0; j < m; ++j) acc[j] = acc[j] / divisor;
    // Written only after every source of the tile was read: dst may be one of the sources.
    T* dst = reinterpret_cast<T*>(dst_bytes) + i0;
    for (size_t j = 0; j < m; ++j) dst[j] = store(acc[j]);
  }
}

}  // namespace

void reduce_buffers(std::byte* dst, std::span<const std::byte* const> srcs, size_t n, DataType type,
                    ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return reduce_tiled<float, float, load_f32, store_f32>(dst, srcs, n, op);
    case DataType::kBFloat16:
      return reduce_tiled<uint16_t, float, load_bf16, store_bf16>(dst, srcs, n, op);
    case DataType::kInt32:
      return reduce_tiled<int32_t, int64_t, load_i32, store_i32>(dst, srcs, n, op);
    case DataType::kInt64:
      return reduce_tiled<int64_t, int64_t, load_i64, store_i64>(dst, srcs, n, op);
  }
}

void reduce_buffers_reference(std::byte* dst, std::span<const std::byte* const> srcs, size_t n,
                              DataType type, ReduceOp op) {
  const size_t size = dtype_size(type);
  const size_t k = srcs.size();
  // Element i of source s, widened to the accumulation type (fp32 or int64).
  auto get_f = [&](size_t s, size_t i) {
    if (type == DataType::kFloat32) {
      float v;
      std::memcpy(&v, srcs[s] + i * size, 4);
      return v;
    }
    uint16_t b;
    std::memcpy(&b, srcs[s] + i * size, 2);
    return bf16_to_float(b);
  };
  auto get_i = [&](size_t s, size_t i) -> int64_t {
    if (type == DataType::kInt32) {
      int32_t v;
      std::memcpy(&v, srcs[s] + i * size, 4);
      return v;
    }
    int64_t v;
    std::memcpy(&v, srcs[s] + i * size, 8);
    return v;
  };
  for (size_t i = 0; i < n; ++i) {
    if (type == DataType::kFloat32 || type == DataType::kBFloat16) {
      float r = get_f(0, i);
      for (size_t s = 1; s < k; ++s)
        r = op == ReduceOp::kMax ? std::max(r, get_f(s, i)) : r + get_f(s, i);
      if (op == ReduceOp::kAvg) r = r / static_cast<float>(k);
      if (type == DataType::kFloat32) {
        std::memcpy(dst + i * 4, &r, 4);
      } else {
        const uint16_t b = float_to_bf16(r);
        std::memcpy(dst + i * 2, &b, 2);
      }
    } else {
      uint64_t sum = static_cast<uint64_t>(get_i(0, i));
      int64_t max = get_i(0, i);
      for (size_t s = 1; s < k; ++s) {
        sum += static_cast<uint64_t>(get_i(s, i));
        max = std::max(max, get_i(s, i));
      }
      int64_t r = op == ReduceOp::kMax ? max : static_cast<int64_t>(sum);
      if (op == ReduceOp::kAvg) r /= static_cast<int64_t>(k);
      if (type == DataType::kInt32) {
        const int32_t v = static_cast<int32_t>(r);
        std::memcpy(dst + i * 4, &v, 4);
      } else {
        std::memcpy(dst + i * 8, &r, 8);
      }
    }
  }
}

}  // namespace cann::comm::shm
