// 1-bit and top-k compressed all-reduce.
#include "comm/compressed_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cann::comm {
namespace {

// The kernels below make one or two passes over the data each (the compression runs on the
// communication thread beside backward, so its memory passes are what it costs): the sum of
// squares of x + e without storing it, then one pass that packs the signs of x + e and leaves
// the error in e. With AVX-512, 16 signs come from one compare into a mask register and go back
// to values with one blend.

// Sum of (x[i] + e[i])^2, in float lanes within blocks and double across them (the lanes hold
// at most 4096 terms each, so the sum keeps float's relative precision for any length).
double sum_of_squares(const float* x, const float* e, size_t len) {
  double total = 0.0;
  constexpr size_t kBlock = 4096;
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t n = std::min(kBlock, len - b);
    const float* xb = x + b;
    const float* eb = e + b;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < n; ++i) {
      const float c = xb[i] + eb[i];
      acc += c * c;
    }
    total += acc;
  }
  return total;
}

// c = x + e (len); packs sign(c) into words[1..] (bit i % 32 of word 1 + i / 32; 1 = non-
// negative) after the fp32 scale in words[0], and leaves e = c - decompress(compress(c)).
// compress(c) = (||c||_2 / sqrt(len), signs).
void compress_with_feedback(uint32_t* words, const float* x, float* e, size_t len, size_t nwords) {
  const double sq = sum_of_squares(x, e, len);
  const float scale = len > 0 ? static_cast<float>(std::sqrt(sq / static_cast<double>(len))) : 0.0f;
  std::memcpy(&words[0], &scale, 4);
  std::fill(words + 1, words + nwords, 0u);
  const size_t full = len / 32;
#if defined(__AVX512F__)
  const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
  const __m512 zero = _mm512_setzero_ps();
  for (size_t w = 0; w < full; ++w) {
    const size_t i = w * 32;
    const __m512 c0 = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(e + i));
    const __m512 c1 = _mm512_add_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(e + i + 16));
    const __mmask16 m0 = _mm512_cmp_ps_mask(c0, zero, _CMP_GE_OQ);
    const __mmask16 m1 = _mm512_cmp_ps_mask(c1, zero, _CMP_GE_OQ);
    _mm512_storeu_ps(e + i, _mm512_sub_ps(c0, _mm512_mask_blend_ps(m0, neg, pos)));
    _mm512_storeu_ps(e + i + 16, _mm512_sub_ps(c1, _mm512_mask_blend_ps(m1, neg, pos)));
    words[1 + w] = static_cast<uint32_t>(m0) | (static_cast<uint32_t>(m1) << 16);
  }
#else
  for (size_t w = 0; w < full; ++w) {
    uint32_t bits = 0;
    for (uint32_t b = 0; b < 32; ++b) {
      const size_t i = w * 32 + b;
      const float c = x[i] + e[i];
      const bool nonneg = c >= 0.0f;
      bits |= static_cast<uint32_t>(nonneg) << b;
      e[i] = c - (nonneg ? scale : -scale);
    }
    words[1 + w] = bits;
  }
#endif
  for (size_t i = full * 32; i < len; ++i) {
    const float c = x[i] + e[i];
    const bool nonneg = c >= 0.0f;
    if (nonneg) words[1 + i / 32] |= 1u << (i % 32);
    e[i] = c - (nonneg ? scale : -scale);
  }
}

// out = weight * decompress(words) (accumulate: out += ...), len values.
template <bool kAccumulate>
void decompress_chunk(float* out, const uint32_t* words, size_t len, float weight) {
  float scale;
  std::memcpy(&scale, &words[0], 4);
  const float s = scale * weight;
  const size_t full = len / 32;
#if defined(__AVX512F__)
  const __m512 pos = _mm512_set1_ps(s), neg = _mm512_set1_ps(-s);
  for (size_t w = 0; w < full; ++w) {
    const uint32_t bits = words[1 + w];
    float* o = out + w * 32;
    __m512 v0 = _mm512_mask_blend_ps(static_cast<__mmask16>(bits & 0xffffu), neg, pos);
    __m512 v1 = _mm512_mask_blend_ps(static_cast<__mmask16>(bits >> 16), neg, pos);
    if constexpr (kAccumulate) {
      v0 = _mm512_add_ps(_mm512_loadu_ps(o), v0);
      v1 = _mm512_add_ps(_mm512_loadu_ps(o + 16), v1);
    }
    _mm512_storeu_ps(o, v0);
    _mm512_storeu_ps(o + 16, v1);
  }
#else
  for (size_t w = 0; w < full; ++w) {
    const uint32_t bits = words[1 + w];
    float* o = out + w * 32;
    for (uint32_t b = 0; b < 32; ++b) {
      const float v = ((bits >> b) & 1u) ? s : -s;
      o[b] = kAccumulate ? o[b] + v : v;
    }
  }
#endif
  for (size_t i = full * 32; i < len; ++i) {
    const float v = (words[1 + i / 32] >> (i % 32)) & 1u ? s : -s;
    out[i] = kAccumulate ? out[i] + v : v;
  }
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
  scratch_.assign(chunk_, 0.0f);
}

Status OneBitAllreduce::run(float* data, const Options& opts) {
  const size_t P = static_cast<size_t>(group_.size());
  const int me = group_.rank();
  // Worker side: compensate, compress chunk j for rank j, keep the error.
  for (size_t j = 0; j < P; ++j) {
    const size_t begin = std::min(count_, j * chunk_);
    const size_t len = std::min(count_, begin + chunk_) - begin;
    compress_with_feedback(&send_[j * words_], data + begin, worker_error_.data() + begin, len,
                           words_);
  }
  CANN_RETURN_IF_ERROR(group_.alltoall(recv_.data(), send_.data(), words_, DataType::kInt32, opts)
                           ->wait(opts.timeout));
  // Server side: average my chunk over ranks, compensate, compress once more.
  const size_t my_begin = std::min(count_, static_cast<size_t>(me) * chunk_);
  const size_t my_len = std::min(count_, my_begin + chunk_) - my_begin;
  float* avg = scratch_.data();
  const float inv = 1.0f / static_cast<float>(P);
  for (size_t r = 0; r < P; ++r) {
    if (r == 0)
      decompress_chunk<false>(avg, &recv_[0], my_len, inv);
    else
      decompress_chunk<true>(avg, &recv_[r * words_], my_len, inv);
  }
  uint32_t* mine = &send_[static_cast<size_t>(me) * words_];  // sent already; reused
  compress_with_feedback(mine, avg, server_error_.data(), my_len, words_);
  CANN_RETURN_IF_ERROR(
      group_.allgather(gathered_.data(), mine, words_, DataType::kInt32, opts)->wait(opts.timeout));
  // Everyone decompresses every server chunk.
  for (size_t j = 0; j < P; ++j) {
    const size_t begin = std::min(count_, j * chunk_);
    const size_t len = std::min(count_, begin + chunk_) - begin;
    decompress_chunk<false>(data + begin, &gathered_[j * words_], len, 1.0f);
  }
  // Both phases send P-1 packed chunks of words_ 32-bit words (all-to-all, then all-gather).
  last_bytes_sent_ = 2ull * (P - 1) * words_ * 4;
  return OkStatus();
}

TopKAllreduce::TopKAllreduce(Group& group, size_t count, double ratio)
    : group_(group), count_(count) {
  error_.assign(count, 0.0f);
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
  // The k entries of largest magnitude, ties broken by the lower index (so every run selects
  // the same ones), by radix selection on the magnitudes' bit patterns (monotonic in the
  // magnitude): a histogram of their top 12 bits finds the bin holding the k-th largest;
  // everything above it is sent, and only that bin's entries are ordered.
  auto key = [&](size_t i) {
    uint32_t b;
    std::memcpy(&b, &error_[i], 4);
    return b & 0x7fffffffu;
  };
  constexpr int kShift = 19;  // 31 magnitude bits -> 4096 bins
  hist_.assign(size_t{1} << (31 - kShift), 0);
  for (size_t i = 0; i < count_; ++i) ++hist_[key(i) >> kShift];
  size_t bin = hist_.size(), above = 0;
  while (bin > 0 && above + hist_[bin - 1] < k_) above += hist_[--bin];
  const uint32_t cut = static_cast<uint32_t>(bin - 1);  // the bin of the k-th largest
  order_.clear();
  size_t j = 0;
  auto take = [&](uint32_t idx) {
    send_[j] = static_cast<int32_t>(idx);
    std::memcpy(&send_[k_ + j], &error_[idx], 4);
    ++j;
  };
  for (size_t i = 0; i < count_; ++i) {
    const uint32_t b = key(i) >> kShift;
    if (b > cut)
      take(static_cast<uint32_t>(i));
    else if (b == cut)
      order_.push_back(static_cast<uint32_t>(i));
  }
  const size_t rest = k_ - above;
  std::nth_element(order_.begin(), order_.begin() + static_cast<long>(rest - 1), order_.end(),
                   [&](uint32_t a, uint32_t b) {
                     const uint32_t ka = key(a), kb = key(b);
                     return ka != kb ? ka > kb : a < b;
                   });
  for (size_t r = 0; r < rest; ++r) take(order_[r]);
  for (size_t r = 0; r < k_; ++r) error_[static_cast<uint32_t>(send_[r])] = 0.0f;  // sent
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
