// CRC-32C, reflected polynomial 0x82F63B78. Checked against the RFC 3720 test vectors and a
// bitwise reference in tests/crc32c_test.cc.
#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cann {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t crc32c_table(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of three cycles and a throughput of one, so one stream
// runs at a third of its speed. Long buffers go as three interleaved streams over consecutive
// blocks of kBlock bytes, joined with the register's linearity: for a raw register r and a
// message M of L bytes, R(r, M) = Z(r) ^ R(0, M), where Z is the register after L zero bytes,
// a linear map given by its image of each of the 32 bits.
constexpr size_t kBlock = 4096;

struct ZeroShift {
  uint32_t column[32];
  uint32_t apply(uint32_t r) const {
    uint32_t out = 0;
    for (int j = 0; j < 32; ++j) out ^= column[j] & (0u - ((r >> j) & 1u));
    return out;
  }
};

__attribute__((target("sse4.2"))) ZeroShift make_block_shift() {
  ZeroShift z{};
  for (int j = 0; j < 32; ++j) {
    uint64_t c = uint64_t{1} << j;
    for (size_t i = 0; i < kBlock / 8; ++i) c = _mm_crc32_u64(c, 0);
    z.column[j] = static_cast<uint32_t>(c);
  }
  return z;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  if (n >= 3 * kBlock) {
    static const ZeroShift shift = make_block_shift();
    while (n >= 3 * kBlock) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kBlock; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + kBlock + i, 8);
        std::memcpy(&vd, p + 2 * kBlock + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      const uint32_t ab = shift.apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
      c = shift.apply(ab) ^ static_cast<uint32_t>(d);
      p += 3 * kBlock;
      n -= 3 * kBlock;
    }
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  crc = has_sse42 ? crc32c_hw(crc, p, size) : crc32c_table(crc, p, size);
#else
  crc = crc32c_table(crc, p, size);
#endif
  return ~crc;
}

}  // namespace cann
