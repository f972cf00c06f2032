// Element types and reduction operators of collectives.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cann::comm {

enum class DataType { kFloat32, kBFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kAvg, kMax };

size_t dtype_size(DataType t);
std::string_view dtype_name(DataType t);
std::string_view reduce_op_name(ReduceOp op);

// The default for every wait on a peer: long enough for a slow first rendezvous, short enough
// that a dead peer is reported rather than hung on (--comm-timeout overrides it).
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(60)};

// Per-call options (c10d style). `timeout` bounds the wait for peers; `tag` labels the call in
// error messages and in the flight recorder ("grad_bucket_3").
struct Options {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  std::string tag;
};

// bf16 <-> fp32. bf16 is the top half of an fp32; conversion rounds to nearest even.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace cann::comm
