// Elementwise loops, written plainly so the compiler vectorizes them; the naive reference in the
// tests is the same arithmetic done one element at a time.
#include "comm/gloo_reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace cann::comm {
namespace {

template <typename T>
void sum_into(T* acc, const T* in, size_t n) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; ++i)
      acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(in[i]));
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += in[i];
  }
}

template <typename T>
void max_into(T* acc, const T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
}

template <typename T>
void reduce_typed(void* acc, const void* in, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax)
    max_into(static_cast<T*>(acc), static_cast<const T*>(in), n);
  else
    sum_into(static_cast<T*>(acc), static_cast<const T*>(in), n);
}

// Gloo calls these with c aliasing a (its ring reduces into the output buffer), so copy first
// only when they differ.
template <typename T, bool kMax>
void gloo_fn(void* c, const void* a, const void* b, size_t n) {
  if (c != a) std::copy_n(static_cast<const T*>(a), n, static_cast<T*>(c));
  if constexpr (kMax)
    max_into(static_cast<T*>(c), static_cast<const T*>(b), n);
  else
    sum_into(static_cast<T*>(c), static_cast<const T*>(b), n);
}

// bf16 <-> fp32 exactly as types.cc does it (round to nearest even, NaN stays NaN), inline so
// the loops below vectorize; the tests compare against types.cc bit for bit.
inline float widen(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t narrow(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

template <typename T>
void divide_typed(T* data, size_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) data[i] = data[i] / d;
}

}  // namespace

void reduce_inplace(void* acc, const void* in, size_t n, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return reduce_typed<float>(acc, in, n, op);
    case DataType::kInt32:
      return reduce_typed<int32_t>(acc, in, n, op);
    case DataType::kInt64:
      return reduce_typed<int64_t>(acc, in, n, op);
    case DataType::kBFloat16:
      break;  // bf16 goes through bf16_accumulate
  }
}

GlooReduceFn gloo_reduce_fn(DataType type, ReduceOp op) {
  const bool is_max = op == ReduceOp::kMax;
  switch (type) {
    case DataType::kFloat32:
      return is_max ? &gloo_fn<float, true> : &gloo_fn<float, false>;
    case DataType::kInt32:
      return is_max ? &gloo_fn<int32_t, true> : &gloo_fn<int32_t, false>;
    case DataType::kInt64:
      return is_max ? &gloo_fn<int64_t, true> : &gloo_fn<int64_t, false>;
    case DataType::kBFloat16:
      break;
  }
  return nullptr;
}

void divide_inplace(void* data, size_t n, DataType type, int divisor) {
  switch (type) {
    case DataType::kFloat32:
      return divide_typed(static_cast<float*>(data), n, divisor);
    case DataType::kInt32:
      return divide_typed(static_cast<int32_t*>(data), n, divisor);
    case DataType::kInt64:
      return divide_typed(static_cast<int64_t*>(data), n, divisor);
    case DataType::kBFloat16:
      break;
  }
}

void bf16_widen(float* acc, const uint16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = widen(in[i]);
}

void bf16_accumulate(float* acc, const uint16_t* in, size_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], widen(in[i]));
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] += widen(in[i]);
  }
}

void bf16_narrow(uint16_t* out, const float* acc, size_t n, float divisor) {
  if (divisor == 1.0f) {
    for (size_t i = 0; i < n; ++i) out[i] = narrow(acc[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = narrow(acc[i] / divisor);
  }
}

}  // namespace cann::comm
