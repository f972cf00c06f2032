// `cann-train run` for recommendation models; see run_recsys.h. The flags a transformer run
// honours but a recommendation run does not are refused by name, so no flag is ever accepted
// and ignored.
#include "cli/run_recsys.h"

#include <cstdio>
#include <set>

#include "core/threads.h"
#include "recsys/rec_trainer.h"

namespace cann::cli {
namespace {

constexpr const char* kRecsys = "Recommendation models (dlrm, two_tower)";

// What a recommendation run reads; every other flag given is an error.
const std::set<std::string> kHonoured = {
    "--model",     "--data",      "--steps",      "--batch-size", "--lr",
    "--seed",      "--threads",   "--eval-every", "--quiet",      "--sparse-optimizer",
    "--sparse-lr", "--eval-rows", "--bad-lines"};
const std::set<std::string> kRecsysOnly = {"--sparse-optimizer", "--sparse-lr", "--eval-rows",
                                           "--bad-lines"};

}  // namespace

void add_recsys_flags(CLI::App* run, RecsysFlags* flags) {
  run->add_option("--sparse-optimizer", flags->sparse_optimizer,
                  "Optimizer of the embedding rows: adagrad (row-wise) or lazy_adam")
      ->check(CLI::IsMember({"adagrad", "lazy_adam"}))
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--sparse-lr", flags->sparse_lr, "Learning rate of the embedding rows")
      ->check(CLI::PositiveNumber)
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--eval-rows", flags->eval_rows,
                  "Held-out impressions per evaluation (AUC and log loss)")
      ->check(CLI::PositiveNumber)
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--bad-lines", flags->bad_lines,
                  "A malformed line of a Criteo TSV file: fatal (stop, naming it) or skip "
                  "(count and report the first)")
      ->check(CLI::IsMember({"fatal", "skip"}))
      ->group(kRecsys)
      ->capture_default_str();
}

std::string refuse_recsys_flags(const CLI::App& run) {
  for (const std::string& name : kRecsysOnly)
    if (run.get_option(name)->count() > 0)
      return name +
             " applies to recommendation models (dlrm, two_tower) only; hint: drop it, "
             "or pass such a model with --model";
  return "";
}

int run_recsys(const CLI::App& run, const train::TrainConfig& config, const RecsysFlags& flags) {
  for (const CLI::Option* opt : run.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() > 0 && name.rfind("--", 0) == 0 && !kHonoured.count(name) &&
        name != "--help") {
      std::fprintf(stderr,
                   "cann-train run: %s does not apply to a recommendation model (%s), which "
                   "trains in one process; hint: drop it\n",
                   name.c_str(), config.model.c_str());
      return 2;
    }
  }
  auto spec = recsys::load_rec_spec(config.model);
  if (!spec.ok()) {
    std::fprintf(stderr, "cann-train run: error: %s\n", spec.status().message().c_str());
    return spec.status().exit_code();
  }
  recsys::RecTrainConfig rc;
  auto given = [&](const char* name) { return run.get_option(name)->count() > 0; };
  if (given("--steps")) rc.steps = config.steps;
  if (given("--batch-size")) rc.batch_size = config.batch_size;
  if (given("--lr")) rc.lr = config.lr;
  if (given("--eval-every")) rc.eval_interval = config.eval_every;
  if (given("--data")) rc.data_path = config.data;
  rc.seed = config.seed;
  rc.quiet = config.quiet;
  rc.eval_rows = flags.eval_rows;
  rc.sparse.lr = flags.sparse_lr;
  rc.sparse.kind = flags.sparse_optimizer == "lazy_adam" ? recsys::SparseOptimizer::kLazyAdam
                                                         : recsys::SparseOptimizer::kRowwiseAdagrad;
  rc.bad_lines =
      flags.bad_lines == "skip" ? recsys::BadLinePolicy::kSkip : recsys::BadLinePolicy::kFatal;
  if (config.threads > 0) set_num_threads(config.threads);
  auto summary = recsys::train_recsys(*spec, rc, stdout);
  if (!summary.ok()) {
    std::fprintf(stderr, "cann-train run: error: %s\n", summary.status().message().c_str());
    return summary.status().exit_code();
  }
  std::printf("done: steps 1..%d, loss %.4f -> %.4f, auc %.4f, log loss %.4f, %.0f samples/s\n",
              summary->steps, summary->first_loss, summary->last_loss, summary->auc,
              summary->log_loss, summary->samples_per_s);
  return 0;
}

}  // namespace cann::cli
