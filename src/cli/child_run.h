// A `cann-train` child process watched from outside: its output goes to a file, and while it
// runs the peak resident set (VmHWM, /proc/<pid>/status) of each of its worker processes is
// sampled, so a benchmark can set the operating system's view of memory beside the engine's
// own accounting. The workers are the child's own children when it is an agent that launched
// them, else the child itself (`run` trains in-process with one process).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace cann::cli {

struct ChildRun {
  int exit_code = -1;                  // -1: killed at the time limit
  std::string output;                  // stdout and stderr together
  std::vector<double> worker_hwm_mib;  // one per worker seen, largest first
  double wall_s = 0;
};

// Runs this binary with `args` (without argv[0]), output to `output_path`, for at most
// `timeout_s` seconds (then SIGKILL to its process group). VmHWM is sampled every 20 ms:
// the peak is reached in the first step's allocations, long before a worker exits. `agent`:
// the workers are the child's children (the agent's own memory is not a worker's).
StatusOr<ChildRun> run_child(const std::vector<std::string>& args, const std::string& output_path,
                             double timeout_s, bool agent);

}  // namespace cann::cli
