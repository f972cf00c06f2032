// `cann-train debug`: `hang` (which rank is stuck where, from the beacons the workers of a
// running job publish to its store, see debug/hang_analysis.h), `grads` (debug_grads.cc) and
// `replay` (debug_replay.cc) and `logits` (debug_logits.cc).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "comm/store.h"
#include "core/timer.h"
#include "debug/hang_analysis.h"
#include "debug/job_registry.h"

namespace cann::cli {

CommandMain add_debug_command(CLI::App& app, std::vector<std::string> argv_after_binary) {
  CLI::App* debug = app.add_subcommand(
      "debug",
      "Diagnose a job: hang (who is stuck where), grads (gradient health), replay (re-run "
      "a trace's collectives), logits (a model directory's logits on given tokens)");
  debug->require_subcommand(1);
  struct Flags {
    std::string job, store, prefix;
    int world = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* hang = debug->add_subcommand(
      "hang",
      "Name the collective a job is stuck in, the ranks waiting in it and since when, and the "
      "ranks that never entered it");
  hang->add_option("--job", f->job, "Job id (default: the only job running on this machine)");
  hang->add_option("--store", f->store,
                   "The job's store URL, for a job started elsewhere (with --prefix and --world)");
  hang->add_option("--prefix", f->prefix, "The job's key prefix (<job id>/round<r>)");
  hang->add_option("--world", f->world, "The job's world size")->check(CLI::PositiveNumber);

  CommandMain grads_main = add_debug_grads_command(debug);
  CLI::App* grads = debug->get_subcommand("grads");
  CommandMain replay_main = add_debug_replay_command(debug, std::move(argv_after_binary));
  CLI::App* replay = debug->get_subcommand("replay");
  CommandMain logits_main = add_debug_logits_command(debug);
  CLI::App* logits = debug->get_subcommand("logits");
  return [f, grads, grads_main, replay, replay_main, logits, logits_main]() -> int {
    if (grads->parsed()) return grads_main();
    if (logits->parsed()) return logits_main();
    if (replay->parsed()) return replay_main();
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "cann-train debug hang: error: %s\n", s.message().c_str());
      return s.exit_code();
    };
    debug::JobRecord job;
    if (!f->store.empty()) {
      if (f->prefix.empty() || f->world <= 0)
        return fail(InvalidArgument("--store needs --prefix and --world as well"));
      job = {f->prefix, f->store, f->prefix, f->world, 0};
    } else {
      auto found = debug::find_job(f->job);
      if (!found.ok()) return fail(found.status());
      job = *found;
    }
    auto store = comm::open_store(job.store_url);
    if (!store.ok()) return fail(store.status());
    std::vector<std::optional<debug::RankBeacon>> beacons(job.world_size);
    for (int r = 0; r < job.world_size; ++r) {
      auto text = (*store)->try_get("cann/" + job.key_prefix + "/flight/rank" + std::to_string(r));
      if (!text.ok()) return fail(text.status());
      if (!text->has_value()) continue;
      auto b = debug::parse_beacon(**text);
      if (b.ok()) beacons[r] = *b;
    }
    std::printf("job %s, %d ranks:\n", job.key_prefix.c_str(), job.world_size);
    for (const std::string& line : debug::analyze_hang(beacons, unix_seconds()))
      std::printf("  %s\n", line.c_str());
    return 0;
  };
}

}  // namespace cann::cli
