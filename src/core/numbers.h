// Numbers written as text: for people (thousands separated by commas) and for files (64-bit
// values as fixed-width hex, which JSON numbers cannot carry exactly above 2^53).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cann {

// 8030261248 -> "8,030,261,248"; -1234 -> "-1,234".
inline std::string with_commas(long long v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// 0x1f -> "000000000000001f": 16 lowercase hex digits.
inline std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace cann
