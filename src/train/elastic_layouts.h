// Multi-node elastic under model parallelism: the layout each possible world size trains.
//
// A generation across elastic nodes may change the world size (a node lost, one admitted,
// `cann-train scale`), and a model-parallel layout rarely fits every size as it is. At launch
// every agent plans, for each node count its --nnodes range allows, the layout a generation of
// that size trains:
//   1. the launch's split (tp, pp, cp, ep, vpp, sp, ZeRO, recomputation), dp following the
//      world, where that world admits it by every rule `run` checks (resolve_run_layout): the
//      user chose it, and it stands wherever it can;
//   2. else, under expert parallelism, the same split with its experts spread over as many
//      expert-parallel ranks as the world's data-parallel ranks allow (ep lowered to the
//      largest value that divides them, not necessarily the expert count: 8 experts over 3
//      ranks hold 3, 3 and 2, model/expert_placement.h), the lost ranks' experts restored
//      onto the survivors from the whole snapshot;
//   3. else the planner's fastest layout the engine trains on that many devices of the
//      machine's calibrated spec (plan::search, engine-only, the same global batch), the first
//      of its top candidates that fits and passes the same rules;
//   4. else none: the leader never forms a generation of that size.
// The micro-batch is the launch's (its mbs; a pipeline's 1), else the one of the largest world
// (global batch / its dp), so a smaller world keeps the global batch by accumulating.
//
// The leader writes the chosen layout into the generation's membership record; the workers
// train it (CANN_TRAIN_STRATEGY) and restore the committed step, which under model parallelism
// across nodes is kept whole (state_keeper.h), resharded onto the new layout by slicing.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "train/config.h"

namespace cann::train {

struct ElasticLayouts {
  std::map<int, std::string> layouts;  // node count -> canonical strategy string
  std::vector<std::string> lines;      // one per node count: what it trains and why
};

// `cluster(nodes)`: the spec the planner prices `nodes` nodes on (asked only when the launch's
// split does not fit some count; its node count and devices per node are set here). An error
// from it leaves that count without a layout (its line says why).
ElasticLayouts plan_elastic_layouts(
    const TrainConfig& config, const model::ModelSpec& spec, int nproc_per_node, int min_nodes,
    int max_nodes, const std::function<StatusOr<plan::ClusterSpec>(int nodes)>& cluster);

}  // namespace cann::train
