// Exhaustive search with a sound pruning bound, fast ranking, exact re-ranking, Pareto front,
// and an explanation when nothing satisfies the constraints (see search.h).
#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/timer.h"
#include "plan/report_text.h"

namespace cann::plan {
namespace {

std::vector<int> divisors(int n, int limit) {
  std::vector<int> d;
  for (int i = 1; i <= n && i <= limit; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB", bytes / 1073741824.0);
  return buf;
}

// The least a layer can hold on one device under a strategy: the state bytes of the lightest
// layer kind at the strategy's ZeRO stage, and the activation bytes of one micro-batch of the
// layer kind with the fewest. From the block costs of the strategy's recompute mode.
struct LayerFloor {
  double state = 0, activation = 0;
};

// Bytes per parameter of weights, gradients and optimizer state: state_bytes (predict.h); the
// fp32 engine's ZeRO-1 gradient shard and bucket padding only add to that.
LayerFloor layer_floor(const model::ModelSpec& m, const BlockCosts& b, const Strategy& s,
                       Precision p, bool bf16_optimizer) {
  const StateBytes sb = state_bytes(p, bf16_optimizer);
  const double bw = sb.weights, bg = sb.grads, bo = sb.optimizer;
  const double D = static_cast<double>(s.dp) * s.cp, De = D / s.ep;
  const double w = s.zero >= 3 ? D : 1, g = s.zero >= 2 ? D : 1, o = s.zero >= 1 ? D : 1;
  const double we = s.zero >= 3 ? De : 1, ge = s.zero >= 2 ? De : 1, oe = s.zero >= 1 ? De : 1;
  LayerFloor f{INFINITY, INFINITY};
  bool windowed = false;
  for (int l = 0; l < m.num_hidden_layers; ++l) windowed = windowed || m.window(l) > 0;
  for (const BlockCost* c : {&b.dense, &b.moe, &b.dense_window, &b.moe_window}) {
    const bool moe = c == &b.moe || c == &b.moe_window;
    const bool window = c == &b.dense_window || c == &b.moe_window;
    if (moe && !m.is_moe()) continue;
    if (!moe && m.num_moe_layers() == m.num_hidden_layers) continue;
    if (window && !windowed) continue;
    const double P = c->params, Pe = c->expert_params;
    f.state = std::min(
        f.state, bw * P / w + bg * P / g + bo * P / o + bw * Pe / we + bg * Pe / ge + bo * Pe / oe);
    f.activation = std::min(f.activation, c->activation_bytes);
  }
  return f;
}

// A lower bound on the memory peak of a strategy, before its stages are laid out. Device i of
// a 1F1B pipeline holds at least f_i = min(m, p - i) micro-batches of activations at its first
// backward (interleaving holds more). With x_i layers, each of at least s bytes of state and
// a bytes of activation, device i needs at least x_i * (s + f_i * a). The peak over devices is
// smallest when those are equal, M = x_i * (s + f_i * a), and the x_i sum to the layer count
// L, so every partition has a peak of at least
//   M = L / sum_i 1 / (s + f_i * a)          (plus the reserve)
// Worked example: L = 8, p = 2, m = 8, s = 1, a = 1: f = {2, 1}, M = 8 / (1/3 + 1/2) = 9.6;
// the best integer split, 3 and 5 layers, has a peak of max(3*3, 5*2) = 10 >= 9.6.
double memory_floor(const LayerFloor& f, int L, int pp, int m, double reserved) {
  double inv = 0;
  for (int i = 0; i < pp; ++i) inv += 1 / (f.state + std::min(m, pp - i) * f.activation);
  return L / inv + reserved;
}

// Fast-fidelity candidates are ranked by score, ties by throughput, so the order is stable.
bool ranks_before(Objective o, const ObjectiveFigures& a, const ObjectiveFigures& b) {
  const double sa = objective_score(o, a), sb = objective_score(o, b);
  if (sa != sb) return sa > sb;
  return a.tokens_per_s > b.tokens_per_s;
}

// Strategies fit memory and the communication limit, but the cost or goodput constraint
// removed every one of them: say which removed how many.
Status constraints_unmet(const PlanInput& in, const SearchOptions& opt, const SearchResult& r,
                         long long within_limits, double best_goodput) {
  std::string parts;
  if (r.removed_by_cost > 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "--max-cost-per-hour %.6g removed %s (every layout uses all %d devices: "
                  "$%.4g/h)",
                  opt.max_usd_per_hour, with_commas(r.removed_by_cost).c_str(),
                  in.cluster.num_devices(), usd_per_hour(in.cluster));
    parts += buf;
  }
  if (r.removed_by_goodput > 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s--min-goodput %.6g removed %s (the best reaches %.4f)",
                  parts.empty() ? "" : ", ", opt.min_goodput,
                  with_commas(r.removed_by_goodput).c_str(), best_goodput);
    parts += buf;
  }
  return FailedPrecondition("no strategy meets the constraints: of " + with_commas(within_limits) +
                            " that fit memory and the communication limit, " + parts +
                            "; hint: relax the constraint, or plan on a cheaper or more "
                            "reliable cluster");
}

}  // namespace

ObjectiveFigures Candidate::figures() const {
  ObjectiveFigures f;
  f.tokens_per_s = tokens_per_s;
  f.goodput = goodput;
  f.tei = tei;
  f.usd_per_million_tokens = usd_per_million_tokens;
  f.joules_per_token = joules_per_token;
  f.step_time_s = step_time_s;
  f.step_time_s_low = step_time_s_low;
  f.step_time_s_high = step_time_s_high;
  return f;
}

Candidate candidate_of(const PlanInput& in, const Prediction& p) {
  Candidate c;
  c.strategy = p.strategy;
  c.step_time_s = p.step_time_s;
  c.step_time_s_low = p.step_time_s_low;
  c.step_time_s_high = p.step_time_s_high;
  c.tokens_per_s = p.tokens_per_s;
  c.memory_peak_bytes = p.memory_peak_bytes;
  c.goodput = p.goodput.ratio;
  c.comm_ratio = p.comm_ratio;
  c.mfu = p.mfu;
  c.tei = p.tei;
  c.usd_per_million_tokens = usd_per_million_tokens(in.cluster, p.tokens_per_s);
  c.joules_per_token = joules_per_token(in.cluster, p.tokens_per_s);
  return c;
}

ObjectiveFigures figures_of(const PlanInput& in, const Prediction& p) {
  return candidate_of(in, p).figures();
}

int default_global_batch(const model::ModelSpec& m) {
  const double seqs = std::ldexp(1.0, 22) / std::max(1, m.seq_length);
  return std::max(1, static_cast<int>(std::exp2(std::round(std::log2(std::max(1.0, seqs))))));
}

void mark_pareto(std::vector<Candidate>& c, Objective o) {
  // Goodput is compared at 0.1% resolution: smaller differences come from rounding the
  // checkpoint interval to whole steps and would fill the front with noise.
  auto good = [&](size_t i) { return std::round(c[i].goodput * 1000); };
  // The first axis, lower better: step time for throughput (the same order at one batch
  // size), else the objective's score negated.
  std::vector<double> first(c.size());
  for (size_t i = 0; i < c.size(); ++i)
    first[i] = o == Objective::kThroughput ? c[i].step_time_s : -objective_score(o, c[i].figures());
  // Sweep in that order; a candidate is dominated when an earlier one (no worse) has no
  // more memory and no less goodput. `front` maps memory to the best goodput at or below it,
  // kept as a staircase (goodput rising with memory), so the query is one lookup.
  std::vector<size_t> order(c.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (first[a] != first[b]) return first[a] < first[b];
    if (c[a].memory_peak_bytes != c[b].memory_peak_bytes)
      return c[a].memory_peak_bytes < c[b].memory_peak_bytes;
    return good(a) > good(b);
  });
  std::map<double, double> front;
  for (size_t i : order) {
    const double mem = c[i].memory_peak_bytes, g = good(i);
    auto it = front.upper_bound(mem);
    const bool dominated = it != front.begin() && std::prev(it)->second >= g;
    c[i].pareto = !dominated;
    if (dominated) continue;
    // Drop staircase entries this one dominates (more memory, no more goodput).
    auto j = front.lower_bound(mem);
    while (j != front.end() && j->second <= g) j = front.erase(j);
    front[mem] = g;
  }
}

StatusOr<SearchResult> search(const PlanInput& in, const SearchOptions& opt) {
  Stopwatch clock;
  const model::ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  SearchResult r;
  r.global_batch = opt.global_batch > 0 ? opt.global_batch : default_global_batch(m);
  const int gbs = r.global_batch, N = c.num_devices(), L = m.num_hidden_layers;
  const int dpn = c.devices_per_node, kv = m.num_key_value_heads;
  const int experts = m.is_moe() ? m.num_local_experts : 1;
  const double limit = in.memory_limit_bytes;
  const Precision prec = c.device.precision;
  const bool engine_only = opt.engine_only.value_or(prec == Precision::kFp32);

  // What the explanation needs when nothing qualifies.
  Strategy closest_mem_s, closest_comm_s;
  double closest_mem = INFINITY, closest_comm = INFINITY;
  std::vector<Candidate> fast;  // every candidate meeting the constraints, fast fidelity
  long long& within_limits = r.within_limits;
  double best_goodput = 0;      // the best goodput among them
  r.objective = opt.objective;

  for (int tp : divisors(m.num_attention_heads, N)) {
    if (N % tp != 0 || (kv % tp != 0 && tp % kv != 0)) continue;
    if (!c.allow_cross_node_tp && (tp > dpn || dpn % tp != 0)) continue;
    for (int cp : divisors(N / tp, m.seq_length)) {
      // Megatron's context parallelism splits the sequence into 2*cp chunks (load balance).
      // MoE routing depends on which tokens share a micro-batch, so `run` trains MoE models
      // without cp (each context rank would route only its positions).
      if (cp > 1 && (m.seq_length % (2 * cp) != 0 || (engine_only && m.is_moe()))) continue;
      const int rest = N / (tp * cp);
      // Megatron-Core's ep divides the experts; the engine's need not (model/expert_placement.h).
      for (int ep = 1; ep <= std::min(experts, rest); ++ep) {
        if (rest % ep != 0 || (experts % ep != 0 && !engine_only)) continue;
        for (int sp : {0, 1}) {
          // sp shards a micro-batch's tokens over tp; ep's all-to-all exchanges every routed
          // row and `run` does not train the two together.
          if (sp && (tp == 1 || (engine_only && ep > 1))) continue;
          for (int mbs : divisors(gbs, opt.max_micro_batch)) {
            // Recomputation: none, selective, every second layer whole (torchtitan's selective
            // layer mode; Megatron-LM's block method recomputes as many), every layer whole.
            // The engine recomputes every layer or none of them (engine_support.h).
            struct Mode {
              Recompute rc;
              int every;
            };
            for (const Mode mode : {Mode{Recompute::kNone, 1}, Mode{Recompute::kSelective, 1},
                                    Mode{Recompute::kFull, 2}, Mode{Recompute::kFull, 1}}) {
              if (mode.every > 1 && (engine_only || mode.every > L)) continue;
              Strategy s;
              s.tp = tp;
              s.cp = cp;
              s.ep = ep;
              s.sp = sp;
              s.mbs = mbs;
              s.gbs = gbs;
              s.recompute = mode.rc;
              s.recompute_every = mode.every;
              bool have_blocks = false;
              BlockCosts blocks;
              for (int pp : divisors(rest, L)) {
                const int dp = rest / pp;
                if (dp % ep != 0 || gbs % (dp * mbs) != 0) continue;
                s.dp = dp;
                s.pp = pp;
                const int mb = gbs / (dp * mbs);
                // Interleaving needs equal chunks and micro-batches in groups of pp, as
                // Megatron-LM does (strategy.cc).
                std::vector<int> vpps;
                for (int v = 1; pp * v <= L; ++v)
                  if (v == 1 || (pp > 1 && mb % pp == 0 && L % (pp * v) == 0)) vpps.push_back(v);
                // ZeRO stages 2 and 3 reduce (and gather) every micro-batch: with pipeline
                // parallelism only stage 1, as DeepSpeed allows and `run` trains. Expert
                // parallelism runs without ZeRO in `run` (it does not shard experts' optimizer
                // state over their expert-data-parallel groups); Megatron's distributed
                // optimizer does.
                const int zeros = dp * cp == 1 || (engine_only && ep > 1) ? 1 : pp > 1 ? 2 : 4;
                r.space += static_cast<long long>(vpps.size()) * zeros;
                if (!have_blocks) {
                  blocks = block_costs(make_cost_context(m, c, in.shape, s, in.seq_len));
                  have_blocks = true;
                }
                // Which ZeRO stages can fit at all; the layout is computed only if one can.
                std::vector<int> live;
                for (int z = 0; z < zeros; ++z) {
                  s.zero = z;
                  if (opt.prune &&
                      memory_floor(layer_floor(m, blocks, s, prec, in.bf16_optimizer_state), L, pp,
                                   mb, reserved_bytes(c.device)) > limit) {
                    r.pruned += vpps.size();
                    continue;
                  }
                  live.push_back(z);
                }
                for (int v : vpps) {
                  if (live.empty()) break;
                  s.vpp = v;
                  const StageLayout lay = layout_stages(in, s, blocks, Fidelity::kFast);
                  for (int z : live) {
                    s.zero = z;
                    if (engine_only && !engine_supports(s, m, opt.engine).ok()) {
                      --r.space;
                      continue;
                    }
                    ++r.evaluated;
                    const double mem = memory_peak(in, s, lay);
                    if (mem < closest_mem) {
                      closest_mem = mem;
                      closest_mem_s = s;
                    }
                    if (mem > limit) continue;
                    const Prediction p = finish_prediction(in, s, lay, Fidelity::kFast);
                    if (p.comm_ratio < closest_comm) {
                      closest_comm = p.comm_ratio;
                      closest_comm_s = s;
                    }
                    if (p.comm_ratio > opt.max_comm_ratio) continue;
                    ++within_limits;
                    const bool over_cost = usd_per_hour(c) > opt.max_usd_per_hour;
                    const bool under_goodput = p.goodput.ratio < opt.min_goodput;
                    r.removed_by_cost += over_cost;
                    r.removed_by_goodput += under_goodput;
                    best_goodput = std::max(best_goodput, p.goodput.ratio);
                    if (over_cost || under_goodput) continue;
                    fast.push_back(candidate_of(in, p));
                  }
                }
                s.vpp = 1;
                s.zero = 0;
              }
            }
          }
        }
      }
    }
  }

  if (fast.empty() && within_limits > 0)
    return constraints_unmet(in, opt, r, within_limits, best_goodput);
  if (fast.empty()) {
    if (r.space == 0)
      return InvalidArgument("no strategy divides global batch " + std::to_string(gbs) + " over " +
                             std::to_string(N) +
                             " devices (gbs must be a multiple of dp*mbs); hint: use a "
                             "--global-batch that is a multiple of a power of two, e.g. " +
                             std::to_string(std::max(1, gbs / 64 + 1) * 64));
    if (closest_comm == INFINITY) {
      // Nothing fits memory. When the bound cut every branch, nothing was priced: price the
      // most frugal choices (mbs 1) of every branch without a limit, so the closest candidate
      // named is a real one.
      if (closest_mem == INFINITY) {
        SearchOptions all = opt;
        all.prune = false;
        all.max_micro_batch = 1;
        all.max_comm_ratio = INFINITY;
        all.max_usd_per_hour = INFINITY;
        all.min_goodput = 0;
        all.exact_rerank = 0;
        all.top_k = 0;
        PlanInput unlimited = in;
        unlimited.memory_limit_bytes = INFINITY;
        auto again = search(unlimited, all);
        if (again.ok())
          for (const Candidate& cand : again->feasible)
            if (cand.memory_peak_bytes < closest_mem) {
              closest_mem = cand.memory_peak_bytes;
              closest_mem_s = cand.strategy;
            }
      }
      char pct[32];
      std::snprintf(pct, sizeof(pct), "%.0f%%", 100 * (closest_mem / limit - 1));
      return InvalidArgument(
          "no strategy fits in " + gib(limit) + " per device on " + c.name + " (" +
          std::to_string(N) + " devices); the closest, " + strategy_string(closest_mem_s) +
          ", needs " + gib(closest_mem) + ": " + gib(closest_mem - limit) + " (" + pct +
          ") over; hint: allow more memory per device, add nodes (--nodes), or plan a smaller "
          "model");
    }
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "no strategy that fits memory keeps exposed communication under "
                  "--max-comm-overhead %.3g; the closest, %s, exposes %.3f of its step: %.3f "
                  "over",
                  opt.max_comm_ratio, strategy_string(closest_comm_s).c_str(), closest_comm,
                  closest_comm - opt.max_comm_ratio);
    return InvalidArgument(std::string(buf) +
                           "; hint: raise --max-comm-overhead, or use a cluster with a faster "
                           "network");
  }

  // Rank by the objective; re-price the leaders exactly and rank them again.
  const Objective obj = opt.objective;
  std::sort(fast.begin(), fast.end(), [obj](const Candidate& a, const Candidate& b) {
    return ranks_before(obj, a.figures(), b.figures());
  });
  r.feasible = std::move(fast);
  const int n_exact = std::min<int>(r.feasible.size(), std::max(opt.exact_rerank, opt.top_k));
  std::vector<Prediction> exact;
  std::vector<bool> drop(r.feasible.size(), false);
  for (int i = 0; i < n_exact; ++i) {
    auto p = predict(in, r.feasible[i].strategy, Fidelity::kExact);
    // The search builds valid strategies only; the exact price may still move a candidate
    // over a limit, and then it leaves the feasible set.
    if (!p.ok() || !p->fits || p->comm_ratio > opt.max_comm_ratio) {
      drop[i] = true;
      continue;
    }
    if (p->goodput.ratio < opt.min_goodput) {
      ++r.removed_by_goodput;
      drop[i] = true;
      continue;
    }
    r.feasible[i] = candidate_of(in, *p);
    exact.push_back(std::move(*p));
  }
  for (size_t i = drop.size(); i-- > 0;)
    if (drop[i]) r.feasible.erase(r.feasible.begin() + i);
  std::sort(exact.begin(), exact.end(), [&](const Prediction& a, const Prediction& b) {
    return ranks_before(obj, figures_of(in, a), figures_of(in, b));
  });
  if (static_cast<int>(exact.size()) > opt.top_k) exact.resize(opt.top_k);
  r.top = std::move(exact);
  if (r.feasible.empty() && r.removed_by_cost + r.removed_by_goodput > 0)
    return constraints_unmet(in, opt, r, within_limits, best_goodput);
  mark_pareto(r.feasible, obj);
  for (const Candidate& cand : r.feasible) r.pareto_count += cand.pareto;
  r.search_time_s = clock.elapsed();
  return r;
}

}  // namespace cann::plan
