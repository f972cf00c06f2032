// Numbers written for people: thousands separated by commas.
#pragma once

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

}  // namespace cann
