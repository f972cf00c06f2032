// Load-aware expert placement (`run --expert-rebalance every=K[,cooldown=C][,replicas=R]`). Under
// expert parallelism each rank computes the rows routed to the experts it holds, so a router that
// favours a few experts leaves the ranks holding them busy while the others wait in the
// all-to-all. Every K steps the measured load of each MoE layer's experts (the routing of all
// ranks over those K steps) gives a balanced placement (model/expert_placement.h); a layer's
// experts move when what the placement saves per step over the next K steps (the busiest rank's
// expert compute, and the busiest link's share of the layer's all-to-alls, which carries the
// rows of the experts its rank holds) exceeds the time to ship the moved experts' parameters
// and moments, all priced by the planner's GEMM and link models on the calibrated spec of this
// machine. With replicas=R a layer may also give up to R of its hottest experts a copy on every
// rank of the expert group (model/moe_layer.h, MoeShadows), priced with the copies' per-step
// traffic. After a change the next `cooldown` decisions keep the placement. Moving changes
// which rank computes an expert, not what is computed: the loss curve is the one without
// rebalancing (with copies, up to the order of float additions in their gradients' sum).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/expert_placement.h"
#include "model/spec.h"
#include "train/config.h"
#include "train/run_layout.h"

namespace cann::train {

// What --expert-rebalance needs of a run: a MoE model, expert parallelism (ep > 1), and an
// optimizer whose whole state moves with the experts (its moments: not under --compress,
// whose error feedback stays where it is). Under --elastic a rank's snapshot records where its
// experts were (train_state.h, expert_slots_member).
Status check_expert_rebalance(const TrainConfig& config, const model::ModelSpec& spec);

// What moving one layer's experts does, as priced when it was decided.
struct LayerMove {
  int layer = 0;
  int experts = 0;     // experts that change rank
  double before = 0;   // max/mean rank load of the window, in the old placement
  double after = 0;    // and in the new one
  double saved_s = 0;  // predicted time saved per step: busiest rank's compute, busiest link
  double cost_s = 0;   // predicted time to move them
  int replicated = 0;  // experts with a copy on every rank afterwards (replicas=R)
};

struct ExpertMove {
  std::map<int, model::ExpertSlots> to;  // this stage's moved layers -> their new slots
  // This stage's layers whose replicated experts change -> the new ones (maybe none).
  std::map<int, std::vector<int>> replicate;
  std::vector<LayerMove> layers;  // what moved (after tell_all: on every stage)
};

// One line for the event log and the dashboard, over all `layers`.
std::string describe_moves(const std::vector<LayerMove>& layers);
// The moves as floats, num_layers x 6 (zero where a layer did not move), and back: summed over
// the world with one rank per stage contributing, every rank learns every stage's moves.
std::vector<float> pack_moves(const std::vector<LayerMove>& layers, int num_layers);
std::vector<LayerMove> unpack_moves(const std::vector<float>& packed);

class ExpertRebalancer {
 public:
  ExpertRebalancer(const ExpertRebalance& config, const model::ModelSpec& spec,
                   const RunLayout& layout);

  // Whether `done` (steps completed) ends a window: the caller sums the window's load over
  // the world and asks decide().
  bool due(int done) const { return done % config_.every == 0; }
  // Adds one step's routed rows per (model layer, expert) of this rank (layer-major).
  void add(const std::vector<float>& layer_load);
  // The window's load on this rank, to be summed over the world in place, then cleared.
  std::vector<float>& window() { return window_; }
  // From the window's load summed over the world (counted once per tensor-parallel group) and
  // the current placement of each MoE layer this stage holds (and its replicated experts): the
  // layers worth changing, or none. With replicas=R each layer's candidates are its k hottest
  // experts replicated (k = 0..R) and the others balanced; a copy costs, every step, its
  // owner's sends of the weights to every rank and the gradients back after each micro-batch.
  // The same on every rank given the same sums.
  ExpertMove decide(const std::map<int, model::ExpertSlots>& now,
                    const std::map<int, std::vector<int>>& replicated = {});

 private:
  // Width of an expert's first matrix: SwiGLU's gate and up halves, or the GeLU MLP's.
  double first_width() const;
  // Expert compute (forward and backward GEMMs) of `rows` routed rows on one rank.
  double expert_seconds(double rows) const;
  // The layer's four all-to-alls on its busiest link under a placement, each source sending
  // every expert an equal share of the expert's rows: a rank receives (ep-1)/ep of its
  // experts' rows and sends 1/ep of everyone else's.
  double all_to_all_seconds(const std::vector<double>& load, const model::ExpertSlots& at) const;
  // A layer's placement with its replicated experts `copies`, priced per step: the busiest
  // rank's rows (max) and its expert compute, all-to-alls and copies' traffic (step_s).
  struct Priced {
    double max = 0, step_s = 0;
  };
  Priced price(const std::vector<double>& load, const model::ExpertSlots& at,
               const std::vector<int>& copies) const;
  // One expert's weights and biases, bytes.
  double expert_bytes() const;

  ExpertRebalance config_;
  model::ModelSpec spec_;
  int ep_ = 1;
  int micro_ = 1;      // micro-batches per step: the copies' gradients travel after each
  double groups_ = 1;  // expert groups whose tokens the world's load counts
  std::vector<float> window_;
  int steps_ = 0;    // steps in the window
  int cooling_ = 0;  // decisions left that keep the placement
};

}  // namespace cann::train
