// A 64-bit checksum that a copy computes on the way: for the in-memory snapshots, whose copy is
// bound by memory bandwidth, the sums ride along at no measurable cost where a CRC-32C after
// the copy would add most of the copy's time again.
//
// Definition (the scalar and vector paths agree bit for bit): the bytes, zero-padded to a
// multiple of 64, are blocks of sixteen little-endian 32-bit words w_0..w_15. Per lane j, over
// the blocks in order, a_j += w_j and then b_j += a_j (mod 2^64): a_j sums the lane, b_j weighs
// each word by how many blocks follow it (Fletcher's second sum). The result mixes the byte
// count and the 32 sums through multiply-xorshift rounds. Any single changed word, and any
// change to the length, changes it; a word moved to another block or lane almost surely does.
// It guards against damage, not against an adversary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cann {

// The checksum of n bytes at src, copied to dst on the way (dst == nullptr: no copy).
uint64_t copy_word_sum(void* dst, const void* src, size_t n);

inline uint64_t word_sum(const void* data, size_t n) {
  return copy_word_sum(nullptr, data, n);
}

// The same checksum gathered piece by piece, for data written in parts (an optimizer that
// writes its output straight into a snapshot sums each part while it is in cache). Every piece
// but the last is a multiple of 64 bytes long; pieces summed apart, in any order, are joined
// left to right.
struct WordSumParts {
  uint64_t a[16] = {};
  uint64_t b[16] = {};
  uint64_t bytes = 0;
};

// Adds the next n bytes at data (after those already in `s`).
void word_sum_add(WordSumParts* s, const void* data, size_t n);
// The sums of `left` followed by `right` (left.bytes a multiple of 64).
WordSumParts word_sum_join(const WordSumParts& left, const WordSumParts& right);
// The checksum of everything added: word_sum() of the whole.
uint64_t word_sum_finish(const WordSumParts& s);

}  // namespace cann
