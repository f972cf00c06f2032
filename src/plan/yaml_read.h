// Reading the YAML files users write and keep (plan files, comm.yaml) with one-line errors.
// Include from .cc files only: it brings yaml-cpp, which its users link privately.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

#include "core/fs.h"
#include "core/status.h"

namespace cann::plan {

// Makes the one-line error for a problem `what` in the file (it names the file and a hint).
using YamlError = std::function<Status(const std::string& what)>;

// `path` read and parsed, a map of keys at the top. `kind` names the file when it cannot be
// read ("plan file").
inline StatusOr<YAML::Node> load_yaml_map(const std::string& path, const std::string& kind,
                                          const YamlError& bad) {
  StatusOr<std::string> text = read_file(path);
  if (!text.ok())
    return InvalidArgument("cannot read " + kind + " " + path + ": " + text.status().message());
  YAML::Node n;
  try {
    n = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return bad("not YAML (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
  }
  if (!n.IsMap()) return bad("expected a map of keys");
  return n;
}

// Key `k` of map `n` as T; `where` is the map's own key path ("" at the top), for the message.
template <typename T>
StatusOr<T> yaml_get(const YAML::Node& n, const std::string& k, const std::string& where,
                     const YamlError& bad) {
  const std::string name = where.empty() ? k : where + "." + k;
  if (!n[k]) return bad("missing key '" + name + "'");
  try {
    return n[k].as<T>();
  } catch (const YAML::Exception&) {
    return bad("key '" + name + "' has a value of the wrong kind ('" + YAML::Dump(n[k]) + "')");
  }
}

}  // namespace cann::plan
