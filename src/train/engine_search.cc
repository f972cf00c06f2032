// The planner's search over the engine's layouts for a run's flags (see engine_search.h).
#include "train/engine_search.h"

#include "plan/predict.h"

namespace cann::train {

StatusOr<plan::SearchResult> search_engine_layouts(const TrainConfig& config,
                                                   const model::ModelSpec& spec,
                                                   const plan::ClusterSpec& cluster,
                                                   bool elastic_nodes, int top_k) {
  const int seq = config.seq_len > 0 ? config.seq_len : spec.seq_length;
  CANN_ASSIGN_OR_RETURN(plan::PlanInput in, plan::make_plan_input(spec, cluster, 0));
  in.seq_len = seq;
  in.engine_buckets = plan::EngineBuckets::of_mib(config.bucket_mb);
  plan::SearchOptions opt;
  opt.global_batch = config.strategy.gbs > 0 ? config.strategy.gbs : config.batch_size;
  opt.engine_only = true;
  opt.engine.world = cluster.num_devices();
  opt.engine.seq_len = seq;
  opt.engine.compress = config.compress;
  opt.engine.elastic_nodes = elastic_nodes;
  opt.top_k = top_k;
  return plan::search(in, opt);
}

}  // namespace cann::train
