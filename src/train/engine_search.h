// The planner's search over the layouts this engine trains, for a run's flags: what `run
// --strategy auto` picks from (cli/auto_strategy.h) and what a multi-node elastic job falls back
// on where its launch split does not fit a world size (elastic_layouts.h).
#pragma once

#include "core/status.h"
#include "model/spec.h"
#include "plan/cluster.h"
#include "plan/search.h"
#include "train/config.h"

namespace cann::train {

// plan::search, engine-only, over every device of `cluster`: the run's global batch (the
// strategy's gbs, else --batch-size), sequence length, gradient buckets and compression, the
// world free to change when `elastic_nodes`; `top_k` candidates priced in full.
StatusOr<plan::SearchResult> search_engine_layouts(const TrainConfig& config,
                                                   const model::ModelSpec& spec,
                                                   const plan::ClusterSpec& cluster,
                                                   bool elastic_nodes, int top_k);

}  // namespace cann::train
