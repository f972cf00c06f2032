#include "core/word_sum.h"

#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace cann {
namespace {

constexpr size_t kBlock = 64;
constexpr int kLanes = 16;

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint64_t finish(const uint64_t a[kLanes], const uint64_t b[kLanes], size_t n) {
  uint64_t h = mix(static_cast<uint64_t>(n) ^ 0x9e3779b97f4a7c15ULL);
  for (int j = 0; j < kLanes; ++j) {
    h = mix(h ^ a[j]);
    h = mix(h ^ b[j]);
  }
  return h;
}

void add_block(const unsigned char* p, uint64_t a[kLanes], uint64_t b[kLanes]) {
  for (int j = 0; j < kLanes; ++j) {
    const unsigned char* q = p + 4 * j;
    a[j] += static_cast<uint64_t>(q[0]) | static_cast<uint64_t>(q[1]) << 8 |
            static_cast<uint64_t>(q[2]) << 16 | static_cast<uint64_t>(q[3]) << 24;
    b[j] += a[j];
  }
}

}  // namespace

uint64_t copy_word_sum(void* dst, const void* src, size_t n) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  uint64_t a[kLanes] = {}, b[kLanes] = {};
  size_t i = 0;
#if defined(__AVX512F__)
  // Lane L of a 64-bit vector holds words 2L (low half) and 2L+1 (high half).
  const __m512i low = _mm512_set1_epi64(0xffffffffLL);
  __m512i a_lo = _mm512_setzero_si512(), a_hi = a_lo, b_lo = a_lo, b_hi = a_lo;
  for (; i + kBlock <= n; i += kBlock) {
    const __m512i x = _mm512_loadu_si512(s + i);
    if (d != nullptr) _mm512_storeu_si512(d + i, x);
    a_lo = _mm512_add_epi64(a_lo, _mm512_and_si512(x, low));
    a_hi = _mm512_add_epi64(a_hi, _mm512_srli_epi64(x, 32));
    b_lo = _mm512_add_epi64(b_lo, a_lo);
    b_hi = _mm512_add_epi64(b_hi, a_hi);
  }
  alignas(64) uint64_t v[4][8];
  _mm512_store_si512(v[0], a_lo);
  _mm512_store_si512(v[1], a_hi);
  _mm512_store_si512(v[2], b_lo);
  _mm512_store_si512(v[3], b_hi);
  for (int l = 0; l < 8; ++l) {
    a[2 * l] = v[0][l];
    a[2 * l + 1] = v[1][l];
    b[2 * l] = v[2][l];
    b[2 * l + 1] = v[3][l];
  }
#endif
  for (; i + kBlock <= n; i += kBlock) {
    if (d != nullptr) std::memcpy(d + i, s + i, kBlock);
    add_block(s + i, a, b);
  }
  if (i < n) {
    unsigned char tail[kBlock] = {};
    std::memcpy(tail, s + i, n - i);
    if (d != nullptr) std::memcpy(d + i, s + i, n - i);
    add_block(tail, a, b);
  }
  return finish(a, b, n);
}

void word_sum_add(WordSumParts* s, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
#if defined(__AVX512F__)
  const __m512i low = _mm512_set1_epi64(0xffffffffLL);
  alignas(64) uint64_t v[4][8];
  for (int l = 0; l < 8; ++l) {
    v[0][l] = s->a[2 * l];
    v[1][l] = s->a[2 * l + 1];
    v[2][l] = s->b[2 * l];
    v[3][l] = s->b[2 * l + 1];
  }
  __m512i a_lo = _mm512_load_si512(v[0]), a_hi = _mm512_load_si512(v[1]);
  __m512i b_lo = _mm512_load_si512(v[2]), b_hi = _mm512_load_si512(v[3]);
  for (; i + kBlock <= n; i += kBlock) {
    const __m512i x = _mm512_loadu_si512(p + i);
    a_lo = _mm512_add_epi64(a_lo, _mm512_and_si512(x, low));
    a_hi = _mm512_add_epi64(a_hi, _mm512_srli_epi64(x, 32));
    b_lo = _mm512_add_epi64(b_lo, a_lo);
    b_hi = _mm512_add_epi64(b_hi, a_hi);
  }
  _mm512_store_si512(v[0], a_lo);
  _mm512_store_si512(v[1], a_hi);
  _mm512_store_si512(v[2], b_lo);
  _mm512_store_si512(v[3], b_hi);
  for (int l = 0; l < 8; ++l) {
    s->a[2 * l] = v[0][l];
    s->a[2 * l + 1] = v[1][l];
    s->b[2 * l] = v[2][l];
    s->b[2 * l + 1] = v[3][l];
  }
#endif
  for (; i + kBlock <= n; i += kBlock) add_block(p + i, s->a, s->b);
  if (i < n) {
    unsigned char tail[kBlock] = {};
    std::memcpy(tail, p + i, n - i);
    add_block(tail, s->a, s->b);
  }
  s->bytes += n;
}

// A word of the left part is weighed once more for every block of the right part.
WordSumParts word_sum_join(const WordSumParts& left, const WordSumParts& right) {
  const uint64_t right_blocks = (right.bytes + kBlock - 1) / kBlock;
  WordSumParts out;
  for (int j = 0; j < kLanes; ++j) {
    out.a[j] = left.a[j] + right.a[j];
    out.b[j] = left.b[j] + right_blocks * left.a[j] + right.b[j];
  }
  out.bytes = left.bytes + right.bytes;
  return out;
}

uint64_t word_sum_finish(const WordSumParts& s) {
  return finish(s.a, s.b, s.bytes);
}

}  // namespace cann
