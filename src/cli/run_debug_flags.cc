// The debugging flags of `cann-train run` (profiling, gradient inspection), kept apart from
// run_command.cc so that file stays about launching and training.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "train/config.h"
#include "train/step_profiler.h"

namespace cann::cli {

void add_run_debug_flags(CLI::App* run, train::TrainConfig* config) {
  const char* kDebug = "Debugging";
  run->add_option("--profile", config->profile,
                  "Chrome trace of a few steps: wait=W,warmup=U,active=A skips W steps, records "
                  "U and discards them, records A (compute, collectives with bytes and "
                  "bandwidth, p2p, checkpoint writes; one file per rank plus a merged one)")
      ->check([](const std::string& v) -> std::string {
        auto s = train::parse_profile_schedule(v);
        return s.ok() ? std::string() : s.status().message();
      })
      ->group(kDebug);
  run->add_option("--profile-dir", config->profile_dir,
                  "Where --profile writes trace-rank<R>.json and the merged trace.json")
      ->group(kDebug)
      ->capture_default_str();
  run->add_flag("--grad-norms", config->grad_norms,
                "Add per-layer gradient norms to the --log-json step log and watch every "
                "gradient for NaN/Inf (the first layer and step where one appears is reported)")
      ->group(kDebug);
  run->add_flag("--halt-on-nan", config->halt_on_nan,
                "Stop at the first non-finite gradient (checked even without --grad-norms), write "
                "a dump of the offending tensors and exit with status 1")
      ->group(kDebug);
  run->add_option("--dump-grads", config->dump_grads,
                  "Write the whole model's gradient of one step (--dump-grads-step) to FILE in "
                  "safetensors format: averaged over the global batch, before clipping, in the "
                  "single-process layout whatever the strategy; compare two with `cann-train "
                  "debug grads FILE --compare REF`")
      ->group(kDebug);
  run->add_option("--dump-grads-step", config->dump_grads_step,
                  "The step whose gradient --dump-grads writes")
      ->check(CLI::PositiveNumber)
      ->group(kDebug)
      ->capture_default_str();
  run->add_option("--link-probe-every", config->link_probe_every,
                  "Every K steps, measure the bandwidth between every pair of ranks (1 MiB "
                  "point-to-point each way); a pair well below the median raises a slow-link "
                  "alert (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->group(kDebug)
      ->capture_default_str();
}

}  // namespace cann::cli
