// 1-bit and top-k compressed all-reduce.
#include "comm/compressed_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cann::comm {
namespace {

// Packs v (len) into words: word 0 holds the fp32 scale's bits, then one sign bit per element
// (bit i % 32 of word 1 + i / 32; 1 = non-negative). Returns the decompressed values in `out`
// (out may be null) so the caller can form the error.
void compress_chunk(uint32_t* words, float* out, const float* v, size_t len, size_t nwords) {
  double sq = 0.0;
  for (size_t i = 0; i < len; ++i) sq += static_cast<double>(v[i]) * v[i];
  const float scale = len > 0 ? static_cast<float>(std::sqrt(sq / static_cast<double>(len))) : 0.0f;
  std::memcpy(&words[0], &scale, 4);
  std::fill(words + 1, words + nwords, 0u);
  // Whole words first (32 signs each, a loop GCC turns into vector compares and a mask), then
  // the tail.
  const size_t full = len / 32;
  for (size_t w = 0; w < full; ++w) {
    const float* x = v + w * 32;
    uint32_t bits = 0;
    for (uint32_t b = 0; b < 32; ++b) bits |= static_cast<uint32_t>(x[b] >= 0.0f) << b;
    words[1 + w] = bits;
  }
  for (size_t i = full * 32; i < len; ++i)
    if (v[i] >= 0.0f) words[1 + i / 32] |= 1u << (i % 32);
  if (out != nullptr)
    for (size_t i = 0; i < len; ++i) out[i] = v[i] >= 0.0f ? scale : -scale;
}

// Adds weight * decompress(words) to acc (len).
void accumulate_chunk(float* acc, const uint32_t* words, size_t len, float weight) {
  float scale;
  std::memcpy(&scale, &words[0], 4);
  const float s = scale * weight;
  const size_t full = len / 32;
  for (size_t w = 0; w < full; ++w) {
    const uint32_t bits = words[1 + w];
    float* a = acc + w * 32;
    for (uint32_t b = 0; b < 32; ++b) a[b] += ((bits >> b) & 1u) ? s : -s;
  }
  for (size_t i = full * 32; i < len; ++i) acc[i] += (words[1 + i / 32] >> (i % 32)) & 1u ? s : -s;
}

}  // namespace

OneBitAllreduce::OneBitAllreduce(Group& group, size_t count) : group_(group), count_(count) {
  const size_t P = static_cast<size_t>(group.size());
  chunk_ = (count + P - 1) / P;
  words_ = 1 + (chunk_ + 31) / 32;
  worker_error_.assign(count, 0.0f);
  server_error_.assign(chunk_, 0.0f);
  send_.assign(P * words_, 0u);
  recv_.assign(P * words_, 0u);
  gathered_.assign(P * words_, 0u);
  scratch_.assign(std::max(count, chunk_), 0.0f);
}

Status OneBitAllreduce::run(float* data, const Options& opts) {
  const size_t P = static_cast<size_t>(group_.size());
  const int me = group_.rank();
  // Worker side: compensate, compress chunk j for rank j, keep the error.
  for (size_t j = 0; j < P; ++j) {
    const size_t begin = std::min(count_, j * chunk_);
    const size_t len = std::min(count_, begin + chunk_) - begin;
    // c = x + e; e = c - decompress(compress(c)), with the error buffer reused for the
    // decompressed values.
    float* c = scratch_.data() + begin;
    float* e = worker_error_.data() + begin;
    for (size_t i = 0; i < len; ++i) c[i] = data[begin + i] + e[i];
    compress_chunk(&send_[j * words_], e, c, len, words_);
    for (size_t i = 0; i < len; ++i) e[i] = c[i] - e[i];
  }
  CANN_RETURN_IF_ERROR(group_.alltoall(recv_.data(), send_.data(), words_, DataType::kInt32, opts)
                           ->wait(opts.timeout));
  // Server side: average my chunk over ranks, compensate, compress once more.
  const size_t my_begin = std::min(count_, static_cast<size_t>(me) * chunk_);
  const size_t my_len = std::min(count_, my_begin + chunk_) - my_begin;
  std::vector<float> avg(my_len, 0.0f);
  for (size_t r = 0; r < P; ++r)
    accumulate_chunk(avg.data(), &recv_[r * words_], my_len, 1.0f / static_cast<float>(P));
  for (size_t i = 0; i < my_len; ++i) avg[i] += server_error_[i];
  std::vector<uint32_t> mine(words_);
  std::vector<float> decompressed(my_len);
  compress_chunk(mine.data(), decompressed.data(), avg.data(), my_len, words_);
  for (size_t i = 0; i < my_len; ++i) server_error_[i] = avg[i] - decompressed[i];
  CANN_RETURN_IF_ERROR(
      group_.allgather(gathered_.data(), mine.data(), words_, DataType::kInt32, opts)
          ->wait(opts.timeout));
  // Everyone decompresses every server chunk.
  std::fill(data, data + count_, 0.0f);
  for (size_t j = 0; j < P; ++j) {
    const size_t begin = std::min(count_, j * chunk_);
    const size_t len = std::min(count_, begin + chunk_) - begin;
    accumulate_chunk(data + begin, &gathered_[j * words_], len, 1.0f);
  }
  // Both phases send P-1 packed chunks of words_ 32-bit words (all-to-all, then all-gather).
  last_bytes_sent_ = 2ull * (P - 1) * words_ * 4;
  return OkStatus();
}

TopKAllreduce::TopKAllreduce(Group& group, size_t count, double ratio)
    : group_(group), count_(count) {
  error_.assign(count, 0.0f);
  order_.resize(count);
  set_ratio(ratio);
}

void TopKAllreduce::set_ratio(double ratio) {
  const size_t k = std::min(
      count_, std::max<size_t>(1, static_cast<size_t>(ratio * static_cast<double>(count_))));
  if (k == k_ && !send_.empty()) return;
  k_ = k;
  std::vector<int32_t>(2 * k_).swap(send_);
  std::vector<int32_t>(2 * k_ * static_cast<size_t>(group_.size())).swap(gathered_);
}

Status TopKAllreduce::run(float* data, const Options& opts) {
  const size_t P = static_cast<size_t>(group_.size());
  if (count_ == 0) return OkStatus();
  for (size_t i = 0; i < count_; ++i) error_[i] += data[i];  // error_ now holds c = x + e
  for (size_t i = 0; i < count_; ++i) order_[i] = static_cast<uint32_t>(i);
  // Largest magnitudes first; ties broken by index so every run selects the same entries.
  std::nth_element(order_.begin(), order_.begin() + static_cast<long>(k_ - 1), order_.end(),
                   [&](uint32_t a, uint32_t b) {
                     const float fa = std::fabs(error_[a]), fb = std::fabs(error_[b]);
                     return fa != fb ? fa > fb : a < b;
                   });
  for (size_t j = 0; j < k_; ++j) {
    const uint32_t idx = order_[j];
    send_[j] = static_cast<int32_t>(idx);
    std::memcpy(&send_[k_ + j], &error_[idx], 4);
    error_[idx] = 0.0f;  // sent: what stays in error_ is c - kept
  }
  CANN_RETURN_IF_ERROR(
      group_.allgather(gathered_.data(), send_.data(), 2 * k_, DataType::kInt32, opts)
          ->wait(opts.timeout));
  std::fill(data, data + count_, 0.0f);
  const float inv = 1.0f / static_cast<float>(P);
  for (size_t r = 0; r < P; ++r) {
    const int32_t* block = &gathered_[r * 2 * k_];
    for (size_t j = 0; j < k_; ++j) {
      float v;
      std::memcpy(&v, &block[k_ + j], 4);
      data[block[j]] += v * inv;
    }
  }
  last_bytes_sent_ = (P - 1) * 2 * k_ * 4;
  return OkStatus();
}

void mean_over_ranks(size_t count, int ranks, const float* all, float* out) {
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += all[static_cast<size_t>(r) * count + i];
    out[i] = static_cast<float>(sum / ranks);
  }
}

void reshard_onebit_errors(size_t count, int old_world, const float* worker_all,
                           const float* server_all, int world, int rank, float* worker,
                           float* server) {
  mean_over_ranks(count, old_world, worker_all, worker);
  // Old rank r's chunk starts at r x old_chunk, both in the vector and in server_all: the
  // gathered chunks are the whole vector's server errors in place (and padding past count).
  const size_t chunk = (count + world - 1) / world;
  for (size_t j = 0; j < chunk; ++j) {
    const size_t i = static_cast<size_t>(rank) * chunk + j;
    server[j] = i < count ? server_all[i] : 0.0f;
  }
}

}  // namespace cann::comm
