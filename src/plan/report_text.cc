// Terminal table and plain-words explanation (see report_text.h).
#include "plan/report_text.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/numbers.h"
#include "model/expert_placement.h"
#include "plan/baseline.h"
#include "plan/comm_model.h"
#include "plan/error_band.h"

namespace cann::plan {
namespace {

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::string si(double v) {  // 1115471 -> "1.12M"
  if (v >= 1e9) return fmt("%.3gG", v / 1e9);
  if (v >= 1e6) return fmt("%.3gM", v / 1e6);
  if (v >= 1e3) return fmt("%.3gk", v / 1e3);
  return fmt("%.3g", v);
}

struct Part {
  const char* name;
  double s;
};

// The step's parts, largest first, without the GEMMs (the work itself).
std::vector<Part> losses(const TimeBreakdown& t) {
  std::vector<Part> p = {{"memory-bound kernels", t.stream_s},
                         {"recomputation", t.recompute_s},
                         {"tensor-parallel communication", t.tp_comm_s},
                         {"expert all-to-all", t.ep_comm_s},
                         {"context-parallel ring", t.cp_comm_s},
                         {"pipeline send/recv", t.p2p_s},
                         {"gradient reduction (data parallel)", t.dp_comm_s},
                         {"pipeline bubble", t.bubble_s},
                         {"optimizer step", t.optimizer_s}};
  std::sort(p.begin(), p.end(), [](const Part& a, const Part& b) { return a.s > b.s; });
  return p;
}

// Why the largest loss is what it is, in terms of the strategy and the cluster.
std::string cause(const PlanInput& in, const Prediction& w, const std::string& loss) {
  const Strategy& s = w.strategy;
  const ClusterSpec& c = in.cluster;
  const int dpn = c.devices_per_node;
  auto span = [&](int size, int stride) {
    const int local = members_per_node(c, GroupShape{size, stride});
    const int nodes = (size + local - 1) / local;
    return nodes > 1
               ? fmt("spans %d nodes at %.0f GB/s per device", nodes, c.inter_node.bandwidth_GBps)
               : std::string("stays inside a node");
  };
  const int mb = s.micro_batches();
  if (loss == "expert all-to-all")
    return fmt("every MoE layer sends each token to %d of %d experts and back, twice per "
               "micro-batch (forward and backward); the %d-rank expert group ",
               in.model.num_experts_per_tok, in.model.num_local_experts, s.ep) +
           span(s.ep, s.tp * s.cp);
  if (loss == "tensor-parallel communication")
    return fmt("%s per sublayer in forward and backward over the %d-way tensor group, which ",
               s.sp ? "an all-gather and a reduce-scatter" : "an all-reduce", s.tp) +
           span(s.tp, 1);
  if (loss == "pipeline bubble")
    return fmt("%d stages fill and drain around %d micro-batches%s", s.pp, mb,
               s.vpp > 1 ? fmt(" (interleaved over %d chunks)", s.vpp).c_str() : "");
  if (loss == "gradient reduction (data parallel)")
    return fmt("ZeRO-%d over %d ranks; the part that does not hide behind the backward pass",
               s.zero, s.dp * s.cp);
  if (loss == "pipeline send/recv")
    return fmt("one activation and one gradient message per micro-batch per stage boundary%s",
               static_cast<long long>(s.tp) * s.cp * s.dp * s.pp > dpn ? ", crossing nodes" : "");
  const model::ModelSpec& m = in.model;
  const bool fused = in.cluster.device.attention == AttentionKernel::kFused;
  if (loss == "recomputation")
    return fmt("%s recomputation re-runs %s before each backward to save memory",
               recompute_text(s).c_str(),
               s.recompute == Recompute::kFull && s.recompute_every > 1 ? "every k-th layer whole"
               : s.recompute == Recompute::kFull                        ? "whole layers"
               : s.recompute == Recompute::kOp ? "every other matmul and the elementwise kernels"
               : fused                         ? "the norms, activations and latent up-projections"
                                               : "the attention core");
  if (loss == "context-parallel ring")
    return fmt("keys and values are gathered over %d ranks before attention can start", s.cp);
  if (loss == "memory-bound kernels") {
    std::string kernels = m.norm == model::NormKind::kRmsNorm ? "RMSNorm" : "layernorm";
    if (!fused) kernels += ", softmax";
    if (m.attention_dropout > 0 || m.hidden_dropout > 0) kernels += ", dropout";
    if (m.positions == model::PositionKind::kRotary) kernels += ", rotary embedding";
    kernels += m.mlp == model::MlpKind::kSwiGlu ? " and SwiGLU" : " and GeLU";
    return kernels + " move bytes, not FLOPs";
  }
  return "AdamW streams the optimizer state once per step";
}

}  // namespace

std::string format_bytes(double bytes) {
  return fmt("%.1f GB", bytes / 1073741824.0);
}

std::string time_shares(const Prediction& p) {
  const TimeBreakdown& t = p.time;
  const double T = p.step_time_s;
  std::string out = fmt("GEMM %.0f%%", 100 * t.gemm_s / T);
  for (const Part& part : losses(t))
    if (part.s / T >= 0.005) out += fmt(", %s %.0f%%", part.name, 100 * part.s / T);
  return out;
}

// The table's strategy: the keys off their defaults (mbs=1 among them: parse_strategy reads an
// omitted mbs as 1), the batch left out (one for every row).
std::string row_strategy(Strategy s) {
  s.gbs = 0;
  if (s.mbs == 1) s.mbs = 0;
  return strategy_brief(s);
}

std::string strategy_table(const PlanInput& in, const std::vector<Prediction>& rows, Objective o,
                           const Prediction* baseline) {
  size_t w = 8;
  for (const Prediction& p : rows) w = std::max(w, row_strategy(p.strategy).size());
  const bool priced = in.cluster.device.hourly_cost_usd > 0;
  const bool powered = in.cluster.device.tdp_watts > 0;
  std::string out = fmt("%-3s %-*s %7s %15s %8s %6s %9s %6s %6s %7s %6s %6s %6s", "#",
                        static_cast<int>(w), "strategy", "step s", "likely s", "tokens/s", "MFU",
                        "mem peak", "comm", "bubble", "goodput", "TEI", "$/Mtok", "J/tok");
  out += baseline ? fmt(" %7s\n", "vs base") : "\n";
  int rank = 1;
  for (const Prediction& p : rows) {
    const ObjectiveFigures f = figures_of(in, p);
    out +=
        fmt("%-3d %-*s %7.3f %7.3f..%-6.3f %8s %5.1f%% %9s %5.1f%% %5.1f%% %6.1f%% %5.1f%% %6s %6s",
            rank++, static_cast<int>(w), row_strategy(p.strategy).c_str(), p.step_time_s,
            p.step_time_s_low, p.step_time_s_high, si(p.tokens_per_s).c_str(), 100 * p.mfu,
            format_bytes(p.memory_peak_bytes).c_str(), 100 * p.comm_ratio, 100 * p.bubble_ratio,
            100 * p.goodput.ratio, 100 * p.tei,
            priced ? fmt("%.3g", f.usd_per_million_tokens).c_str() : "-",
            powered ? fmt("%.3g", f.joules_per_token).c_str() : "-");
    out += baseline ? fmt(" %6.2fx\n", estimated_speedup(*baseline, p)) : "\n";
  }
  if (!rows.empty())
    out +=
        fmt("strategy: the keys off their defaults (mbs=1), gbs=%d. $/Mtok: the cluster's "
            "price per million tokens; J/tok: device energy (TDP) per token.\n",
            rows[0].strategy.gbs);
  out += "likely s: the 10th-90th percentile band of the planner's error on published runs of "
         "the same kind of layout (docs/planner.md, \"Error bands\").\n";
  if (rows.size() > 1)
    out +=
        fmt("Ranked by %s: %s, %s first.\n", std::string(objective_name(o)).c_str(),
            std::string(objective_quantity(o)).c_str(), lower_is_better(o) ? "lowest" : "highest");
  if (baseline)
    out +=
        fmt("vs base: estimated speed-up, the baseline's predicted step time (%.3f s, %s) over "
            "the strategy's.\n",
            baseline->step_time_s, row_strategy(baseline->strategy).c_str());
  // Candidates whose bands on the objective overlap the best one's: the model cannot tell
  // them apart.
  std::string close;
  for (size_t i = 1; i < rows.size(); ++i) {
    const ScoreBand a = objective_band(o, figures_of(in, rows[0]));
    const ScoreBand b = objective_band(o, figures_of(in, rows[i]));
    if (bands_overlap({a.low, a.high}, {b.low, b.high}))
      close += fmt("%s#%zu", close.empty() ? "" : ", ", i + 1);
  }
  if (!close.empty())
    out += "#1 and " + close + " are within each other's error bands on " +
           std::string(objective_quantity(o)) +
           ": the model does not rank them apart; measure them (cann-train bench plan-vs-real) "
           "before choosing.\n";
  return out;
}

std::string pareto_table(const std::vector<Candidate>& feasible, Objective o, size_t max_rows) {
  std::vector<const Candidate*> front;
  for (const Candidate& c : feasible)
    if (c.pareto) front.push_back(&c);
  if (front.empty()) return "";
  std::sort(front.begin(), front.end(), [o](const Candidate* a, const Candidate* b) {
    return objective_score(o, a->figures()) > objective_score(o, b->figures());
  });
  std::vector<size_t> pick;
  if (front.size() <= max_rows) {
    for (size_t i = 0; i < front.size(); ++i) pick.push_back(i);
  } else {
    size_t least_mem = 0, best_good = 0;
    for (size_t i = 0; i < front.size(); ++i) {
      if (front[i]->memory_peak_bytes < front[least_mem]->memory_peak_bytes) least_mem = i;
      if (front[i]->goodput > front[best_good]->goodput) best_good = i;
    }
    for (size_t k = 0; k + 2 < max_rows; ++k)
      pick.push_back(k * (front.size() - 1) / (max_rows - 3));
    pick.push_back(least_mem);
    pick.push_back(best_good);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  }
  size_t w = 8;
  for (size_t i : pick) w = std::max(w, strategy_string(front[i]->strategy).size());
  std::string out =
      fmt("Pareto front over %s, memory peak and goodput: %zu strategies%s\n",
          o == Objective::kThroughput ? "step time" : std::string(objective_quantity(o)).c_str(),
          front.size(), front.size() > pick.size() ? ", a spread of them:" : ":");
  out += fmt("  %-*s %9s %9s %9s %7s %6s %7s %6s\n", static_cast<int>(w), "strategy", "step s",
             "tokens/s", "mem peak", "goodput", "TEI", "$/Mtok", "J/tok");
  for (size_t i : pick) {
    const Candidate& c = *front[i];
    out += fmt("  %-*s %9.3f %9s %9s %6.1f%% %5.1f%% %7s %6s\n", static_cast<int>(w),
               strategy_string(c.strategy).c_str(), c.step_time_s, si(c.tokens_per_s).c_str(),
               format_bytes(c.memory_peak_bytes).c_str(), 100 * c.goodput, 100 * c.tei,
               c.usd_per_million_tokens > 0 ? fmt("%.3g", c.usd_per_million_tokens).c_str() : "-",
               c.joules_per_token > 0 ? fmt("%.3g", c.joules_per_token).c_str() : "-");
  }
  return out;
}

std::string explain_winner(const PlanInput& in, const Prediction& w, const Prediction* runner,
                           Objective o) {
  const Strategy& s = w.strategy;
  const model::ModelSpec& m = in.model;
  std::string out = "Why " + strategy_string(s) + ":\n";
  out += fmt("  Layout: %d devices = %d data-parallel x %d tensor x %d pipeline",
             in.cluster.num_devices(), s.dp, s.tp, s.pp);
  if (s.cp > 1) out += fmt(" x %d context", s.cp);
  if (m.is_moe())
    out += fmt("; experts over %d-rank groups (%s of %d experts per rank)", s.ep,
               model::experts_per_rank(m.num_local_experts, s.ep).c_str(), m.num_local_experts);
  out += fmt(". %d micro-batches of %d per step", s.micro_batches(), s.mbs);
  if (s.pp > 1) {
    out += ", stage layers ";
    for (size_t i = 0; i < w.stages.size(); ++i) {
      int n = 0;
      for (const auto& [a, b] : w.stages[i].layers) n += b - a + 1;
      out += fmt("%s%d", i ? "/" : "", n);
    }
    if (s.vpp > 1) out += fmt(" in %d interleaved chunks each", s.vpp);
  }
  out += ".\n";
  out += fmt("  Step %.3f s, %s tokens/s, MFU %.1f%%: %s.\n", w.step_time_s,
             si(w.tokens_per_s).c_str(), 100 * w.mfu, time_shares(w).c_str());
  const Part top = losses(w.time).front();
  out += fmt("  What limits it: %s (%.0f%% of the step): ", top.name, 100 * top.s / w.step_time_s) +
         cause(in, w, top.name) + ".\n";
  out +=
      fmt("  Memory: %s of %s per device (%.0f%%), peak on stage %d; goodput %.1f%% with a "
          "checkpoint every %.0f min.\n",
          format_bytes(w.memory_peak_bytes).c_str(), format_bytes(w.memory_limit_bytes).c_str(),
          100 * w.memory_peak_bytes / w.memory_limit_bytes,
          static_cast<int>(std::max_element(w.stages.begin(), w.stages.end(),
                                            [](const StageReport& a, const StageReport& b) {
                                              return a.total_bytes < b.total_bytes;
                                            }) -
                           w.stages.begin()),
          100 * w.goodput.ratio, w.goodput.interval_s / 60);

  // Neighbours: the memory-for-speed trades one step away.
  std::vector<std::pair<std::string, Strategy>> near;
  if (s.recompute != Recompute::kNone) {
    Strategy n = s;
    // Full recomputation's neighbour is the selective mode; the partial modes' is none.
    n.recompute = s.recompute == Recompute::kFull ? Recompute::kSelective : Recompute::kNone;
    n.recompute_every = 1;
    near.push_back({"recompute=" + std::string(recompute_name(n.recompute)), n});
  }
  if (s.zero > 0) {
    Strategy n = s;
    n.zero = s.zero - 1;
    near.push_back({fmt("zero=%d", n.zero), n});
  }
  if (s.gbs % (s.dp * s.mbs * 2) == 0) {
    Strategy n = s;
    n.mbs = 2 * s.mbs;
    if (n.vpp == 1 || n.micro_batches() % n.pp == 0) near.push_back({fmt("mbs=%d", n.mbs), n});
  }
  for (const auto& [label, n] : near) {
    auto p = predict(in, n, Fidelity::kExact);
    if (!p.ok()) continue;
    const double gain = 100 * (p->tokens_per_s / w.tokens_per_s - 1);
    if (!p->fits) {
      out += fmt("  %s would be %+.1f%% in throughput but needs %s, over the %s limit.\n",
                 label.c_str(), gain, format_bytes(p->memory_peak_bytes).c_str(),
                 format_bytes(w.memory_limit_bytes).c_str());
    } else {
      out += fmt("  %s fits (%s) but is %+.1f%% in throughput%s.\n", label.c_str(),
                 format_bytes(p->memory_peak_bytes).c_str(), gain,
                 gain > 0 ? ", excluded by another constraint" : "");
    }
  }

  if (runner && o != Objective::kThroughput) {
    out +=
        fmt("  Runner-up %s ranks below it on %s: %.4g against %.4g.\n",
            strategy_string(runner->strategy).c_str(), std::string(objective_quantity(o)).c_str(),
            objective_value(o, figures_of(in, *runner)), objective_value(o, figures_of(in, w)));
  } else if (runner) {
    const TimeBreakdown &a = w.time, &b = runner->time;
    std::vector<Part> delta = {{"GEMM time", b.gemm_s - a.gemm_s},
                               {"memory-bound kernels", b.stream_s - a.stream_s},
                               {"recomputation", b.recompute_s - a.recompute_s},
                               {"tensor-parallel communication", b.tp_comm_s - a.tp_comm_s},
                               {"expert all-to-all", b.ep_comm_s - a.ep_comm_s},
                               {"context-parallel ring", b.cp_comm_s - a.cp_comm_s},
                               {"pipeline send/recv", b.p2p_s - a.p2p_s},
                               {"gradient reduction", b.dp_comm_s - a.dp_comm_s},
                               {"pipeline bubble", b.bubble_s - a.bubble_s},
                               {"optimizer step", b.optimizer_s - a.optimizer_s}};
    std::sort(delta.begin(), delta.end(), [](const Part& x, const Part& y) { return x.s > y.s; });
    out += fmt("  Runner-up %s is %.2f%% slower: its %s costs %.3f s more per step",
               strategy_string(runner->strategy).c_str(),
               100 * (w.tokens_per_s / runner->tokens_per_s - 1), delta[0].name, delta[0].s);
    if (delta.back().s < 0)
      out +=
          fmt(", which its %s (%.3f s less) does not make up", delta.back().name, -delta.back().s);
    out += ".\n";
  }
  return out;
}


std::string model_summary(const PlanInput& in) {
  const model::ModelSpec& m = in.model;
  std::string out = m.name + ": " + std::string(model::family_name(m.family)) + ", " +
                    with_commas(std::llround(in.shape.total_params)) + " parameters";
  if (in.shape.mtp_params > 0)
    out += " + " + with_commas(std::llround(in.shape.mtp_params)) + " in " +
           std::to_string(m.num_nextn_predict_layers) +
           " multi-token prediction module(s), trained and priced";
  if (m.architecture == model::Architecture::kVit) return out;
  std::vector<std::string> parts;
  parts.push_back(m.mlp == model::MlpKind::kSwiGlu ? "SwiGLU" : "GeLU MLP");
  parts.push_back(m.norm == model::NormKind::kRmsNorm ? "RMSNorm" : "LayerNorm");
  std::string pos = m.positions == model::PositionKind::kRotary ? "rotary" : "learned positions";
  if (m.rope.scaling == model::RopeScaling::kLinear) pos += " (linear scaling)";
  if (m.rope.scaling == model::RopeScaling::kLlama3) pos += " (llama3 scaling)";
  if (m.rope.scaling == model::RopeScaling::kYarn) pos += " (yarn)";
  parts.push_back(pos);
  if (m.mla_enabled) {
    parts.push_back("latent attention (MLA), " + std::to_string(m.num_attention_heads) + " heads");
  } else {
    parts.push_back(std::to_string(m.num_attention_heads) + " heads / " +
                    std::to_string(m.num_key_value_heads) + " KV heads of " +
                    std::to_string(m.head_size()));
  }
  if (m.qk_norm) parts.push_back("QK-norm");
  if (m.window(0) > 0 || m.window(m.num_hidden_layers - 1) > 0)
    parts.push_back("sliding window " +
                    std::to_string(std::max(m.window(0), m.window(m.num_hidden_layers - 1))));
  parts.push_back(m.tie_word_embeddings ? "tied head" : "untied head");
  if (m.is_moe()) {
    std::string moe = std::to_string(m.num_moe_layers()) + " MoE layers of " +
                      std::to_string(m.num_local_experts) + " experts";
    if (m.has_shared_experts()) moe += " + " + std::to_string(m.num_shared_experts) + " shared";
    moe += ", " + std::to_string(m.num_experts_per_tok) + " per token";
    if (m.topk_method != model::TopkMethod::kGreedy)
      moe += " from at most " + std::to_string(m.topk_group) + " of " + std::to_string(m.n_group) +
             " groups";
    moe += m.routing == model::MoeRouting::kDropless ? ", dropless" : ", capacity-limited";
    parts.push_back(moe);
  }
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? "; " : ", ") + parts[i];
  const DeviceSpec& d = in.cluster.device;
  out += "; sequence " + std::to_string(m.seq_length) + "; attention " +
         std::string(attention_kernel_name(d.attention));
  if (d.attention == AttentionKernel::kFused && !d.fused_kernel.empty())
    out += " (" + d.fused_kernel + ")";
  if (!m.weight_storage.empty())
    out += "; released weights stored as " + m.weight_storage + ", planned at " +
           std::string(precision_name(in.cluster.device.precision));
  return out;
}

}  // namespace cann::plan
