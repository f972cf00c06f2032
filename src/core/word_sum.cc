#include "core/word_sum.h"

#include <cstring>

#include "core/word_sum_lanes.h"

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

// Adds n bytes at src to `s`, copying them to dst on the way (dst == nullptr: no copy).
void add_copy(WordSumParts* s, void* dst, const void* src, size_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  size_t i = 0;
#if defined(__AVX512F__)
  WordSumLanes lanes = load_lanes(*s);
  for (; i + kBlock <= n; i += kBlock) {
    const __m512i x = _mm512_loadu_si512(p + i);
    if (d != nullptr) _mm512_storeu_si512(d + i, x);
    add_lanes(&lanes, x);
  }
  store_lanes(lanes, s);
#endif
  for (; i + kBlock <= n; i += kBlock) {
    if (d != nullptr) std::memcpy(d + i, p + i, kBlock);
    add_block(p + i, s->a, s->b);
  }
  if (i < n) {
    unsigned char tail[kBlock] = {};
    std::memcpy(tail, p + i, n - i);
    if (d != nullptr) std::memcpy(d + i, p + i, n - i);
    add_block(tail, s->a, s->b);
  }
  s->bytes += n;
}

}  // namespace

uint64_t copy_word_sum(void* dst, const void* src, size_t n) {
  WordSumParts s;
  add_copy(&s, dst, src, n);
  return word_sum_finish(s);
}

void word_sum_add(WordSumParts* s, const void* data, size_t n) {
  add_copy(s, nullptr, data, n);
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
