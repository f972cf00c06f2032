// `cann-train debug replay TRACE.json`: re-issues a profile trace's collective sequence (ops,
// sizes, order; debug/trace_replay.h) over worker processes and the same backend, without the
// model, and prints each op's time and bus bandwidth next to the recorded ones.
//
// Like `bench comm`, the command is its own agent: it reads the trace (so a bad file fails
// before any process starts), then launches --nproc workers running the same command; each
// worker builds the world group, issues the whole sequence once to warm up, then --repeat
// timed passes, each op issued and waited for alone (so its time is the collective's own, as
// the flight recorder measured it from start to completion). Rank 0 reports the median pass.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "comm/group.h"
#include "core/fs.h"
#include "core/json_line.h"
#include "core/timer.h"
#include "debug/trace_replay.h"
#include "elastic/agent.h"
#include "train/dist_env.h"
#include "train/distributed.h"

namespace cann::cli {
namespace {

struct ReplayFlags {
  std::string trace;
  int nproc = 0;  // 0: the recorded group size
  int rank = -1;  // whose sequence; -1: the lowest in the file
  int repeat = 5;
  std::string backend = "auto";
  double timeout_s = 60.0;
  std::string json;
};

// Issues one recorded op over `g` with buffers sized from its byte count (fp32 elements).
Status issue(comm::Group& g, const debug::ReplayOp& op, std::vector<float>& in,
             std::vector<float>& out, const comm::Options& opts) {
  const size_t P = static_cast<size_t>(g.size());
  const size_t count = std::max<size_t>(1, (op.bytes + 3) / 4);
  const auto f32 = comm::DataType::kFloat32;
  const size_t need = op.op == "allreduce" || op.op == "broadcast" ? count : count * P;
  if (in.size() < need) in.resize(need);
  if (out.size() < need) out.resize(need);
  std::shared_ptr<comm::Work> w;
  if (op.op == "allreduce") {
    w = g.allreduce(in.data(), count, f32, comm::ReduceOp::kSum, opts);
  } else if (op.op == "allgather") {
    w = g.allgather(out.data(), in.data(), count, f32, opts);
  } else if (op.op == "reduce_scatter") {
    w = g.reduce_scatter(out.data(), in.data(), count, f32, comm::ReduceOp::kSum, opts);
  } else if (op.op == "alltoall") {
    w = g.alltoall(out.data(), in.data(), count, f32, opts);
  } else if (op.op == "broadcast") {
    w = g.broadcast(in.data(), count, f32, 0, opts);
  } else if (op.op == "allgatherv") {
    // The recorded count is the whole output: split it evenly, the remainder to the last rank.
    std::vector<size_t> counts(P, count / P);
    counts.back() += count % P;
    w = g.allgatherv(out.data(), in.data(), counts, f32, opts);
  } else {
    w = g.barrier(opts);
  }
  return w->wait(opts.timeout + std::chrono::seconds(5));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string gbps(double bytes, double factor, double seconds) {
  if (bytes <= 0 || seconds <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", bytes * factor / seconds / 1e9);
  return buf;
}

Status run_replay_worker(const ReplayFlags& f, const train::DistEnv& env) {
  CANN_ASSIGN_OR_RETURN(const std::string text, read_file(f.trace));
  CANN_ASSIGN_OR_RETURN(const debug::ReplayPlan plan,
                        debug::parse_replay_plan(text, f.trace, f.rank));
  train::CommConfig cc;
  cc.backend = f.backend;
  cc.timeout_s = f.timeout_s;
  train::DistEnv e = env;
  e.job_id = env.job_id + "/replay";
  CANN_ASSIGN_OR_RETURN(auto group, train::make_world_group(e, cc));
  const int P = group->size();
  comm::Options opts;
  opts.timeout = std::chrono::milliseconds(static_cast<long>(f.timeout_s * 1000));
  std::vector<float> in, out;
  for (const debug::ReplayOp& op : plan.ops) {  // warm-up pass
    opts.tag = "replay " + op.tag;
    CANN_RETURN_IF_ERROR(issue(*group, op, in, out, opts));
  }
  std::vector<std::vector<double>> times(plan.ops.size());
  for (int pass = 0; pass < f.repeat; ++pass) {
    opts.tag = "replay pass";
    CANN_RETURN_IF_ERROR(group->barrier(opts)->wait(opts.timeout));
    for (size_t i = 0; i < plan.ops.size(); ++i) {
      opts.tag = "replay " + plan.ops[i].tag;
      const double t0 = now_seconds();
      CANN_RETURN_IF_ERROR(issue(*group, plan.ops[i], in, out, opts));
      times[i].push_back(now_seconds() - t0);
    }
  }
  if (env.rank != 0) return OkStatus();

  const int recorded_n = plan.group_size > 0 ? plan.group_size : P;
  std::printf(
      "replay of %s: rank %d's %zu collectives (%d skipped: p2p, alltoallv), recorded "
      "over %d ranks, replayed over %d (%s), median of %d passes\n",
      f.trace.c_str(), plan.rank, plan.ops.size(), plan.skipped, recorded_n, P,
      group->backend().c_str(), f.repeat);
  if (recorded_n != P)
    std::printf(
        "note: the group sizes differ, so times compare loosely; bus bandwidths use "
        "each side's own size\n");
  std::printf("%5s %-15s %-20s %12s %10s %10s %10s %10s %8s\n", "#", "op", "tag", "bytes", "rec ms",
              "replay ms", "rec busbw", "rep busbw", "rep/rec");
  constexpr size_t kMaxRows = 40;
  double rec_total = 0, rep_total = 0;
  std::string json_ops;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const debug::ReplayOp& op = plan.ops[i];
    const double rep = median(times[i]);
    rec_total += op.recorded_s;
    rep_total += rep;
    if (i < kMaxRows) {
      char ratio[32] = "-";
      if (op.recorded_s > 0) std::snprintf(ratio, sizeof(ratio), "%.2fx", rep / op.recorded_s);
      std::printf(
          "%5zu %-15s %-20s %12llu %10.3f %10.3f %10s %10s %8s\n", i + 1, op.op.c_str(),
          op.tag.substr(0, 20).c_str(), static_cast<unsigned long long>(op.bytes),
          op.recorded_s * 1e3, rep * 1e3,
          gbps(static_cast<double>(op.bytes), debug::bus_bandwidth_factor(op.op, recorded_n),
               op.recorded_s)
              .c_str(),
          gbps(static_cast<double>(op.bytes), debug::bus_bandwidth_factor(op.op, P), rep).c_str(),
          ratio);
    } else if (i == kMaxRows) {
      std::printf("%5s (%zu more; --json FILE lists every op)\n", "...",
                  plan.ops.size() - kMaxRows);
    }
    JsonLine j;
    j.add("index", static_cast<int64_t>(i))
        .add("op", op.op)
        .add("tag", op.tag)
        .add("bytes", static_cast<int64_t>(op.bytes))
        .add("recorded_seq", static_cast<int64_t>(op.seq))
        .add("recorded_s", op.recorded_s)
        .add("replay_s", rep);
    if (!json_ops.empty()) json_ops += ",\n";
    json_ops += j.str();
  }
  std::printf("total: recorded %.3f ms, replayed %.3f ms (%.2fx)\n", rec_total * 1e3,
              rep_total * 1e3, rec_total > 0 ? rep_total / rec_total : 0.0);
  std::fflush(stdout);
  if (!f.json.empty()) {
    JsonLine doc;
    doc.add("trace", f.trace)
        .add("rank_in_trace", plan.rank)
        .add("recorded_group_size", recorded_n)
        .add("replay_group_size", P)
        .add("backend", group->backend())
        .add("passes", f.repeat)
        .add("skipped", plan.skipped)
        .add_raw("ops", "[" + json_ops + "]");
    CANN_RETURN_IF_ERROR(write_file_atomic(f.json, doc.str() + "\n"));
  }
  return OkStatus();
}

}  // namespace

CommandMain add_debug_replay_command(CLI::App* debug, std::vector<std::string> argv_after_binary) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* replay = debug->add_subcommand(
      "replay",
      "Re-issue the collectives of a `run --profile` trace (ops, sizes, order) over worker "
      "processes without the model, and compare each op's time and bandwidth with the recording");
  replay->add_option("TRACE", f->trace, "trace.json or trace-rank<R>.json from run --profile")
      ->required();
  replay
      ->add_option("--nproc", f->nproc,
                   "Worker processes (default: the group size recorded in the trace)")
      ->check(CLI::PositiveNumber);
  replay
      ->add_option("--rank", f->rank,
                   "Whose recorded sequence to replay (default: the lowest rank in the file)")
      ->check(CLI::NonNegativeNumber);
  replay->add_option("--repeat", f->repeat, "Timed passes over the sequence (after one warm-up)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  replay->add_option("--backend", f->backend, "Collectives: auto, shm, gloo, hierarchical")
      ->check(CLI::IsMember({"auto", "shm", "gloo", "hierarchical"}))
      ->capture_default_str();
  replay->add_option("--comm-timeout", f->timeout_s, "Seconds a collective waits for a peer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  replay->add_option("--json", f->json, "Also write every op's recorded and replayed time here");
  return [f, argv_after_binary]() -> int {
    auto fail = [](const Status& s) {
      std::fprintf(stderr, "cann-train debug replay: error: %s\n", s.message().c_str());
      return s.exit_code();
    };
    auto env = train::detect_dist_env();
    if (!env.ok()) return fail(env.status());
    if (env->has_value()) {
      Status s = run_replay_worker(*f, **env);
      return s.ok() ? 0 : fail(s);
    }
    // The agent: check the trace here, so a bad file is one clear error and no processes.
    auto text = read_file(f->trace);
    if (!text.ok()) return fail(text.status());
    auto plan = debug::parse_replay_plan(*text, f->trace, f->rank);
    if (!plan.ok()) return fail(plan.status());
    elastic::AgentConfig ac;
    ac.nproc_per_node = f->nproc > 0           ? f->nproc
                        : plan->group_size > 0 ? plan->group_size
                                               : static_cast<int>(plan->ranks_in_file.size());
    ac.backend = f->backend;
    ac.worker_args = argv_after_binary;
    ac.plain_rank0_stdout = true;
    auto code = elastic::run_agent(ac);
    if (!code.ok()) return fail(code.status());
    return *code;
  };
}

}  // namespace cann::cli
