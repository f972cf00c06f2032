// This machine: its name, as logs, traces, snapshots and beacons show it, and the description
// a benchmark prints beside its figures.
#pragma once

#include <string>

namespace cann {

// gethostname(), read once; "localhost" when it fails.
const std::string& host_name();

// One line: processor model with its family and model numbers, the cores this process may run
// on, memory, kernel release, and the commit of the checkout the binary was built in when there
// is one ("AMD EPYC 9B45 (family 26 model 2), 2 cores, 24 GiB, Linux 6.1.0, commit 0d73799").
// The same line as bench/benchlib.py's machine().
std::string machine_description();

}  // namespace cann
