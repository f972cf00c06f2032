// `cann-train bench plan-vs-real`: how far the planner is from this machine. For each model and
// strategy the planner prices the layout on the calibrated local cluster (bench calibrate, with
// as many processes as the layout has when they outnumber the cores: local_cluster.h), then
// `cann-train run` really trains it as a child process; the median step time after warm-up
// (from the run's --log-json step log) and the memory are set beside the forecast.
//
// Memory is judged twice: on the engine's own accounting (the run's "memory per rank" line:
// flat parameter, gradient and optimizer buffers and the activation arena), and on the
// operating system's peak resident set of the largest and the smallest worker (VmHWM), which
// the forecast predicts as the planner's stage memory plus the runtime's floor that
// calibration measured (the device's runtime_reserve_GB: code, libraries, BLAS, communicators)
// plus the token arrays every worker loads.
#pragma once

#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace cann::cli {

// Adds `plan-vs-real` under `bench`; the returned function runs it when it was parsed.
std::pair<CLI::App*, CommandMain> add_plan_vs_real_command(CLI::App* bench);

}  // namespace cann::cli
