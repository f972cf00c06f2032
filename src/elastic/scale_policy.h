// Time-window policies for `cann-train scale --auto FILE`: which node bounds are in force at a
// given time of day.
//
// The file is YAML (JSON is YAML too): a list of windows, or a map with the list under
// `windows`. Each window is {from: "HH:MM", to: "HH:MM", min_nodes: A, max_nodes: B}; `from` is
// included, `to` excluded, and a window whose `to` is not after its `from` crosses midnight
// ("22:00" to "06:00" holds at 23:30 and at 05:59). Times are the local time of the machine
// running the policy. The first window that holds wins; outside every window the bounds are
// left as they are.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace cann::elastic {

struct ScaleWindow {
  int from_min = 0;  // minutes after midnight
  int to_min = 0;
  int min_nodes = 1;
  int max_nodes = 1;
  std::string text;  // "22:00-06:00", for messages
};

// Errors name the file, the window (1-based) and the field.
StatusOr<std::vector<ScaleWindow>> parse_scale_policy(const std::string& text,
                                                      const std::string& where);
StatusOr<std::vector<ScaleWindow>> load_scale_policy(const std::string& path);

// The index of the window in force at `minute` (0..1439), or nullopt.
std::optional<size_t> window_in_force(const std::vector<ScaleWindow>& policy, int minute);

}  // namespace cann::elastic
