// The tune benchmark's worker: measure every setting, choose, time the bucket sizes, write.
#include "cli/bench_tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>

#include "cli/bench_comm.h"
#include "comm/group.h"
#include "core/machine_load.h"
#include "core/timer.h"
#include "plan/buckets.h"
#include "train/comm_config.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace cann::cli {
namespace {

using comm::AllreduceAlgorithm;

// The collectives measured: the all-reduce under each algorithm, the others (which have one)
// once per backend and channel count.
const char* const kCollectives[] = {"allreduce", "reduce_scatter", "allgather", "alltoall"};

// One measured setting: a backend, for gloo-based ones its channel count and algorithm (every
// message split over the channels).
struct Setting {
  std::string backend;
  int channels = 1;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kRing;
  bool every_collective = false;                       // else the all-reduce only
  std::map<std::string, std::vector<double>> seconds;  // by collective, per size

  bool gloo_based() const { return backend != "shm"; }
  // The all-reduce's columns name the algorithm; the other collectives have one.
  std::string label(bool allreduce) const {
    if (!gloo_based()) return backend;
    return backend + " " + std::to_string(channels) + "ch" +
           (allreduce ? std::string(" ") + comm::allreduce_algorithm_name(algorithm) : "");
  }
};

// What the engine can do with one backend and channel count, from the settings measured.
struct Choice {
  std::string backend;
  int channels = 1;
  size_t split_bytes = size_t{4} << 20;
  std::vector<comm::AllreduceRule> rules;
  std::map<std::string, std::vector<double>> seconds;  // by collective, per size: the best
  double score = 0;  // mean of seconds / fastest measured, over the collectives and sizes

  std::string label() const {
    if (backend == "shm") return "shm";
    std::string s = backend + " " + std::to_string(channels) + "ch";
    for (size_t i = 0; i < rules.size(); ++i) {
      s += std::string(i ? "/" : " ") + comm::allreduce_algorithm_name(rules[i].algorithm);
    }
    return s;
  }
};

// How much faster the other all-reduce algorithm must be at a size to take it over.
constexpr double kSwitchGain = 0.05;
// Bucket sizes whose first trial is slower than the fastest first trial by more than this are
// not timed a second time: a size must beat the engine's rule by more than the difference
// between its own two rounds, which for the sizes that can win stays within a few percent.
constexpr double kRepeatWithin = 0.10;

std::vector<size_t> size_list(const TuneConfig& c) {
  std::vector<size_t> sizes;
  for (size_t b = c.min_bytes; b <= c.max_bytes; b *= static_cast<size_t>(c.factor)) {
    sizes.push_back(b);
    if (b > c.max_bytes / static_cast<size_t>(c.factor)) break;
  }
  return sizes;
}

train::CommConfig comm_for(const TuneConfig& c, const std::string& backend, int channels,
                           size_t split_bytes, std::vector<comm::AllreduceRule> rules) {
  train::CommConfig cc;
  cc.backend = backend;
  cc.timeout_s = c.timeout_s;
  cc.transport = c.transport;
  cc.channels = channels;
  cc.split_bytes = split_bytes;
  cc.allreduce_rules = std::move(rules);
  return cc;
}

// Validates and times fp32 collective `op` at every size over `g` (the size is the whole
// buffer, as bench comm counts it: the all-gather's output, the reduce-scatter's input).
StatusOr<std::vector<double>> time_sizes(comm::Group& g, const std::string& op,
                                         const std::vector<size_t>& sizes, const TuneConfig& c) {
  const comm::Options opts{std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000)),
                           "tune"};
  std::vector<float> in, out;
  std::vector<double> seconds;
  for (size_t bytes : sizes) {
    const size_t count = per_rank_count(op, bytes, g.size());
    const size_t buffer = op == "allreduce" ? count : count * static_cast<size_t>(g.size());
    in.assign(buffer, 0.0f);
    out.assign(buffer, 0.0f);
    CANN_RETURN_IF_ERROR(validate_collective(g, op, count, in, out, opts));
    CANN_ASSIGN_OR_RETURN(
        double t,
        time_collective(
            g, [&] { return run_collective(g, op, count, in, out, opts); }, c.seconds_per_size));
    seconds.push_back(t);
  }
  return seconds;
}

train::LinkFigures link_of(const std::vector<double>& seconds, const std::vector<size_t>& sizes,
                           int P) {
  train::LinkFigures l;
  // One step of a ring (2(P-1) of them in an all-reduce), as bench calibrate counts latency.
  l.latency_us = seconds.front() * 1e6 / (2.0 * (P - 1));
  l.bandwidth_GBps = static_cast<double>(sizes.back()) / seconds.back() * 2.0 * (P - 1) / P / 1e9;
  return l;
}

// The best of `backend` with `channels` channels at every size; nullopt when splitting over
// them never wins (the one-channel choice is the same setting). `fastest`: by collective, per
// size, the fastest time any setting measured.
std::optional<Choice> choose(const std::vector<Setting>& settings, const std::string& backend,
                             int channels, const std::vector<size_t>& sizes,
                             const std::map<std::string, std::vector<double>>& fastest) {
  // The all-reduce under algorithm `a`, or (a == nullopt) collective `op` under any.
  auto find = [&](int ch, const std::string& op,
                  std::optional<AllreduceAlgorithm> a) -> const std::vector<double>* {
    for (const Setting& s : settings) {
      if (s.backend != backend || (s.gloo_based() && s.channels != ch)) continue;
      if (a && s.gloo_based() && s.algorithm != *a) continue;
      if (auto it = s.seconds.find(op); it != s.seconds.end()) return &it->second;
    }
    return nullptr;
  };
  const size_t n = sizes.size();
  Choice c;
  c.backend = backend;
  c.channels = channels;
  // Per size: the all-reduce's faster algorithm, unsplit (one channel) and split over
  // `channels`.
  std::vector<double> unsplit(n), split(n);
  std::vector<AllreduceAlgorithm> unsplit_alg(n), split_alg(n);
  for (size_t i = 0; i < n; ++i) {
    // The algorithm of the size below (ring at the smallest) unless the other is faster by more
    // than kSwitchGain: a table that flips with every size would be following noise.
    auto best = [&](int ch, double* t, AllreduceAlgorithm* alg) {
      const AllreduceAlgorithm keep = i == 0 ? AllreduceAlgorithm::kRing : *alg;
      const std::vector<double>* kept = find(ch, "allreduce", keep);
      *t = kept != nullptr ? (*kept)[i] : INFINITY;
      *alg = keep;
      for (AllreduceAlgorithm a : {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kDirect})
        if (const std::vector<double>* s = find(ch, "allreduce", a);
            s != nullptr && a != keep && (*s)[i] * (1 + kSwitchGain) < *t) {
          *t = (*s)[i];
          *alg = a;
        }
    };
    if (i > 0) {
      unsplit_alg[i] = unsplit_alg[i - 1];
      split_alg[i] = split_alg[i - 1];
    }
    best(1, &unsplit[i], &unsplit_alg[i]);
    best(channels, &split[i], &split_alg[i]);
  }
  // Splitting pays at size i when it saves time over the collectives, each by its share.
  auto split_gain = [&](size_t i) {
    double gain = (unsplit[i] - split[i]) / unsplit[i];
    for (const char* op : kCollectives) {
      if (std::string(op) == "allreduce") continue;
      const std::vector<double>* one = find(1, op, std::nullopt);
      const std::vector<double>* many = find(channels, op, std::nullopt);
      if (one != nullptr && many != nullptr) gain += ((*one)[i] - (*many)[i]) / (*one)[i];
    }
    return gain;
  };
  size_t split_from = n;
  if (channels > 1 && backend != "shm")
    while (split_from > 0 && split_gain(split_from - 1) > 0) --split_from;
  if (channels > 1 && split_from == n) return std::nullopt;
  if (split_from < n) c.split_bytes = sizes[split_from];
  for (size_t i = 0; i < n; ++i) {
    const bool s = i >= split_from;
    c.seconds["allreduce"].push_back(s ? split[i] : unsplit[i]);
    for (const char* op : kCollectives)
      if (std::string(op) != "allreduce")
        if (const std::vector<double>* t = find(s ? channels : 1, op, std::nullopt))
          c.seconds[op].push_back((*t)[i]);
    const AllreduceAlgorithm a = s ? split_alg[i] : unsplit_alg[i];
    if (backend == "shm") continue;
    if (!c.rules.empty() && c.rules.back().algorithm == a) continue;
    if (!c.rules.empty()) c.rules.back().below_bytes = sizes[i];
    c.rules.push_back({SIZE_MAX, a});
  }
  size_t terms = 0;
  for (const auto& [op, t] : c.seconds)
    for (size_t i = 0; i < t.size(); ++i, ++terms) c.score += t[i] / fastest.at(op)[i];
  c.score /= static_cast<double>(std::max<size_t>(terms, 1));
  return c;
}

}  // namespace

Status run_tune_worker(const TuneConfig& config, const train::DistEnv& env) {
  const int P = env.world_size;
  if (P < 2)
    return InvalidArgument(
        "bench tune: one process has nothing to communicate; hint: give --nproc-per-node 2 or "
        "more, or several nodes");
  const bool leader = env.rank == 0;
  const int per_node = env.local_world_size;
  const int nnodes = P / per_node;
  const bool multihost = nnodes > 1;
  const std::vector<size_t> sizes = size_list(config);
  std::vector<int> channel_counts = config.channels;
  if (std::find(channel_counts.begin(), channel_counts.end(), 1) == channel_counts.end())
    channel_counts.insert(channel_counts.begin(), 1);
  std::vector<AllreduceAlgorithm> algorithms = {AllreduceAlgorithm::kDirect};
  if (config.transport == "tcp") algorithms.insert(algorithms.begin(), AllreduceAlgorithm::kRing);

  // Agreement on trial results goes through a group of its own.
  train::DistEnv sync_env = env;
  sync_env.job_id = env.job_id + "/tune-sync";
  std::shared_ptr<comm::Store> store;
  CANN_ASSIGN_OR_RETURN(
      auto sync,
      train::make_world_group(sync_env, comm_for(config, "gloo", 1, SIZE_MAX, {}), &store));

  if (leader) {
    const LoadReading load = read_load();
    std::printf(
        "# cann-train bench tune: %d ranks (%d node%s x %d), %s, fp32 collectives %s..%s x%d, "
        "validated before timing; load average %.2f, %d runnable\n",
        P, nnodes, nnodes == 1 ? "" : "s", per_node, config.transport.c_str(),
        human_bytes(sizes.front()).c_str(), human_bytes(sizes.back()).c_str(), config.factor,
        load.load1, load.runnable);
    std::fflush(stdout);
  }

  // 1. Every setting at every size.
  std::vector<Setting> settings;
  const std::vector<std::string> backends = multihost
                                                ? std::vector<std::string>{"hierarchical", "gloo"}
                                                : std::vector<std::string>{"shm", "gloo"};
  for (const std::string& b : backends) {
    if (b == "shm") {
      settings.push_back({b, 1, AllreduceAlgorithm::kRing, true, {}});
      continue;
    }
    for (int ch : channel_counts)
      for (AllreduceAlgorithm a : algorithms)
        settings.push_back({b, ch, a, a == algorithms.front(), {}});
  }
  for (size_t k = 0; k < settings.size(); ++k) {
    Setting& s = settings[k];
    train::DistEnv e = env;
    e.job_id = env.job_id + "/tune-" + std::to_string(k);
    CANN_ASSIGN_OR_RETURN(
        auto group, train::make_world_group(
                        e, comm_for(config, s.backend, s.channels, 0, {{SIZE_MAX, s.algorithm}})));
    for (const char* op : kCollectives) {
      if (!s.every_collective && std::string(op) != "allreduce") continue;
      CANN_ASSIGN_OR_RETURN(s.seconds[op], time_sizes(*group, op, sizes, config));
    }
  }
  std::map<std::string, std::vector<double>> fastest;
  for (const Setting& s : settings)
    for (const auto& [op, t] : s.seconds) {
      auto& f = fastest.try_emplace(op, sizes.size(), INFINITY).first->second;
      for (size_t i = 0; i < sizes.size(); ++i) f[i] = std::min(f[i], t[i]);
    }
  if (leader) {
    for (const char* op : kCollectives) {
      std::printf("%-8s", (std::string("# ") + op).c_str());
      for (const Setting& s : settings)
        if (s.seconds.count(op))
          std::printf(" %16s", s.label(std::string(op) == "allreduce").c_str());
      std::printf("   (microseconds)\n");
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::printf("%-8s", human_bytes(sizes[i]).c_str());
        for (const Setting& s : settings)
          if (auto it = s.seconds.find(op); it != s.seconds.end())
            std::printf(" %16.1f", it->second[i] * 1e6);
        std::printf("\n");
      }
    }
  }

  // 2. The best setting per backend and channel count; the best of all, and of the gloo-based.
  std::vector<Choice> choices;
  for (const std::string& b : backends)
    for (int ch : b == "shm" ? std::vector<int>{1} : channel_counts)
      if (auto c = choose(settings, b, ch, sizes, fastest)) choices.push_back(std::move(*c));
  const Choice* best = nullptr;
  const Choice* best_gloo = nullptr;
  for (const Choice& c : choices) {
    if (best == nullptr || c.score < best->score) best = &c;
    if (c.backend != "shm" && (best_gloo == nullptr || c.score < best_gloo->score)) best_gloo = &c;
  }
  if (leader) {
    std::printf(
        "# settings by mean time over the fastest measured, over every collective and size:\n");
    for (const Choice& c : choices)
      std::printf("#   %-28s %.3f%s\n", c.label().c_str(), c.score,
                  &c == best ? "  <- chosen" : "");
  }

  train::CommTuning t;
  t.nnodes = nnodes;
  t.nproc_per_node = per_node;
  t.transport = config.transport;
  t.backend = best->backend;
  t.channels = best_gloo->channels;
  t.split_bytes = best_gloo->split_bytes;
  t.allreduce = best_gloo->rules;
  const train::CommConfig chosen =
      comm_for(config, t.backend, t.channels, t.split_bytes, t.allreduce);

  // The links the chosen setting measured: one node's all-reduce, and with several nodes one
  // rank per node across them (the planner's inter-node link).
  if (!multihost) {
    t.intra_node = link_of(best->seconds.at("allreduce"), sizes, P);
  } else {
    comm::GroupConfig g;
    g.store = store;
    g.timeout = std::chrono::milliseconds(static_cast<long>(config.timeout_s * 1000));
    g.host_id = env.host_id;
    g.hostname = env.comm_addr;
    g.transport = config.transport;
    std::vector<float> link_seconds(2 * sizes.size(), 0.0f);  // intra, then inter
    if (per_node > 1) {
      comm::GroupConfig local = g;
      local.backend = "shm";
      local.prefix = "cann/" + env.job_id + "/tune-node" + std::to_string(env.node_rank);
      local.rank = env.local_rank;
      local.size = per_node;
      CANN_ASSIGN_OR_RETURN(auto group, comm::create_group(local));
      CANN_ASSIGN_OR_RETURN(auto s, time_sizes(*group, "allreduce", sizes, config));
      for (size_t i = 0; i < sizes.size(); ++i) link_seconds[i] = static_cast<float>(s[i]);
    }
    if (env.local_rank == 0) {
      comm::GroupConfig across = g;
      across.backend = "gloo";
      across.prefix = "cann/" + env.job_id + "/tune-nodes";
      across.rank = env.node_rank;
      across.size = nnodes;
      across.parallel_contexts = t.channels;
      across.split_bytes = t.split_bytes;
      across.allreduce_rules = t.allreduce;
      CANN_ASSIGN_OR_RETURN(auto group, comm::create_group(across));
      CANN_ASSIGN_OR_RETURN(auto s, time_sizes(*group, "allreduce", sizes, config));
      for (size_t i = 0; i < sizes.size(); ++i)
        link_seconds[sizes.size() + i] = static_cast<float>(s[i]);
    }
    CANN_RETURN_IF_ERROR(sync->allreduce(link_seconds.data(), link_seconds.size(),
                                         comm::DataType::kFloat32, comm::ReduceOp::kMax)
                             ->wait());
    const std::vector<double> intra(link_seconds.begin(), link_seconds.begin() + sizes.size()),
        inter(link_seconds.begin() + sizes.size(), link_seconds.end());
    if (per_node > 1) t.intra_node = link_of(intra, sizes, per_node);
    t.inter_node = link_of(inter, sizes, nnodes);
  }

  // 3. Bucket sizes against the model's backward.
  if (config.bucket_steps > 0) {
    train::TrainConfig tc = config.train;
    tc.steps = config.bucket_steps;
    tc.quiet = true;
    tc.monitor = false;
    tc.eval_every = 0;
    tc.eval_batches = 1;
    tc.sample_tokens = 0;
    tc.log_json.clear();
    tc.checkpoint_dir.clear();
    tc.tensorboard_dir.clear();
    tc.profile.clear();
    if (tc.threads == 0)
      if (const char* threads = std::getenv("CANN_TRAIN_DEFAULT_THREADS"))
        tc.threads = std::atoi(threads);
    const int skip = tc.steps > 3 ? 2 : 0;
    double grad_bytes = 0;
    // MiB, up to the first that holds the gradient; 0 first: the engine's own rule (a
    // sixteenth of the gradient within 1-25 MiB), what a run without comm.yaml uses.
    std::vector<double> candidates;
    std::vector<std::vector<double>> timed;      // per candidate: its timed steps, both rounds
    std::vector<std::vector<double>> per_round;  // per candidate: the median of each round
    auto trial = [&](size_t k, int round) -> Status {
      tc.bucket_mb = candidates[k];
      train::DistEnv e = env;
      e.job_id = env.job_id + "/tune-bucket-" + std::to_string(k) + "-" + std::to_string(round);
      CANN_ASSIGN_OR_RETURN(auto trainer, train::Trainer::create(tc, &e, chosen));
      grad_bytes = static_cast<double>(trainer->model().num_floats()) * 4.0;
      train::RunSummary summary;
      CANN_RETURN_IF_ERROR(trainer->run(&summary));
      const auto& st = summary.step_times_s;
      const std::vector<double> steps(st.begin() + std::min<size_t>(skip, st.size()), st.end());
      timed[k].insert(timed[k].end(), steps.begin(), steps.end());
      per_round[k].push_back(median(steps));
      return OkStatus();
    };
    // Two rounds, ascending then descending, so a drift over the trials (caches warming, the
    // machine's other load) weighs on every size alike.
    candidates.push_back(0.0);
    timed.emplace_back();
    per_round.emplace_back();
    CANN_RETURN_IF_ERROR(trial(0, 0));
    for (double mb : config.buckets_mb) {
      // Past the model's gradient every size is the same single bucket after the first.
      if (candidates.size() > 1 && candidates.back() * 1048576.0 >= grad_bytes - 1048576.0) break;
      candidates.push_back(mb);
      timed.emplace_back();
      per_round.emplace_back();
      CANN_RETURN_IF_ERROR(trial(candidates.size() - 1, 0));
    }
    // The second round repeats the engine's rule and every size the first round put within
    // kRepeatWithin of the fastest, on the slowest rank's figures (so every rank runs the same
    // trials); a size slower than that by more than the noise the rule allows cannot win, and
    // its second run would only lengthen the tuning.
    const size_t K = candidates.size();
    std::vector<float> first(K);
    for (size_t k = 0; k < K; ++k) first[k] = static_cast<float>(per_round[k][0]);
    CANN_RETURN_IF_ERROR(
        sync->allreduce(first.data(), K, comm::DataType::kFloat32, comm::ReduceOp::kMax)->wait());
    const float fastest_first = *std::min_element(first.begin(), first.end());
    std::vector<bool> repeated(K);
    for (size_t k = 0; k < K; ++k)
      repeated[k] = k == 0 || first[k] <= fastest_first * (1 + kRepeatWithin);
    for (size_t k = K; k-- > 0;)
      if (repeated[k]) CANN_RETURN_IF_ERROR(trial(k, 1));
    // Every rank's figures, the slowest rank's kept: the median, and each round's (0: none).
    std::vector<float> figures(3 * K);
    for (size_t k = 0; k < K; ++k) {
      figures[k] = static_cast<float>(median(timed[k]));
      figures[K + k] = static_cast<float>(per_round[k][0]);
      figures[2 * K + k] = repeated[k] ? static_cast<float>(per_round[k][1]) : 0.0f;
    }
    CANN_RETURN_IF_ERROR(sync->allreduce(figures.data(), figures.size(), comm::DataType::kFloat32,
                                         comm::ReduceOp::kMax)
                             ->wait());
    auto spread = [&](size_t k) { return std::fabs(figures[K + k] - figures[2 * K + k]); };
    size_t pick = 0;
    for (size_t k = 1; k < K; ++k)
      if (repeated[k] && figures[k] < figures[pick]) pick = k;
    // Another size replaces the engine's rule only when it is faster by more than either
    // one's difference between its two rounds: a tuning must not make the run slower on noise.
    const bool within_noise =
        pick != 0 && figures[0] - figures[pick] <= std::max(spread(0), spread(pick));
    if (within_noise) pick = 0;
    t.bucket_size_mb = candidates[pick];  // 0: not written, the engine's rule stays
    t.model = tc.model;
    if (leader) {
      const plan::EngineBuckets rule;
      std::printf(
          "# bucket sizes: %s, batch %d, data-parallel over %d ranks, median of steps "
          "%d..%d of two rounds (%.1f MB of gradients; the two rounds' medians beside)\n",
          tc.model.c_str(), tc.batch_size, P, skip + 1, tc.steps, grad_bytes / 1e6);
      for (size_t k = 0; k < K; ++k) {
        char name[48];
        if (candidates[k] == 0)
          std::snprintf(name, sizeof(name), "default (%.2g MiB)",
                        rule.size_bytes(grad_bytes / 4.0) / 1048576.0);
        else
          std::snprintf(name, sizeof(name), "%g MiB", candidates[k]);
        if (repeated[k])
          std::printf("#   %-20s %9.2f ms  (%.2f, %.2f)%s\n", name, figures[k] * 1e3,
                      figures[K + k] * 1e3, figures[2 * K + k] * 1e3,
                      k == pick ? "  <- chosen" : "");
        else
          std::printf(
              "#   %-20s %9.2f ms  (%.2f, -: more than %.0f%% slower than the fastest "
              "first round, not repeated)\n",
              name, figures[k] * 1e3, figures[K + k] * 1e3, 100 * kRepeatWithin);
      }
      if (within_noise)
        std::printf(
            "#   (the fastest size beat the default by no more than the rounds differ: "
            "the default stays)\n");
    }
  }

  // Every node writes the same file: the timestamp is rank 0's.
  int64_t now = leader ? static_cast<int64_t>(std::time(nullptr)) : 0;
  CANN_RETURN_IF_ERROR(sync->broadcast(&now, 1, comm::DataType::kInt64, 0)->wait());
  t.measured_at = utc_timestamp(now);
  if (env.local_rank == 0) CANN_RETURN_IF_ERROR(train::write_comm_tuning(config.output, t));
  // Every node has written its file, and no rank leaves while a peer still reads the last
  // collective (train/distributed.h).
  if (store)
    CANN_RETURN_IF_ERROR(train::leave_together(
        *store, env, "bench-tune",
        std::chrono::milliseconds(static_cast<long>(config.timeout_s * 1000))));
  if (leader) {
    std::printf("wrote %s: %s\n", config.output.c_str(), train::comm_tuning_summary(t).c_str());
    std::fflush(stdout);
  }
  return OkStatus();
}

}  // namespace cann::cli
