// planner_bench: how fast `cann-train search` answers for three planning problems the issue
// names (moe_bert on 1024 Ascend 910B, a 1T GPT on 3072 A100s, Llama 3 405B on 16,384
// H100s, and DeepSeek-V3 on 2048 H800s), with the target of under one second each on one core.
//
// Validate first, then time: each search's winner must be a valid strategy that fits its
// device memory, and the peer, the same search with pruning turned off (every leaf priced),
// run in the same process, must find the same winner and the same feasible set. The search is
// single-threaded; the figures are the best of --repeat runs, so other load on the machine
// inflates them less.
//
// Usage: planner_bench [--repeat N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "plan/plan_input.h"
#include "plan/search.h"

namespace {

using namespace cann;
using namespace cann::plan;

struct Case {
  const char* label;
  const char* model;
  const char* cluster;
  int nodes;         // 0: the preset's own
  int global_batch;  // 0: the default (about 4M tokens)
};

// Llama 3 405B's 16M-token batch at 16K GPUs (Dubey et al. 2024, Table 4): 2048 x 8192.
const Case kCases[] = {
    {"moe_bert x 1024_ascend910b", "moe_bert", "1024_ascend910b", 0, 0},
    {"gpt_1t x 3072 A100", "gpt_1t", "3072_a100", 0, 0},
    {"llama3_405b x 16384 H100", "llama3_405b", "16384_h100", 0, 2048},
    {"deepseek_v3 x 2048 H800", "deepseek_v3", "2048_h800", 0, 0},
};

struct Timed {
  SearchResult result;
  double best_s = 1e30;
};

bool timed_search(const PlanInput& in, SearchOptions opt, int repeat, Timed* out) {
  for (int i = 0; i < repeat; ++i) {
    auto r = search(in, opt);
    if (!r.ok()) {
      std::fprintf(stderr, "search failed: %s\n", r.status().message().c_str());
      return false;
    }
    out->best_s = std::min(out->best_s, r->search_time_s);
    out->result = std::move(*r);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: planner_bench [--repeat N]\n");
      return 2;
    }
  }
  std::printf("planner_bench: best of %d runs, one thread\n", repeat);
  std::printf("%-28s %9s %9s %9s %8s %12s %10s %8s\n", "case", "space", "priced", "pruned",
              "search s", "candidates/s", "brute s", "speedup");
  bool ok = true, fast = true;
  for (const Case& c : kCases) {
    auto in = load_plan_input(c.model, c.cluster, c.nodes, "");
    if (!in.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.label, in.status().message().c_str());
      return 1;
    }
    SearchOptions opt;
    opt.global_batch = c.global_batch;
    Timed pruned, brute;
    if (!timed_search(*in, opt, repeat, &pruned)) return 1;
    opt.prune = false;
    if (!timed_search(*in, opt, 1, &brute)) return 1;

    // Validation: a valid, fitting winner, identical to the exhaustive peer's.
    const SearchResult& r = pruned.result;
    std::string why;
    if (r.top.empty()) why = "no winner";
    if (why.empty() && !validate_strategy(r.top[0].strategy, in->model, in->cluster).ok())
      why = "winner is not a valid strategy";
    if (why.empty() && !(r.top[0].memory_peak_bytes <= in->cluster.device.memory_bytes()))
      why = "winner does not fit device memory";
    if (why.empty() &&
        (brute.result.top.empty() || !(brute.result.top[0].strategy == r.top[0].strategy)))
      why = "pruned and exhaustive searches disagree on the winner";
    if (why.empty() && brute.result.feasible.size() != r.feasible.size())
      why = "pruned and exhaustive searches disagree on the feasible set";
    if (!why.empty()) {
      std::printf("%s: VALIDATION FAILED: %s\n", c.label, why.c_str());
      ok = false;
      continue;
    }
    std::printf("%-28s %9lld %9lld %9lld %8.3f %12.0f %10.3f %7.1fx\n", c.label, r.space,
                r.evaluated, r.pruned, pruned.best_s, r.space / pruned.best_s, brute.best_s,
                brute.best_s / pruned.best_s);
    std::printf("  winner %s: %.3f s/step, MFU %.1f%%, %.1f GB\n",
                strategy_string(r.top[0].strategy).c_str(), r.top[0].step_time_s,
                100 * r.top[0].mfu, r.top[0].memory_peak_bytes / 1073741824.0);
    fast &= pruned.best_s < 1.0;
  }
  std::printf("validation: %s\n", ok ? "ok" : "FAILED");
  std::printf("target (each search under 1 s): %s\n", fast ? "met" : "missed");
  return ok ? 0 : 1;
}
