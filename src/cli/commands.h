// The subcommands of the cann-train binary. Each registers its flags on the CLI11 app and
// returns the function that runs it once parsing succeeded.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace cann::cli {

using CommandMain = std::function<int()>;

// `cann-train run`: train a model (single process for now).
CommandMain add_run_command(CLI::App& app);

}  // namespace cann::cli
