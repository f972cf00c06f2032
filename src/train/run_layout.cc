// A run's layout from its flags, model and world (see run_layout.h).
#include "train/run_layout.h"

#include <cstdio>

#include "core/log.h"
#include "train/expert_rebalance.h"

namespace cann::train {
namespace {

// The batch split of a layout whose strategy has passed engine_supports: fills local_batch,
// accum_steps and the strategy's mbs and gbs.
Status split_batch(const TrainConfig& config, const ElasticShape& elastic, RunLayout* l) {
  plan::Strategy& s = l->strategy;
  const int gbs = s.gbs != 0 ? s.gbs : config.batch_size;
  // An omitted mbs: a pipeline fills its stages with micro-batches of one sequence; otherwise
  // a rank takes its whole share at once, so its one backward hides the gradient reduction
  // (accumulation would leave only the last micro-step's backward to hide it behind).
  int mbs = s.mbs;
  if (mbs == 0 && s.pp > 1) mbs = 1;
  // Each data-parallel replica (its tp x cp x pp ranks together) takes gbs / dp sequences.
  if (gbs % l->data_world != 0)
    return InvalidArgument("global batch " + std::to_string(gbs) + " does not divide over " +
                           std::to_string(l->data_world) + " data-parallel ranks; hint: use a " +
                           "multiple of " + std::to_string(l->data_world));
  l->local_batch = gbs / l->data_world;
  int accum = config.grad_accum > 0 ? config.grad_accum : 1;
  // Multi-node elastic: the micro-batch of the largest world, whatever this generation's size
  // (8 sequences over 4 ranks: 2 per rank; on 2 ranks, 2 micro-steps of 2).
  if (config.grad_accum == 0 && mbs == 0 && elastic.micro_batch > 0 &&
      l->local_batch % elastic.micro_batch == 0)
    accum = l->local_batch / elastic.micro_batch;
  if (config.grad_accum == 0 && mbs > 0) {
    if (l->local_batch % mbs != 0)
      return InvalidArgument("--strategy mbs=" + std::to_string(mbs) + " does not divide the " +
                             std::to_string(l->local_batch) +
                             " sequences each rank takes per step");
    accum = l->local_batch / mbs;
  }
  if (l->local_batch % accum != 0)
    return InvalidArgument("--grad-accum " + std::to_string(accum) + " does not divide the " +
                           std::to_string(l->local_batch) +
                           " sequences each rank takes per step; hint: pick a divisor");
  const int micro = l->local_batch / accum;
  if (mbs > 0 && micro != mbs)
    return InvalidArgument("--grad-accum " + std::to_string(accum) + " gives micro-batches of " +
                           std::to_string(micro) +
                           ", but --strategy says mbs=" + std::to_string(mbs));
  l->accum_steps = accum;
  s.mbs = micro;
  s.gbs = gbs;
  return OkStatus();
}

// The micro-batches per step of a launch, as split_batch derives them (0 where the batch does
// not split, which the workers report).
int launch_micro_batches(const TrainConfig& config, const plan::Strategy& s, int dp) {
  const int gbs = s.gbs != 0 ? s.gbs : config.batch_size;
  if (gbs <= 0 || gbs % dp != 0) return 0;
  const int local = gbs / dp;
  if (config.grad_accum > 0) return config.grad_accum;
  // An omitted mbs is 1 under pipeline parallelism (as the trainer reads it).
  const int mbs = s.mbs > 0 ? s.mbs : (s.pp > 1 ? 1 : 0);
  if (mbs > 0) return local % mbs == 0 ? local / mbs : 0;
  return 1;
}

plan::EngineShape engine_shape(const TrainConfig& config, int world, bool elastic_nodes) {
  plan::EngineShape shape;
  shape.world = world;
  shape.seq_len = config.seq_len;
  shape.compress = config.compress;
  shape.elastic_nodes = elastic_nodes;
  return shape;
}

}  // namespace

std::string RunLayout::where() const {
  return "--strategy " + plan::strategy_brief(strategy) + ": ";
}

StatusOr<RunLayout> resolve_run_layout(const TrainConfig& config, const model::ModelSpec& spec,
                                       int world, int rank, const ElasticShape& elastic) {
  RunLayout l;
  l.world = world;
  l.rank = rank;
  l.strategy = config.strategy;
  const plan::EngineShape shape = engine_shape(config, world, elastic.nodes);
  CANN_RETURN_IF_ERROR(plan::engine_supports(config.strategy, spec, shape));
  CANN_RETURN_IF_ERROR(check_expert_rebalance(config, spec));
  l.seq_len = config.seq_len > 0 ? config.seq_len : spec.seq_length;
  plan::Strategy& s = l.strategy;
  s.dp = plan::engine_data_parallel(s, world);
  if (elastic.nodes && config.strategy.dp > 0 && config.strategy.dp != s.dp && rank == 0)
    log_info("--strategy dp=" + std::to_string(config.strategy.dp) + ": this generation has " +
             std::to_string(world) + " processes, so dp=" + std::to_string(s.dp) +
             " (across elastic nodes dp follows the world; the global batch stays)");
  l.data_world = s.dp;
  l.data_rank = rank / (s.tp * s.cp) % s.dp;
  CANN_RETURN_IF_ERROR(split_batch(config, elastic, &l));
  // The micro-batch is known now: the rules that depend on it (sp's token split).
  CANN_RETURN_IF_ERROR(plan::engine_supports(s, spec, shape));
  if (!config.dump_grads.empty() && !config.compress.none())
    return InvalidArgument("--dump-grads writes the full reduced gradient, which --compress " +
                           plan::compression_name(config.compress) +
                           " replaces; hint: dump under --compress none");
  if (!config.dump_grads.empty() && config.dump_grads_step > config.steps)
    return InvalidArgument("--dump-grads-step " + std::to_string(config.dump_grads_step) +
                           " is past --steps " + std::to_string(config.steps) +
                           "; hint: pick a step the run reaches");
  if ((config.grad_norms || config.halt_on_nan) && world > 1 && s.zero >= 2)
    return InvalidArgument(std::string(config.grad_norms ? "--grad-norms" : "--halt-on-nan") +
                           " reads each layer's gradients in the full gradient buffer, which "
                           "ZeRO stages 2 and 3 shard and release; hint: use zero=0 or 1");
  if (s.pp > 1) {
    CANN_ASSIGN_OR_RETURN(l.schedule, resolve_pipeline_schedule(config.pipeline_schedule, s,
                                                                l.accum_steps, l.where()));
  }
  // The planner's figure for this rank (plan/engine_memory.h): its fp32 engine on a cluster
  // of exactly these processes. Compressed reductions keep error buffers it does not price.
  auto memory = plan::predict_engine_memory(spec, s, s.mbs, l.seq_len,
                                            plan::EngineBuckets::of_mib(config.bucket_mb),
                                            config.expert_rebalance.replicas);
  if (memory.ok()) l.memory = *memory;
  l.memory_complete = memory.ok() && !config.compress.two_stage();
  return l;
}

Status check_launch(const TrainConfig& config, const model::ModelSpec& spec, int world,
                    bool elastic_nodes) {
  const plan::Strategy& s = config.strategy;
  CANN_RETURN_IF_ERROR(plan::engine_supports(s, spec, engine_shape(config, world, elastic_nodes)));
  CANN_RETURN_IF_ERROR(check_expert_rebalance(config, spec));
  if (s.pp == 1) return OkStatus();
  // An M that cannot be derived here passes as pp: the workers report the batch itself.
  const int M = launch_micro_batches(config, s, plan::engine_data_parallel(s, world));
  return resolve_pipeline_schedule(config.pipeline_schedule, s, M > 0 ? M : s.pp,
                                   "--strategy " + plan::strategy_brief(s) + ": ")
      .status();
}

StatusOr<parallel::PipelineSchedule> resolve_pipeline_schedule(const std::string& flag,
                                                               const plan::Strategy& s,
                                                               int micro_batches,
                                                               const std::string& where) {
  const bool interleave = s.vpp > 1;
  parallel::PipelineSchedule sched =
      interleave ? parallel::PipelineSchedule::kInterleaved : parallel::PipelineSchedule::k1F1B;
  if (!flag.empty() && flag != "auto") {
    CANN_ASSIGN_OR_RETURN(sched, parallel::parse_pipeline_schedule(flag));
  }
  const std::string name = parallel::pipeline_schedule_name(sched);
  if (interleave && sched != parallel::PipelineSchedule::kInterleaved)
    return InvalidArgument(where + "--pipeline-schedule " + name +
                           " with vpp=" + std::to_string(s.vpp) +
                           ": vpp > 1 runs the interleaved schedule; hint: drop "
                           "--pipeline-schedule or use vpp=1");
  if (!interleave && sched == parallel::PipelineSchedule::kInterleaved)
    return InvalidArgument(where +
                           "--pipeline-schedule interleaved needs model chunks to "
                           "interleave; hint: add vpp=2 (or more) to --strategy");
  if (interleave && micro_batches % s.pp != 0)
    return InvalidArgument(where + "vpp=" + std::to_string(s.vpp) + " runs " +
                           std::to_string(micro_batches) + " micro-batches per step, not a " +
                           "multiple of pp=" + std::to_string(s.pp) +
                           " (interleaved 1F1B runs them in groups of pp); hint: pick gbs, mbs "
                           "or --grad-accum so that the micro-batches per step divide by " +
                           std::to_string(s.pp));
  return sched;
}

Status check_fits_in_memory(const RunLayout& layout, const model::ModelSpec& spec,
                            double available_bytes) {
  const double need = layout.memory.total;
  if (available_bytes <= 0 || need <= available_bytes) return OkStatus();
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "needs about %.1f GB (parameters, gradients, AdamW state "
                "and activations) but this machine has %.1f GB available",
                need / 1e9, available_bytes / 1e9);
  return InvalidArgument("model '" + spec.name + "' with micro-batch " +
                         std::to_string(layout.micro_batch()) + " x " +
                         std::to_string(layout.seq_len) + " per process " + buf +
                         "; hint: lower --batch-size or --seq-len, pick a smaller model, or "
                         "plan a split with `cann-train search`");
}

double available_memory_bytes() {
  long long avail_kb = 0;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &avail_kb) == 1) break;
    std::fclose(f);
  }
  return static_cast<double>(avail_kb) * 1024.0;
}

}  // namespace cann::train
