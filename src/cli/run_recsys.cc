// `cann-train run` for recommendation models; see run_recsys.h. The flags a transformer run
// honours but a recommendation run does not are refused by name, so no flag is ever accepted
// and ignored.
#include "cli/run_recsys.h"

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "comm/store.h"
#include "core/fs.h"
#include "core/threads.h"
#include "core/timer.h"
#include "plan/engine_support.h"
#include "recsys/ps_client.h"
#include "recsys/ps_server.h"
#include "recsys/rec_checkpoint.h"
#include "recsys/rec_trainer.h"
#include "train/dist_env.h"
#include "train/heartbeat.h"

namespace cann::cli {
namespace {

constexpr const char* kRecsys = "Recommendation models (dlrm, two_tower)";

// What a recommendation run reads; every other flag given is an error.
const std::set<std::string> kHonoured = {"--model",
                                         "--data",
                                         "--steps",
                                         "--batch-size",
                                         "--lr",
                                         "--seed",
                                         "--threads",
                                         "--eval-every",
                                         "--quiet",
                                         "--nproc-per-node",
                                         "--nnodes",
                                         "--rdzv",
                                         "--rdzv-id",
                                         "--rdzv-timeout",
                                         "--comm-addr",
                                         "--comm-timeout",
                                         "--backend",
                                         "--sparse-optimizer",
                                         "--sparse-lr",
                                         "--eval-rows",
                                         "--bad-lines",
                                         "--ps-shards",
                                         "--ps-staleness",
                                         "--ps-admit-after",
                                         "--ps-evict-after",
                                         "--compress",
                                         "--checkpoint-dir",
                                         "--checkpoint-every",
                                         "--resume",
                                         "--onebit-warmup",
                                         "--log-json",
                                         "--elastic",
                                         "--heartbeat-interval",
                                         "--heartbeat-timeout",
                                         "--max-restarts"};
const std::set<std::string> kRecsysOnly = {
    "--sparse-optimizer", "--sparse-lr",    "--eval-rows",      "--bad-lines",
    "--ps-shards",        "--ps-staleness", "--ps-admit-after", "--ps-evict-after"};

constexpr const char* kRecsysFailure = "cann-train run: error";

recsys::SparseOptimizerConfig sparse_config(const RecsysFlags& flags) {
  recsys::SparseOptimizerConfig c;
  c.lr = flags.sparse_lr;
  c.kind = flags.sparse_optimizer == "lazy_adam" ? recsys::SparseOptimizer::kLazyAdam
                                                 : recsys::SparseOptimizer::kRowwiseAdagrad;
  return c;
}

// One process of a multi-process job: its role from its rank (run_recsys.h).
struct Role {
  bool shard = false;
  int index = 0;  // worker w or shard k
  int workers = 1, shards = 0;
  int workers_per_node = 1;
};

StatusOr<Role> role_of(const train::DistEnv& env, int shards) {
  const int nodes = env.world_size / env.local_world_size;
  if (shards % nodes != 0)
    return InvalidArgument("--ps-shards " + std::to_string(shards) + " does not divide over " +
                           std::to_string(nodes) +
                           " nodes; hint: give a multiple of the node count");
  Role r;
  r.shards = shards;
  const int shards_per_node = shards / nodes;
  r.workers_per_node = env.local_world_size - shards_per_node;
  r.workers = r.workers_per_node * nodes;
  const int node = env.rank / env.local_world_size, local = env.rank % env.local_world_size;
  r.shard = local >= r.workers_per_node;
  r.index = r.shard ? node * shards_per_node + (local - r.workers_per_node)
                    : node * r.workers_per_node + local;
  return r;
}

std::string shard_key(const train::DistEnv& env, int k) {
  return "cann/" + env.job_id + "/ps/shard" + std::to_string(k);
}

// Under --elastic every process beats for the agent and follows its generations (a lost shard
// is replaced under the others, which stay).
StatusOr<std::unique_ptr<train::Heartbeat>> start_heartbeat(const train::DistEnv& env, int steps,
                                                            std::function<int()> progress = {}) {
  if (!env.elastic()) return std::unique_ptr<train::Heartbeat>();
  return train::Heartbeat::start(env, steps, true, std::move(progress));
}

// The run's last line (worker 0's).
void print_done(const recsys::RecRunSummary& s, const recsys::PsClient* client) {
  if (s.first_step > s.steps) {
    std::printf("done: nothing to train, already at step %d of --steps %d\n", s.first_step - 1,
                s.steps);
    return;
  }
  const int trained = s.steps - s.first_step + 1;
  std::printf("done: steps %d..%d, loss %.4f -> %.4f, auc %.4f, log loss %.4f, %.0f samples/s",
              s.first_step, s.steps, s.first_loss, s.last_loss, s.auc, s.log_loss, s.samples_per_s);
  if (client)
    std::printf(", %.1f KiB to the shards and %.1f KiB back per step (worker 0)",
                client->bytes_sent() / 1024.0 / trained,
                client->bytes_received() / 1024.0 / trained);
  std::printf("\n");
}

int run_shard(const recsys::RecSpec& spec, const train::TrainConfig& config,
              const RecsysFlags& flags, const train::DistEnv& env, const Role& role,
              const train::CommConfig& comm) {
  const auto timeout = std::chrono::milliseconds(static_cast<long>(comm.timeout_s * 1000));
  recsys::ShardConfig sc;
  sc.shard = role.index;
  sc.shards = role.shards;
  sc.workers = role.workers;
  sc.staleness = flags.ps_staleness;
  sc.admit_after = flags.ps_admit_after;
  sc.evict_after = flags.ps_evict_after;
  sc.seed = config.seed;
  sc.optimizer = sparse_config(flags);
  sc.timeout = timeout;
  sc.checkpoint_dir = config.checkpoint_dir;
  // Under --elastic the tables live in the agent's memory file system, where a replacement of
  // this process finds them (ps_shard.h).
  if (env.elastic())
    sc.state_dir = recsys::shard_checkpoint_dir(env.snapshot_dir, role.index, role.shards);
  auto tables = recsys::ShardTables::open(spec, sc);
  if (!tables.ok()) return fail_line(kRecsysFailure, tables.status());
  // The shard's progress is the steps it has applied.
  recsys::ShardTables* progress = tables->get();
  auto heartbeat = start_heartbeat(
      env, config.steps, [progress] { return static_cast<int>(progress->applied_steps()); });
  if (!heartbeat.ok()) return fail_line(kRecsysFailure, heartbeat.status());
  if ((*tables)->restored_step() >= 0) {
    std::printf(
        "shard %d: restored after step %d from the tables its lost predecessor left in "
        "memory%s\n",
        role.index, (*tables)->restored_step(),
        (*tables)->undid_apply() ? " (the step it was applying undone)" : "");
    std::fflush(stdout);
  } else if (config.resume && !config.checkpoint_dir.empty()) {
    auto step = recsys::committed_step(config.checkpoint_dir);
    if (!step.ok()) return fail_line(kRecsysFailure, step.status());
    if (*step > 0)
      if (Status s = (*tables)->load(config.checkpoint_dir, *step); !s.ok())
        return fail_line(kRecsysFailure, s);
  }
  const std::string host = env.comm_addr.empty() ? "127.0.0.1" : env.comm_addr;
  auto server = recsys::PsServer::start(tables->get(), sc, host);
  if (!server.ok()) return fail_line(kRecsysFailure, server.status());
  auto store = comm::open_store(env.store_url, timeout);
  if (!store.ok()) return fail_line(kRecsysFailure, store.status());
  // The generation tells a replacement's address from its lost predecessor's.
  const std::string address = host + ":" + std::to_string((*server)->port()) + "#" +
                              std::to_string(std::max(env.generation, 0));
  if (Status s = (*store)->set(shard_key(env, role.index), address); !s.ok())
    return fail_line(kRecsysFailure, s);

  // The workers build their model and connect within the rendezvous time.
  if (Status s = (*server)->serve(std::max(timeout, std::chrono::milliseconds(120000))); !s.ok())
    return fail_line(kRecsysFailure, s);
  return 0;
}

int run_worker(const recsys::RecSpec& spec, const recsys::RecTrainConfig& rc,
               const RecsysFlags& flags, const recsys::RecWorkerContext& compression,
               const train::DistEnv& env, const Role& role, const train::CommConfig& comm) {
  const auto timeout = std::chrono::milliseconds(static_cast<long>(comm.timeout_s * 1000));
  auto heartbeat = start_heartbeat(env, rc.steps);
  if (!heartbeat.ok()) return fail_line(kRecsysFailure, heartbeat.status());
  recsys::RecWorkerContext context;
  if (*heartbeat) {
    train::Heartbeat* h = heartbeat->get();
    context.on_step = [h](int step) { h->set_step(step); };
  }
  context.worker = role.index;
  context.workers = role.workers;
  context.compression = compression.compression;
  context.topk_ratio = compression.topk_ratio;
  context.onebit_warmup = compression.onebit_warmup;
  std::unique_ptr<comm::Group> dense;
  if (role.workers > 1) {
    // The workers alone, ranked among themselves, as one data-parallel group.
    train::DistEnv workers = env;
    workers.rank = role.index;
    workers.world_size = role.workers;
    workers.local_rank = role.index % role.workers_per_node;
    workers.local_world_size = role.workers_per_node;
    auto group = train::make_world_group(workers, comm);
    if (!group.ok()) return fail_line(kRecsysFailure, group.status());
    dense = std::move(*group);
    // Timeouts nest: a worker waiting on a stopped shard gives up after --comm-timeout and
    // names the shard; its peers, waiting on that worker in the dense all-reduce, wait twice
    // as long, so that the shard, not the worker stuck on it, is named as the cause.
    if (role.shards > 0) dense->set_default_timeout(2 * timeout);
    context.dense_group = dense.get();
  }
  std::unique_ptr<recsys::PsClient> client;
  if (role.shards > 0) {
    auto store = comm::open_store(env.store_url, timeout);
    if (!store.ok()) return fail_line(kRecsysFailure, store.status());
    std::vector<std::string> addresses;
    for (int k = 0; k < role.shards; ++k) {
      auto a = (*store)->get(shard_key(env, k), std::chrono::milliseconds(120000));
      if (!a.ok()) return fail_line(kRecsysFailure, a.status());
      addresses.push_back(*a);
    }
    auto c =
        recsys::PsClient::connect(spec, role.index, addresses, timeout, flags.ps_staleness >= 0);
    if (!c.ok()) return fail_line(kRecsysFailure, c.status());
    client = std::move(*c);
    context.store = client.get();
    if (env.elastic()) {
      // A lost shard's replacement publishes its address under the same key.
      std::shared_ptr<comm::Store> shared = std::move(*store);
      const bool lead = role.index == 0;
      client->set_relocate(
          [shared, env, lead](int s, const std::string& failed) -> StatusOr<std::string> {
            const double start = now_seconds(), limit = 120.0;
            while (now_seconds() - start < limit) {
              auto v = shared->try_get(shard_key(env, s));
              if (v.ok() && v->has_value() && **v != failed) {
                if (lead) {
                  std::printf(
                      "parameter-server shard %d was lost; its replacement answers at %s, "
                      "%.2f s later\n",
                      s, (*v)->substr(0, (*v)->find('#')).c_str(), now_seconds() - start);
                  std::fflush(stdout);
                }
                return **v;
              }
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            return FailedPrecondition("parameter-server shard " + std::to_string(s) +
                                      " was lost and no replacement came within 120 s; hint: see "
                                      "the agent's log for why it was not restarted");
          });
    }
  }
  auto summary = recsys::train_recsys(spec, rc, stdout, context);
  if (!summary.ok()) return fail_line(kRecsysFailure, summary.status());
  if (client)
    if (Status s = client->finish(); !s.ok()) return fail_line(kRecsysFailure, s);
  if (role.index == 0) print_done(*summary, client.get());
  return 0;
}

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
  run->add_option("--ps-shards", flags->ps_shards,
                  "Parameter-server shards holding the embedding tables (processes started "
                  "beside the --nproc-per-node workers, an equal share on every node)")
      ->check(CLI::Range(0, 4096))
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--ps-staleness", flags->ps_staleness,
                  "-1: synchronous (a step's row gradients summed over the workers, then "
                  "applied); S >= 0: applied on arrival, no worker more than S steps ahead")
      ->check(CLI::Range(-1, 1000000))
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--ps-admit-after", flags->ps_admit_after,
                  "A row is admitted (trained) once it was pulled in this many steps; before "
                  "that it reads as zeros")
      ->check(CLI::Range(1, 65535))
      ->group(kRecsys)
      ->capture_default_str();
  run->add_option("--ps-evict-after", flags->ps_evict_after,
                  "Evict a row untouched for this many steps (it restarts from its initial "
                  "value when it returns); 0: never")
      ->check(CLI::Range(0, 1 << 30))
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

int run_recsys(const CLI::App& run, const train::TrainConfig& config, const RecsysFlags& flags,
               elastic::AgentConfig agent, const train::CommConfig& comm) {
  for (const CLI::Option* opt : run.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() > 0 && name.rfind("--", 0) == 0 && !kHonoured.count(name) &&
        name != "--help") {
      std::fprintf(stderr,
                   "cann-train run: %s does not apply to a recommendation model (%s); hint: "
                   "drop it\n",
                   name.c_str(), config.model.c_str());
      return 2;
    }
  }
  auto spec = recsys::load_rec_spec(config.model);
  if (!spec.ok()) return fail_line(kRecsysFailure, spec.status());
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
  rc.sparse = sparse_config(flags);
  rc.bad_lines =
      flags.bad_lines == "skip" ? recsys::BadLinePolicy::kSkip : recsys::BadLinePolicy::kFatal;
  rc.admit_after = flags.ps_admit_after;
  rc.evict_after = flags.ps_evict_after;
  rc.checkpoint_dir = config.checkpoint_dir;
  rc.log_json = config.log_json;
  rc.checkpoint_every = given("--checkpoint-every") ? config.checkpoint_every : 0;
  rc.resume = config.resume;
  if (rc.resume && rc.checkpoint_dir.empty())
    return fail_line(
        kRecsysFailure,
        InvalidArgument("--resume needs --checkpoint-dir; hint: name the directory the "
                        "run wrote its checkpoints to"));
  if (!rc.checkpoint_dir.empty() && flags.ps_staleness >= 0)
    return fail_line(
        kRecsysFailure,
        InvalidArgument(
            "--checkpoint-dir with --ps-staleness " + std::to_string(flags.ps_staleness) +
            ": a checkpoint is the state after one step of every worker, which only synchronous "
            "shards have; hint: drop --ps-staleness, or the checkpoints"));
  if (config.threads > 0) set_num_threads(config.threads);
  recsys::RecWorkerContext compression;  // the dense gradients' wire format only
  if (given("--compress")) {
    auto c = plan::parse_compression(run.get_option("--compress")->as<std::string>());
    if (!c.ok()) return fail_line(kRecsysFailure, c.status());
    using Kind = plan::Compression::Kind;
    using Dense = recsys::RecWorkerContext::DenseCompression;
    compression.compression = c->kind == Kind::kBf16     ? Dense::kBf16
                              : c->kind == Kind::kOneBit ? Dense::kOneBit
                              : c->kind == Kind::kTopK   ? Dense::kTopK
                                                         : Dense::kNone;
    compression.topk_ratio = c->topk_ratio;
    if (c->two_stage() && !config.checkpoint_dir.empty())
      return fail_line(
          kRecsysFailure,
          InvalidArgument(
              "--compress " + plan::compression_name(*c) +
              " with --checkpoint-dir: a recommendation run's checkpoints hold Adam's state, not "
              "the "
              "compressed stage's error feedback; hint: use --compress bf16 or none, or drop the "
              "checkpoints"));
  }
  compression.onebit_warmup = config.onebit_warmup;

  auto env = train::detect_dist_env();
  if (!env.ok()) return fail_line(kRecsysFailure, env.status());
  const int workers = agent.nproc_per_node * agent.nnodes;
  if (!env->has_value()) {
    if (workers > 1 && flags.ps_shards == 0)
      return fail_line(kRecsysFailure,
                       InvalidArgument("--nproc-per-node " + std::to_string(agent.nproc_per_node) +
                                       ": several workers of a recommendation model share its "
                                       "tables through parameter-server "
                                       "shards; hint: add --ps-shards N"));
    if (flags.ps_shards % agent.nnodes != 0)
      return fail_line(kRecsysFailure,
                       InvalidArgument("--ps-shards " + std::to_string(flags.ps_shards) +
                                       " does not divide over " + std::to_string(agent.nnodes) +
                                       " nodes; hint: give a multiple of the node count"));
    if (rc.batch_size % workers != 0)
      return fail_line(
          kRecsysFailure,
          InvalidArgument("--batch-size " + std::to_string(rc.batch_size) +
                          " does not split over " + std::to_string(workers) +
                          " workers; hint: give a multiple of " + std::to_string(workers)));
    if (agent.elastic && flags.ps_shards == 0)
      return fail_line(
          kRecsysFailure,
          InvalidArgument(
              "--elastic replaces lost parameter-server shards, and this run has none; hint: add "
              "--ps-shards N, or drop --elastic"));
    if (flags.ps_shards == 0) {
      auto summary = recsys::train_recsys(*spec, rc, stdout);
      if (!summary.ok()) return fail_line(kRecsysFailure, summary.status());
      print_done(*summary, nullptr);
      return 0;
    }
    // This process is the agent: workers and shards on every node.
    const int workers_per_node = agent.nproc_per_node;
    agent.nproc_per_node += flags.ps_shards / agent.nnodes;
    const int per_node = agent.nproc_per_node;
    // Under --elastic a lost shard is replaced over its tables; a worker is not (the dense
    // group and the step it was in would have to be rebuilt around it).
    agent.restores_from = "the tables the lost shard left in memory";
    agent.irreplaceable = [workers_per_node, per_node](int rank) -> std::string {
      if (rank >= 0 && rank % per_node >= workers_per_node) return "";
      return (rank >= 0 ? "rank " + std::to_string(rank) + " is a worker: " : std::string()) +
             "a recommendation run under --elastic replaces lost parameter-server shards, not "
             "workers; hint: resume from --checkpoint-dir";
    };
    auto code = elastic::run_agent(agent);
    if (!code.ok()) return fail_line(kRecsysFailure, code.status());
    return *code;
  }
  auto role = role_of(**env, flags.ps_shards);
  if (!role.ok()) return fail_line(kRecsysFailure, role.status());
  if (role->workers < 1)
    return fail_line(kRecsysFailure,
                     InvalidArgument("--ps-shards leaves no worker on a node; hint: raise "
                                     "--nproc-per-node"));
  if (role->shard) return run_shard(*spec, config, flags, **env, *role, comm);
  return run_worker(*spec, rc, flags, compression, **env, *role, comm);
}

}  // namespace cann::cli
