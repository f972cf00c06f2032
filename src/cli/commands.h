// The subcommands of the cann-train binary. Each registers its flags on the CLI11 app and
// returns the function that runs it once parsing succeeded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace CLI {
class App;
}
namespace cann::train {
struct TrainConfig;
}

namespace cann::cli {

using CommandMain = std::function<int()>;

// Prints "<prefix>: <message>" on stderr and returns the status's exit code (2 for bad usage
// or configuration).
int fail_line(const char* prefix, const Status& s);

// `cann-train run`: train a model in one process, or launch and supervise worker processes
// (which re-run the binary with `argv_after_binary`).
CommandMain add_run_command(CLI::App& app, std::vector<std::string> argv_after_binary);

// The debugging flags of `cann-train run`: --profile, --profile-dir, --grad-norms,
// --halt-on-nan.
void add_run_debug_flags(CLI::App* run, train::TrainConfig* config);
// --alert-sensitivity and the alert routes: --alert-webhook(-ca, -format), --alert-email,
// --alert-sendmail (run_alert_flags.cc); checked with monitor::check_alert_routes.
void add_run_alert_flags(CLI::App* run, train::TrainConfig* config);
// --init-from / --export-hf (run_weights_flags.cc), and after parsing the model they imply:
// --init-from's config.json unless --model is given, which must then describe the same model.
void add_run_weights_flags(CLI::App* run, train::TrainConfig* config);
Status resolve_init_model(const CLI::App* run, train::TrainConfig* config);

// `cann-train debug hang|grads|replay`: diagnose a job (replay launches worker processes,
// which re-run the binary with `argv_after_binary`).
CommandMain add_debug_command(CLI::App& app, std::vector<std::string> argv_after_binary);

// `cann-train debug grads` (debug_grads.cc), registered under `debug`.
CommandMain add_debug_grads_command(CLI::App* debug);
// `debug logits`: a model directory's logits on the training windows of some data.
CommandMain add_debug_logits_command(CLI::App* debug);
// `cann-train debug replay` (debug_replay.cc), registered under `debug`.
CommandMain add_debug_replay_command(CLI::App* debug, std::vector<std::string> argv_after_binary);

// `cann-train bench comm ...`: benchmarks that launch their own worker processes.
CommandMain add_bench_command(CLI::App& app, std::vector<std::string> argv_after_binary);

// `cann-train scale`: change the node bounds of a running elastic job (scale_command.cc).
CommandMain add_scale_command(CLI::App& app);

// `cann-train search`: search every parallel strategy for a model on a cluster (src/plan).
CommandMain add_search_command(CLI::App& app);

// `cann-train simulate`: predict one strategy in detail, optionally as a Chrome trace.
CommandMain add_simulate_command(CLI::App& app);

// `cann-train plan diff A B`: compare two plan files (plan_command.cc).
CommandMain add_plan_command(CLI::App& app);

}  // namespace cann::cli
