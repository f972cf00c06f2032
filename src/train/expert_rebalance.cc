#include "train/expert_rebalance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/check.h"
#include "core/int_items.h"
#include "plan/cluster.h"
#include "plan/comm_model.h"
#include "plan/gemm_model.h"

namespace cann::train {

StatusOr<ExpertRebalance> parse_expert_rebalance(const std::string& text) {
  ExpertRebalance out;
  auto bad = [&](const std::string& why) {
    return InvalidArgument(
        "--expert-rebalance '" + text + "': " + why +
        "; hint: --expert-rebalance every=K[,cooldown=C][,replicas=R], e.g. every=20");
  };
  auto items = parse_int_items(text);
  if (!items.ok()) return bad(items.status().message());
  bool every = false;
  for (const IntItem& item : *items) {
    if (item.key == "every") {
      if (item.value < 1) return bad("every must be at least 1");
      out.every = static_cast<int>(item.value);
      every = true;
    } else if (item.key == "cooldown") {
      if (item.value < 0) return bad("cooldown must not be negative");
      out.cooldown = static_cast<int>(item.value);
    } else if (item.key == "replicas") {
      if (item.value < 0) return bad("replicas must not be negative");
      out.replicas = static_cast<int>(item.value);
    } else {
      return bad("unknown key '" + item.key + "'");
    }
  }
  if (!every) return bad("every=K is required");
  return out;
}

Status check_expert_rebalance(const TrainConfig& config, const model::ModelSpec& spec) {
  if (config.expert_rebalance.every == 0) return OkStatus();
  const std::string flag = "--expert-rebalance: ";
  if (!spec.is_moe())
    return InvalidArgument(flag + "model '" + spec.name +
                           "' has no experts; hint: drop the flag or train a MoE model");
  if (config.strategy.ep <= 1)
    return InvalidArgument(flag + "experts move between expert-parallel ranks, and --strategy " +
                           plan::strategy_brief(config.strategy) +
                           " has ep=1; hint: add ep=2 (or more) to --strategy");
  if (!config.compress.none())
    return InvalidArgument(flag + "--compress " + plan::compression_name(config.compress) +
                           " keeps error-feedback state per rank that a move would leave "
                           "behind; hint: use --compress none");
  const int R = config.expert_rebalance.replicas;
  if (R > 0) {
    const std::string with = flag + "replicas=" + std::to_string(R);
    if (R >= spec.num_local_experts)
      return InvalidArgument(with + ": a layer has " + std::to_string(spec.num_local_experts) +
                             " experts, and replicating all of them is data parallelism; hint: "
                             "replicas=1 to " +
                             std::to_string(spec.num_local_experts - 1));
    if (config.strategy.zero == 3)
      return InvalidArgument(with +
                             ": the copies are read from the owners' weights, which "
                             "ZeRO-3 does not keep whole; hint: zero=2 or lower");
  }
  return OkStatus();
}

ExpertRebalancer::ExpertRebalancer(const ExpertRebalance& config, const model::ModelSpec& spec,
                                   const RunLayout& layout)
    : config_(config), spec_(spec), ep_(layout.strategy.ep), micro_(layout.accum_steps) {
  CANN_CHECK(config_.every > 0 && config_.cluster != nullptr && ep_ > 1)
      << "expert rebalancing needs every > 0, a cluster spec and ep > 1";
  // Each expert group (ep ranks of the data-parallel ones, per context-parallel rank) computes
  // the rows of its own tokens; the world's sum counts every group's.
  groups_ = static_cast<double>(layout.strategy.dp / ep_) * layout.strategy.cp;
  window_.assign(static_cast<size_t>(spec.num_hidden_layers) * spec.num_local_experts, 0.0f);
}

void ExpertRebalancer::add(const std::vector<float>& layer_load) {
  CANN_CHECK(layer_load.size() == window_.size()) << "expert load of another model";
  for (size_t i = 0; i < window_.size(); ++i) window_[i] += layer_load[i];
  ++steps_;
}

double ExpertRebalancer::first_width() const {
  const double FM = spec_.moe_intermediate_size;
  return spec_.mlp == model::MlpKind::kSwiGlu ? 2 * FM : FM;
}

double ExpertRebalancer::expert_seconds(double rows) const {
  if (rows <= 0) return 0;
  const plan::DeviceSpec& d = config_.cluster->device;
  const double C = spec_.hidden_size, FM = spec_.moe_intermediate_size, FC = first_width();
  // Forward: x (rows, C) into (rows, FC), then (rows, FM) back to C. Backward: the input's and
  // the weight's gradient of each, the same GEMMs again twice.
  return 3 * (plan::gemm_seconds(d, rows, FC, C) + plan::gemm_seconds(d, rows, C, FM));
}

double ExpertRebalancer::all_to_all_seconds(const std::vector<double>& load,
                                            const model::ExpertSlots& at) const {
  const std::vector<double> held = model::rank_loads(load, at, ep_);
  double total = 0;
  for (double l : held) total += l;
  double busiest = 0;
  for (double h : held) busiest = std::max({busiest, h * (ep_ - 1) / ep_, (total - h) / ep_});
  // Rows of C floats, each way in forward (the input out, the output back) and in backward.
  const double bytes = 4.0 * busiest * spec_.hidden_size * sizeof(float);
  const plan::ClusterSpec& c = *config_.cluster;
  return plan::p2p_seconds(c, bytes, ep_ > c.devices_per_node);
}

double ExpertRebalancer::expert_bytes() const {
  const double C = spec_.hidden_size, FM = spec_.moe_intermediate_size, FC = first_width();
  return (FC * C + C * FM + (spec_.mlp_bias ? FC + C : 0)) * sizeof(float);
}

ExpertRebalancer::Priced ExpertRebalancer::price(const std::vector<double>& load,
                                                 const model::ExpertSlots& at,
                                                 const std::vector<int>& copies) const {
  // The replicated experts' rows stay on their tokens' ranks: an equal share on each. The
  // others' rows go to the ranks holding them.
  std::vector<double> routed = load;
  double shared = 0;
  for (const int h : copies) {
    shared += load[static_cast<size_t>(h)] / ep_;
    routed[static_cast<size_t>(h)] = 0;
  }
  const std::vector<double> ranks = model::rank_loads(routed, at, ep_);
  Priced p;
  p.max = shared + *std::max_element(ranks.begin(), ranks.end());
  p.step_s = expert_seconds(p.max) + all_to_all_seconds(routed, at);
  if (copies.empty()) return p;
  // Each owner sends its copies' weights to the ep - 1 others once a step and receives their
  // gradients after every micro-batch: the busiest owner's link carries that much each way.
  const std::vector<int> slot = model::slot_of(at);
  const size_t El = at.size() / static_cast<size_t>(ep_);
  std::vector<int> owned(static_cast<size_t>(ep_), 0);
  for (const int h : copies) ++owned[static_cast<size_t>(slot[h]) / El];
  const double busiest = *std::max_element(owned.begin(), owned.end());
  const plan::ClusterSpec& c = *config_.cluster;
  p.step_s += plan::p2p_seconds(c, busiest * (ep_ - 1) * expert_bytes() * (1 + micro_),
                                ep_ > c.devices_per_node);
  return p;
}

ExpertMove ExpertRebalancer::decide(const std::map<int, model::ExpertSlots>& now,
                                    const std::map<int, std::vector<int>>& replicated) {
  ExpertMove out;
  const int steps = steps_;
  std::vector<float> load_sum = window_;
  std::fill(window_.begin(), window_.end(), 0.0f);
  steps_ = 0;
  if (steps == 0) return out;
  if (cooling_ > 0) {
    --cooling_;
    return out;
  }
  const int E = spec_.num_local_experts;
  // What one expert's move ships: its weights and biases, in the parameters and both moments.
  const double per_expert = expert_bytes() * 3;
  const plan::ClusterSpec& cluster = *config_.cluster;
  const bool inter_node = ep_ > cluster.devices_per_node;
  for (const auto& [layer, slots] : now) {
    std::vector<double> load(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e)
      load[e] = load_sum[static_cast<size_t>(layer) * E + e] / (steps * groups_);
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / ep_;
    if (mean <= 0) continue;
    const auto held_at = replicated.find(layer);
    const std::vector<int> held =
        held_at == replicated.end() ? std::vector<int>{} : held_at->second;
    const Priced before = price(load, slots, held);
    // The hottest experts first: candidate k replicates the first k.
    std::vector<int> hottest(static_cast<size_t>(E));
    std::iota(hottest.begin(), hottest.end(), 0);
    std::stable_sort(hottest.begin(), hottest.end(),
                     [&](int a, int b) { return load[a] > load[b]; });
    double best_gain = 0;
    LayerMove best;
    model::ExpertSlots best_to;
    std::vector<int> best_copies;
    for (int k = 0; k <= std::min(config_.replicas, E - 1); ++k) {
      std::vector<int> copies(hottest.begin(), hottest.begin() + k);
      std::sort(copies.begin(), copies.end());
      std::vector<double> routed = load;
      for (const int h : copies) routed[static_cast<size_t>(h)] = 0;
      model::ExpertSlots to = model::balanced_slots(routed, slots, ep_);
      const int moved = model::experts_moved(slots, to, ep_);
      if (moved == 0 && copies == held) continue;
      const Priced after = price(load, to, copies);
      // The busiest rank's share of the move: experts it sends or receives, whichever is more
      // (the link carries both ways at once).
      const double cost = plan::p2p_seconds(
          cluster, model::busiest_rank_moves(slots, to, ep_) * per_expert, inter_node);
      const double saved = before.step_s - after.step_s;
      const double gain = saved * config_.every - cost;
      if (gain <= best_gain) continue;
      best_gain = gain;
      best = {layer,
              moved,
              before.max / mean,
              after.max / mean,
              saved,
              cost,
              static_cast<int>(copies.size())};
      best_to = std::move(to);
      best_copies = std::move(copies);
    }
    if (best_gain <= 0) continue;
    if (best.experts > 0) out.to[layer] = std::move(best_to);
    if (best_copies != held) out.replicate[layer] = std::move(best_copies);
    out.layers.push_back(best);
  }
  if (!out.layers.empty()) cooling_ = config_.cooldown;
  return out;
}

std::string describe_moves(const std::vector<LayerMove>& layers) {
  int experts = 0, replicated = 0;
  double before = 0, after = 0, saved = 0, cost = 0;
  std::string names;
  for (const LayerMove& m : layers) {
    experts += m.experts;
    before = std::max(before, m.before);
    after = std::max(after, m.after);
    saved += m.saved_s;
    cost += m.cost_s;
    names += (names.empty() ? "" : ", ") + std::to_string(m.layer);
    replicated += m.replicated;
  }
  const std::string copies =
      replicated > 0 ? ", " + std::to_string(replicated) + " replicated on every rank" : "";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%d expert(s) of layer(s) %s moved%s: max/mean rank load %.2f -> %.2f, %.3g ms "
                "less per step on the busiest ranks and links, the move %.3g ms",
                experts, names.c_str(), copies.c_str(), before, after, 1e3 * saved, 1e3 * cost);
  return buf;
}

constexpr int kMoveFields = 7;

std::vector<float> pack_moves(const std::vector<LayerMove>& layers, int num_layers) {
  std::vector<float> out(static_cast<size_t>(num_layers) * kMoveFields, 0.0f);
  for (const LayerMove& m : layers) {
    float* f = out.data() + static_cast<size_t>(m.layer) * kMoveFields;
    f[0] = 1.0f;
    f[1] = static_cast<float>(m.experts);
    f[2] = static_cast<float>(m.before);
    f[3] = static_cast<float>(m.after);
    f[4] = static_cast<float>(m.saved_s);
    f[5] = static_cast<float>(m.cost_s);
    f[6] = static_cast<float>(m.replicated);
  }
  return out;
}

std::vector<LayerMove> unpack_moves(const std::vector<float>& packed) {
  std::vector<LayerMove> out;
  for (size_t l = 0; l < packed.size() / kMoveFields; ++l) {
    const float* f = packed.data() + l * kMoveFields;
    if (f[0] == 0.0f) continue;
    out.push_back({static_cast<int>(l), static_cast<int>(std::lround(f[1])), f[2], f[3], f[4], f[5],
                   static_cast<int>(std::lround(f[6]))});
  }
  return out;
}

}  // namespace cann::train
