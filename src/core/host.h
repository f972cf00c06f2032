// The name of this machine, as logs, traces, snapshots and beacons show it.
#pragma once

#include <string>

namespace cann {

// gethostname(), read once; "localhost" when it fails.
const std::string& host_name();

}  // namespace cann
