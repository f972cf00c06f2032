// The word sum (core/word_sum.h) in AVX-512 registers, for code that holds each 64-byte block
// in one anyway: the sum's own loops and an optimizer that sums what it stores.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

#include "core/word_sum.h"

namespace cann {

// 64-bit lane l of a_lo sums word 2l of each block (its low half), a_hi word 2l + 1; b_lo and
// b_hi are their Fletcher sums.
struct WordSumLanes {
  __m512i a_lo, a_hi, b_lo, b_hi;
};

inline WordSumLanes load_lanes(const WordSumParts& s) {
  alignas(64) uint64_t v[4][8];
  for (int l = 0; l < 8; ++l) {
    v[0][l] = s.a[2 * l];
    v[1][l] = s.a[2 * l + 1];
    v[2][l] = s.b[2 * l];
    v[3][l] = s.b[2 * l + 1];
  }
  return {_mm512_load_si512(v[0]), _mm512_load_si512(v[1]), _mm512_load_si512(v[2]),
          _mm512_load_si512(v[3])};
}

inline void store_lanes(const WordSumLanes& x, WordSumParts* s) {
  alignas(64) uint64_t v[4][8];
  _mm512_store_si512(v[0], x.a_lo);
  _mm512_store_si512(v[1], x.a_hi);
  _mm512_store_si512(v[2], x.b_lo);
  _mm512_store_si512(v[3], x.b_hi);
  for (int l = 0; l < 8; ++l) {
    s->a[2 * l] = v[0][l];
    s->a[2 * l + 1] = v[1][l];
    s->b[2 * l] = v[2][l];
    s->b[2 * l + 1] = v[3][l];
  }
}

// Adds the next block.
inline void add_lanes(WordSumLanes* s, __m512i block) {
  const __m512i low = _mm512_set1_epi64(0xffffffffLL);
  s->a_lo = _mm512_add_epi64(s->a_lo, _mm512_and_si512(block, low));
  s->a_hi = _mm512_add_epi64(s->a_hi, _mm512_srli_epi64(block, 32));
  s->b_lo = _mm512_add_epi64(s->b_lo, s->a_lo);
  s->b_hi = _mm512_add_epi64(s->b_hi, s->a_hi);
}

}  // namespace cann
#endif
