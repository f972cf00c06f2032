// RunLayout: how one run splits the model and the batch over its processes, resolved once from
// the flags, the model spec and the world size, before anything is allocated; every other
// part of the worker reads it and none re-derives it (torchtitan's ParallelDims).
//
// resolve_run_layout is pure: no processes, files or collectives, so every refusal `run` can
// give is unit-testable. It checks the strategy with plan::engine_supports, splits the global
// batch (gbs from the strategy, else --batch-size) over the data-parallel ranks, cuts each
// rank's share into micro-batches (--grad-accum, or the strategy's mbs, or under multi-node
// elastic the job's fixed micro-batch), picks the pipeline schedule, and prices the rank's
// memory with the planner's own engine-memory function (plan/engine_memory.h).
//
// Worked example: gbs=8 on dp=2 x tp=2 (4 processes), mbs=2: each data-parallel replica (its
// two tp ranks together) takes 4 sequences per step in 2 micro-steps of 2; rank 3 is tp 1 of
// data rank 1.
#pragma once

#include <string>

#include "core/status.h"
#include "model/spec.h"
#include "parallel/pipeline_schedule.h"
#include "plan/engine_memory.h"
#include "plan/engine_support.h"
#include "plan/strategy.h"
#include "train/config.h"

namespace cann::train {

// What an elastic agent tells a worker beyond its place in the world.
struct ElasticShape {
  bool on = false;      // a generation under --elastic
  bool nodes = false;   // multi-node elastic: a generation may change the world size
  int micro_batch = 0;  // multi-node: sequences per forward/backward, fixed for the job
};

struct RunLayout {
  // The strategy with everything derived filled in: dp (the data-parallel ranks), mbs (the
  // micro-batch) and gbs (the global batch).
  plan::Strategy strategy;
  int world = 1;
  int rank = 0;
  int seq_len = 0;
  int local_batch = 0;  // sequences per data-parallel rank per optimizer step
  int accum_steps = 1;  // micro-steps per optimizer step (a pipeline's micro-batches)
  // The data-parallel coordinates: the tp and cp ranks of one replica read one batch (each
  // cp rank keeps its positions of it).
  int data_rank = 0;
  int data_world = 1;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  // The planner's figure for this rank (total 0: the planner does not price this run), and
  // whether it is the whole of the engine's state (compressed reductions keep error buffers
  // the planner omits).
  plan::EngineMemory memory;
  bool memory_complete = false;

  int micro_batch() const { return strategy.mbs; }
  int global_batch() const { return strategy.gbs; }
  bool multi_process() const { return world > 1; }
  bool pipelined() const { return strategy.pp > 1; }
  // "--strategy tp=2,sp=on: ", the prefix of messages about the layout.
  std::string where() const;
};

StatusOr<RunLayout> resolve_run_layout(const TrainConfig& config, const model::ModelSpec& spec,
                                       int world, int rank, const ElasticShape& elastic = {});

// What the launcher checks before it starts `world` workers, so that a strategy that cannot
// run is reported once (not once per rank): engine_supports and the pipeline schedule. The
// batch is left to the workers (a multi-node elastic world changes size). `elastic_nodes`:
// --elastic across nodes, whose generations may change the world.
Status check_launch(const TrainConfig& config, const model::ModelSpec& spec, int world,
                    bool elastic_nodes);

// The schedule a pipelined run uses: --pipeline-schedule as given ("" or "auto": 1f1b, or
// interleaved with vpp > 1), checked against vpp and the M micro-batches per step (interleaved
// needs vpp > 1 and M a multiple of pp; gpipe and 1f1b need vpp = 1). `where` prefixes errors.
StatusOr<parallel::PipelineSchedule> resolve_pipeline_schedule(const std::string& flag,
                                                               const plan::Strategy& s,
                                                               int micro_batches,
                                                               const std::string& where);

// The layout's memory against what this machine has free (`available_bytes`, 0: unknown):
// refused, with the planner's figure, when it does not fit.
Status check_fits_in_memory(const RunLayout& layout, const model::ModelSpec& spec,
                            double available_bytes);
// MemAvailable of /proc/meminfo in bytes; 0 when unreadable.
double available_memory_bytes();

}  // namespace cann::train
