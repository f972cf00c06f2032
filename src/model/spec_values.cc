// Typed reads of config values (see spec_values.h). yaml-cpp reads JSON too: JSON is a subset
// of YAML 1.2 for these files, so `true`, `null`, numbers and lists read alike.
#include "model/spec_values.h"

#include <yaml-cpp/yaml.h>

#include "model/spec_keys.h"

namespace cann::model::spec_keys {

std::string value_text(const YAML::Node& v) {
  if (v.IsScalar()) return v.Scalar();
  if (v.IsSequence()) return "<list>";
  if (v.IsMap()) return "<mapping>";
  return "<null>";
}

StatusOr<long long> read_integer(const YAML::Node& v, const KeyRef& k) {
  if (v.IsScalar()) {
    try {
      return v.as<long long>();
    } catch (const YAML::Exception&) {
      // 4096.0 is an integer written as a float (some exporters do this).
      try {
        const double d = v.as<double>();
        if (d == static_cast<double>(static_cast<long long>(d))) return static_cast<long long>(d);
      } catch (const YAML::Exception&) {
      }
    }
  }
  return spec_error(k.source, k.key, "expected an integer, got '" + value_text(v) + "'");
}

StatusOr<int> read_int_in(const YAML::Node& v, const KeyRef& k, long long lo, long long hi) {
  CANN_ASSIGN_OR_RETURN(long long n, read_integer(v, k));
  if (n < lo || n > hi)
    return spec_error(k.source, k.key,
                      "value " + std::to_string(n) + " is out of range [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
  return static_cast<int>(n);
}

StatusOr<double> read_number(const YAML::Node& v, const KeyRef& k) {
  if (v.IsScalar()) {
    try {
      return v.as<double>();
    } catch (const YAML::Exception&) {
    }
  }
  return spec_error(k.source, k.key, "expected a number, got '" + value_text(v) + "'");
}

StatusOr<bool> read_bool(const YAML::Node& v, const KeyRef& k) {
  if (v.IsScalar()) {
    try {
      return v.as<bool>();
    } catch (const YAML::Exception&) {
    }
  }
  return spec_error(k.source, k.key, "expected true or false, got '" + value_text(v) + "'");
}

StatusOr<std::string> read_string(const YAML::Node& v, const KeyRef& k) {
  if (v.IsScalar()) return v.Scalar();
  return spec_error(k.source, k.key, "expected a string, got " + value_text(v));
}

StatusOr<std::vector<int>> read_int_list(const YAML::Node& v, const KeyRef& k) {
  if (!v.IsSequence())
    return spec_error(k.source, k.key, "expected a list of integers, got '" + value_text(v) + "'");
  std::vector<int> out;
  for (const auto& item : v) {
    CANN_ASSIGN_OR_RETURN(int n, read_int_in(item, k, 0, (1LL << 31) - 1));
    out.push_back(n);
  }
  return out;
}

StatusOr<std::vector<std::string>> read_string_list(const YAML::Node& v, const KeyRef& k) {
  if (!v.IsSequence())
    return spec_error(k.source, k.key, "expected a list of strings, got '" + value_text(v) + "'");
  std::vector<std::string> out;
  for (const auto& item : v) {
    CANN_ASSIGN_OR_RETURN(std::string s, read_string(item, k));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace cann::model::spec_keys
