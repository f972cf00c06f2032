// Trainer: the worker's training loop, a short list of calls to collaborators that own their
// state (torchtitan's Trainer):
//
//   RunLayout       how the run splits the model and the batch (resolve_run_layout: pure);
//   ModelParts      this rank's model, its mesh and pipeline, and the passes that run them;
//   StepOptimizer   zero, reduce, update: LocalOptimizer on one process, DataParallelEngine
//                   over a data-parallel group;
//   BatchSource     the sampler, BERT's masking and the evaluation windows;
//   StateKeeper     checkpoints, in-memory snapshots, heartbeats, events and every restore;
//   StepReporter    the progress line, step log, TensorBoard and monitoring;
//   StallBeacon     the flight-recorder beacon and the hang analysis after a failed collective.
//
// One step: the optimizer clears the gradients, ModelParts runs the micro-batches forward and
// backward (the optimizer reducing during the backwards that must), the ranks agree on the
// losses, the stop request and the non-finite flag, the optimizer steps, then the step is
// reported, evaluated, snapshotted and checkpointed as configured. SIGINT/SIGTERM (or POST
// /api/stop) finish the current step, write a checkpoint when a checkpoint directory is set,
// and stop. Under --elastic a survivor of a lost peer rejoins the next generation and trains
// on (trainer_rejoin.cc).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/store.h"
#include "core/status.h"
#include "core/threads.h"
#include "model/spec.h"
#include "optim/lr_schedule.h"
#include "train/batch_source.h"
#include "train/callbacks.h"
#include "train/config.h"
#include "train/distributed.h"
#include "train/grad_watch.h"
#include "train/model_parts.h"
#include "train/run_layout.h"
#include "train/stall_beacon.h"
#include "train/state_keeper.h"
#include "train/step_optimizer.h"
#include "train/step_profiler.h"
#include "train/step_reporter.h"

namespace cann::train {

struct RunSummary {
  int first_step = 0;  // step the run started from (non-zero after --resume)
  int last_step = 0;   // steps completed when the run ended
  double first_loss = 0.0;
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1: never evaluated
  bool interrupted = false;     // stopped by a signal
  std::vector<double> step_times_s;  // this run's steps, in order
  std::map<std::string, double> efficiency;  // EfficiencyMeter::summary of this rank
};

class Trainer {
 public:
  ~Trainer();
  // env == nullptr: a plain single process.
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainConfig& config,
                                                   const DistEnv* env = nullptr,
                                                   const CommConfig& comm = {});
  Status run(RunSummary* summary);
  // Calls from the training loop (train/callbacks.h); set before run().
  void set_callbacks(TrainCallbacks callbacks) { callbacks_ = std::move(callbacks); }

  const model::Model& model() const { return parts_->model(); }

 private:
  explicit Trainer(TrainConfig config) : config_(config), launch_config_(std::move(config)) {}
  Status setup(const DistEnv* env, const CommConfig& comm);
  // The collaborators that depend on the world group (built again after a rejoin).
  // --init-from: every rank reads the directory and keeps its part (before the optimizer
  // adopts the parameters). --export-hf: a collective under model parallelism; rank 0 writes.
  void bind_state();
  // --grad-norms / --halt-on-nan: the watch over this rank's gradient table.
  void watch_grads();
  bool leader() const { return layout_.rank == 0; }
  Status train_steps(RunSummary* summary);
  // One step's losses, stop request and non-finite flag agreed over the world (a collective
  // in a multi-process run); MoE expert counts ride along.
  Status agree_on_step(StepCompute* c, bool* stop, bool* grads_bad);
  StatusOr<double> evaluate();
  Status finish_run(RunSummary* summary, bool show);
  // Averages over the world in place (no-op on one process).
  Status average_over_ranks(float* values, size_t count, const char* what);
  // Wraps a collective's failure with the rank and the hang analysis, and remembers it.
  Status comm_failure(const Status& s);
  // Some rank's gradients went non-finite at `step`: log, event, and with --halt-on-nan stop.
  Status report_nonfinite(int step);
  void report_expert_move(const ExpertMove& move, int done);
  // --profile: writes the traces (a collective when several ranks run).
  Status finish_profile();
  // Elastic (trainer_rejoin.cc): whether a failure can be survived by rejoining (a collective
  // failed under --elastic), and the rejoin: wait for the next generation, rebuild the world
  // group, the model parts (under model parallelism: the mesh) and the optimizer under its key
  // prefix, and load the committed step.
  bool rejoinable() const;
  static bool stop_signalled();  // SIGINT/SIGTERM arrived
  Status rejoin(const Status& cause);
  // Across elastic nodes the next generation may have another world size, rank and layout:
  // a survivor keeps its process but builds the run again from the launch's flags, as a fresh
  // worker of that generation would (teardown, then setup), and restores the committed step.
  bool node_rejoinable() const;
  // `why`: the failure (or the graceful stop) that ended the generation; an error that stops
  // the rejoin carries `code`.
  Status rejoin_nodes(const std::string& why, StatusCode code);
  // Everything built on the world group (the beacon stopped, the state keeper unbound, the
  // optimizer, the model parts unless `keep_model`, the group itself), and everything setup
  // built, in the reverse order.
  void drop_world(bool keep_model);
  void teardown();

  TrainConfig config_;
  TrainConfig launch_config_;  // as given, before a generation's layout replaced the strategy
  model::ModelSpec spec_;
  RunLayout layout_;
  std::unique_ptr<DistEnv> env_;  // a copy of the launcher's environment (multi-process)
  CommConfig comm_;
  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<comm::Group> world_;  // multi-process
  std::unique_ptr<StallBeacon> beacon_;
  std::unique_ptr<ModelParts> parts_;
  std::unique_ptr<StepOptimizer> opt_;
  std::unique_ptr<BatchSource> batches_;
  optim::LrSchedule schedule_;
  std::unique_ptr<StateKeeper> keeper_;
  std::unique_ptr<StepReporter> reporter_;
  std::unique_ptr<StepProfiler> profiler_;  // --profile only
  std::unique_ptr<GradWatch> grad_watch_;   // --grad-norms / --halt-on-nan only
  std::unique_ptr<ComputeClock> compute_clock_;  // the compute threads' CPU time
  int start_step_ = 0;
  bool comm_failed_ = false;  // a collective failed since the last (re)join
  TrainCallbacks callbacks_;
};

}  // namespace cann::train
