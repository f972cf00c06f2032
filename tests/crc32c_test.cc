// CRC-32C against the RFC 3720 vectors and a bit-at-a-time reference, over lengths and
// alignments that reach every path of the implementation (bytes, words, the three interleaved
// streams of long buffers and their joins) and over extensions split at arbitrary points.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"

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

uint32_t of(const std::string& s) { return crc32c(s.data(), s.size()); }

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
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{12287}, size_t{12288},
                   size_t{12289}, size_t{12295}, size_t{24576}, size_t{40000}, size_t{123457},
                   size_t{200000}}) {
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
