// Flag values written as "key=N,key=N" (`run --profile wait=5,active=3`, `run
// --expert-rebalance every=20`): the items in order, each a key and a whole number.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann {

struct IntItem {
  std::string key;
  long value = 0;
};

// The items of `text`, or InvalidArgument with the reason alone ("'x' is not KEY=N", "'v' is
// not <what>"), for the caller to put its flag and hint around. Keys are not checked here.
StatusOr<std::vector<IntItem>> parse_int_items(const std::string& text,
                                               const std::string& what = "a whole number");

}  // namespace cann
