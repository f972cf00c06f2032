// CRC-32C against the RFC 3720 vectors and a bit-at-a-time reference, over lengths and
// alignments that reach every path of the implementation (bytes, words, the three interleaved
// streams of long buffers and their joins) and over extensions split at arbitrary points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/word_sum.h"

namespace cann {
namespace {

// The definition: reflected polynomial 0x82F63B78, register inverted before and after.
uint32_t reference(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

uint32_t of(const std::string& s) {
  return crc32c(s.data(), s.size());
}

TEST(Crc32cTest, MatchesRfc3720Vectors) {
  // RFC 3720, appendix B.4.
  EXPECT_EQ(of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(of(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(of(ascending), 0x46DD794Eu);
  EXPECT_EQ(of(descending), 0x113FDB5Cu);
  EXPECT_EQ(of("123456789"), 0xE3069283u);
}

TEST(Crc32cTest, LongBuffersMatchTheBitwiseDefinition) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(200000 + 64);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  // Around the three-block threshold (3 x 4096), several rounds, odd tails, odd alignments.
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{12287}, size_t{12288}, size_t{12289},
        size_t{12295}, size_t{24576}, size_t{40000}, size_t{123457}, size_t{200000}}) {
    for (size_t offset : {size_t{0}, size_t{3}, size_t{61}}) {
      const uint8_t* p = data.data() + offset;
      EXPECT_EQ(crc32c(p, n), reference(0, p, n)) << n << " bytes at offset " << offset;
    }
  }
}

TEST(Crc32cTest, ExtendingInPiecesEqualsOneCall) {
  std::mt19937 rng(11);
  std::vector<uint8_t> data(100003);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = reference(0, data.data(), data.size());
  for (size_t cut : {size_t{1}, size_t{4095}, size_t{12288}, size_t{50001}, size_t{99999}}) {
    const uint32_t first = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c_extend(first, data.data() + cut, data.size() - cut), whole) << cut;
  }
  // A non-zero starting value goes through the interleaved path's first stream.
  EXPECT_EQ(crc32c_extend(0xDEADBEEFu, data.data(), 40000),
            reference(0xDEADBEEFu, data.data(), 40000));
}

}  // namespace
}  // namespace cann

namespace cann {
namespace {

// The word sum's definition (core/word_sum.h) written out word by word.
uint64_t mix_ref(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint64_t word_sum_reference(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> padded(bytes);
  padded.resize((bytes.size() + 63) / 64 * 64, 0);
  uint64_t a[16] = {}, b[16] = {};
  for (size_t block = 0; block < padded.size(); block += 64) {
    for (int j = 0; j < 16; ++j) {
      uint32_t w = 0;
      for (int k = 0; k < 4; ++k) w |= static_cast<uint32_t>(padded[block + 4 * j + k]) << (8 * k);
      a[j] += w;
      b[j] += a[j];
    }
  }
  uint64_t h = mix_ref(static_cast<uint64_t>(bytes.size()) ^ 0x9e3779b97f4a7c15ULL);
  for (int j = 0; j < 16; ++j) {
    h = mix_ref(h ^ a[j]);
    h = mix_ref(h ^ b[j]);
  }
  return h;
}

// Every length around the 64-byte blocks and some long ones, at odd alignments: the vector
// path, the scalar tail and the copy agree with the definition.
TEST(WordSumTest, MatchesTheDefinitionAndCopiesExactly) {
  std::mt19937 rng(5);
  for (size_t n : {0, 1, 3, 4, 63, 64, 65, 127, 128, 1000, 4096, 65537}) {
    for (size_t offset : {0, 1, 7}) {
      std::vector<uint8_t> buf(n + offset);
      for (auto& c : buf) c = static_cast<uint8_t>(rng());
      const std::vector<uint8_t> bytes(buf.begin() + offset, buf.end());
      const uint64_t want = word_sum_reference(bytes);
      EXPECT_EQ(word_sum(buf.data() + offset, n), want) << n << " bytes at offset " << offset;
      std::vector<uint8_t> copy(n + 3, 0xee);
      EXPECT_EQ(copy_word_sum(copy.data() + 3, buf.data() + offset, n), want) << n;
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), copy.begin() + 3)) << n;
    }
  }
}

// Summed in pieces (added in order, or summed apart and joined left to right), the sum is the
// one of the whole, whatever the cut points on 64-byte boundaries and the last piece's length.
TEST(WordSumTest, PiecesAddedOrJoinedEqualTheWhole) {
  std::mt19937 rng(11);
  for (size_t n : {0, 64, 100, 4096, 65537}) {
    std::vector<uint8_t> data(n);
    for (auto& c : data) c = static_cast<uint8_t>(rng());
    const uint64_t want = word_sum(data.data(), n);
    for (size_t cut : {size_t{0}, size_t{64}, size_t{640}, n / 64 * 64}) {
      if (cut > n) continue;
      WordSumParts added;
      word_sum_add(&added, data.data(), cut);
      word_sum_add(&added, data.data() + cut, n - cut);
      EXPECT_EQ(word_sum_finish(added), want) << n << " cut at " << cut;
      WordSumParts left, right;
      word_sum_add(&right, data.data() + cut, n - cut);  // the right part first
      word_sum_add(&left, data.data(), cut);
      EXPECT_EQ(word_sum_finish(word_sum_join(left, right)), want) << n << " cut at " << cut;
    }
  }
}

// Any one changed byte, two words swapped between blocks, or one byte more changes the sum.
TEST(WordSumTest, SeesOneChangedByteAMovedWordAndTheLength) {
  std::vector<uint8_t> data(4096);
  std::mt19937 rng(9);
  for (auto& c : data) c = static_cast<uint8_t>(rng());
  const uint64_t base = word_sum(data.data(), data.size());
  for (size_t i = 0; i < data.size(); i += 37) {
    for (uint8_t flip : {0x01, 0x80}) {
      data[i] ^= flip;
      EXPECT_NE(word_sum(data.data(), data.size()), base) << "byte " << i;
      data[i] ^= flip;
    }
  }
  std::swap_ranges(data.begin(), data.begin() + 4, data.begin() + 640);
  EXPECT_NE(word_sum(data.data(), data.size()), base);
  std::swap_ranges(data.begin(), data.begin() + 4, data.begin() + 640);
  data.push_back(0);
  EXPECT_NE(word_sum(data.data(), data.size()), base);
}

}  // namespace
}  // namespace cann
