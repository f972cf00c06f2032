// CLI11 validators with messages a user can act on ("must be a positive number, got '-3'"),
// in place of CLI11's range validators whose message prints the full double range.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

namespace cann::cli {

inline CLI::Validator number_at_least(double min, bool strict, const char* what) {
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end == nullptr || *end != '\0')
          return "expected a number, got '" + value + "'";
        if (strict ? !(v > min) : !(v >= min))
          return std::string("must be ") + what + ", got '" + value + "'";
        return {};
      },
      what);
}

inline const CLI::Validator kPositive = number_at_least(0.0, true, "positive");
inline const CLI::Validator kNonNegative = number_at_least(0.0, false, "zero or more");

}  // namespace cann::cli
