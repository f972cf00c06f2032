// Typed reads of one config value for the spec reader, each failing with one line that names
// the file and the key. Internal to src/model/spec*.cc.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace YAML {
class Node;
}

namespace cann::model::spec_keys {

// The key being read: its name as written in the file, and the file.
struct KeyRef {
  const std::string& key;
  const std::string& source;
};

StatusOr<long long> read_integer(const YAML::Node& v, const KeyRef& k);
// An int in [lo, hi].
StatusOr<int> read_int_in(const YAML::Node& v, const KeyRef& k, long long lo, long long hi);
StatusOr<double> read_number(const YAML::Node& v, const KeyRef& k);
StatusOr<bool> read_bool(const YAML::Node& v, const KeyRef& k);
StatusOr<std::string> read_string(const YAML::Node& v, const KeyRef& k);
StatusOr<std::vector<int>> read_int_list(const YAML::Node& v, const KeyRef& k);
StatusOr<std::vector<std::string>> read_string_list(const YAML::Node& v, const KeyRef& k);
// The scalar as written, or "<list>" / "<mapping>", for messages.
std::string value_text(const YAML::Node& v);

}  // namespace cann::model::spec_keys
