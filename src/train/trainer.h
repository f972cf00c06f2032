// Trainer: the single-process training loop that wires model, optimizer, data, checkpoints,
// evaluation, the step log and the progress line together.
//
// One step: next batch from the sampler (BERT: masked-LM corruption), zero gradients, forward,
// backward, learning rate from the schedule, AdamW with global-norm clipping, then log,
// evaluate, checkpoint as configured. SIGINT/SIGTERM finish the current step, write a
// checkpoint when a checkpoint directory is set, and stop.
//
// In a multi-process job (a DistEnv is given) every rank trains batch_size / world sequences of
// the same global batch (the sampler's stride), gradients are averaged over the world group
// before the optimizer, and the stop decision is agreed by all ranks each step. Rank 0 alone
// prints progress, writes the step log, checkpoints (parameters are replicated) and samples.
// Checkpoints, in-memory snapshots, heartbeats and events go through StateKeeper.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "core/rng.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "model/model.h"
#include "monitor/alerts.h"
#include "monitor/collector.h"
#include "monitor/hub.h"
#include "monitor/server.h"
#include "monitor/tensorboard.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/pipeline_runner.h"
#include "train/config.h"
#include "train/data_parallel.h"
#include "train/distributed.h"
#include "train/grad_watch.h"
#include "train/model_parallel.h"
#include "train/progress.h"
#include "train/step_profiler.h"
#include "train/state_keeper.h"
#include "train/train_state.h"

namespace cann::train {

struct RunSummary {
  int first_step = 0;  // step the run started from (non-zero after --resume)
  int last_step = 0;   // steps completed when the run ended
  double first_loss = 0.0;
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1: never evaluated
  bool interrupted = false;     // stopped by a signal
};

class Trainer {
 public:
  ~Trainer();
  // env == nullptr: a plain single process.
  static StatusOr<std::unique_ptr<Trainer>> create(const TrainConfig& config,
                                                   const DistEnv* env = nullptr,
                                                   const CommConfig& comm = {});
  Status run(RunSummary* summary);

  const model::Model& model() const { return *model_; }

 private:
  explicit Trainer(TrainConfig config) : config_(std::move(config)) {}
  Status setup(const DistEnv* env, const CommConfig& comm);
  void mask_batch(int* inputs, int* targets, const uint64_t* sample_ids, int count);
  // Averages over ranks in place (no-op on one process).
  Status average_over_ranks(float* values, size_t count, const char* what);
  bool leader() const { return rank_ == 0; }
  Status check_fits_in_memory() const;
  Status resolve_layout();
  Status setup_model_parallel();
  // One optimizer step's forward/backward passes through the pipeline (pp > 1); adds this
  // stage's routing (MoE models) to expert_load and dropped.
  Status pipeline_step(float grad_scale, model::ForwardStats* st, parallel::StepComm* comm_stats,
                       std::vector<double>* expert_load, double* dropped);
  void record_expert_load(std::vector<double>* load, double* dropped);
  Status start_monitoring(const DistEnv* env);
  // Publishes this rank's flight-recorder beacon to the store about once a second.
  void start_beacon(const DistEnv& env);
  // After a failed collective: reads every rank's beacon and logs who is stuck where.
  void explain_stall();
  // Wraps a collective's failure with the rank and the hang analysis.
  Status comm_failure(const Status& s);
  size_t memory_bytes() const;
  std::string planner_memory_note() const;
  static std::string host_name();
  void report_step(const monitor::RankSnapshot& snap, bool last);
  StatusOr<OptimizerSnapshot> optimizer_snapshot();
  void next_batch();
  StatusOr<double> evaluate();
  Status save_checkpoint(int step, bool wait);
  Status train_steps(RunSummary* summary);
  Status finish_run(RunSummary* summary, bool show);
  Status make_data_parallel_engine();
  // Elastic (trainer_rejoin.cc): whether a failure can be survived by rejoining (a collective
  // failed under --elastic), and the rejoin: wait for the next generation, rebuild the group
  // and the engine under its key prefix, and load the committed step.
  bool rejoinable() const;
  static bool stop_signalled();  // SIGINT/SIGTERM arrived
  Status rejoin(const Status& cause);
  // Multi-node elastic (peer_restore.cc): a new generation's ranks agree on the committed step
  // (the oldest of the ranks' newest snapshots); ranks whose node lacks it receive it from the
  // lowest rank that has it, and all load it.
  Status restore_from_peers();
  // Loads a checkpoint or snapshot into the model, optimizer, sampler and RNG.
  Status restore_state(const ckpt::LoadedCheckpoint& ck);
  // After a completed step: in-memory snapshot (elastic) and heartbeat progress.
  Status keep_state(int done);
  StatusOr<std::string> generate_sample();
  Status write_log_line(const std::string& line);
  // --profile: writes the traces (a collective when several ranks run).
  Status finish_profile();
  // --dump-grads: the whole model's gradient of step `done` (a collective under model
  // parallelism, which assembles the shards); the leader writes the file.
  Status dump_grads(int done);
  // Some rank's gradients went non-finite at `step`: log, event, and with --halt-on-nan stop.
  Status report_nonfinite(int step);

  TrainConfig config_;
  model::ModelSpec spec_;
  data::Dataset data_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<optim::AdamW> opt_;       // one process
  std::unique_ptr<DataParallelEngine> dp_;  // several
  std::unique_ptr<data::Sampler> sampler_;
  optim::LrSchedule schedule_;
  Rng rng_;
  int seq_len_ = 0;
  int local_batch_ = 0;  // sequences per rank per optimizer step
  int micro_batch_ = 0;  // sequences per rank per forward/backward
  int accum_steps_ = 1;  // micro-steps per optimizer step
  int zero_stage_ = 0;
  int start_step_ = 0;
  std::vector<int> inputs_, targets_;
  std::vector<uint64_t> sample_ids_;
  std::unique_ptr<comm::Group> world_;
  std::shared_ptr<comm::Store> store_;
  // Monitoring: the in-process hub and server of a single process, or the publisher of a
  // worker under an agent.
  std::unique_ptr<monitor::Hub> hub_;
  std::unique_ptr<monitor::MonitorServer> server_;
  std::unique_ptr<monitor::SnapshotPublisher> publisher_;
  std::unique_ptr<monitor::AlertEngine> alerts_;  // before collector_: destroyed after it
  std::unique_ptr<monitor::SnapshotCollector> collector_;
  std::unique_ptr<monitor::TensorBoardWriter> tensorboard_;
  std::string job_id_;
  std::thread beacon_;
  std::atomic<bool> beacon_stop_{false};
  std::atomic<int64_t> current_step_{0};
  int64_t comm_bytes_total_ = 0;
  std::vector<int64_t> expert_tokens_total_;
  double last_val_loss_ = -1.0;
  int rank_ = 0;
  int world_size_ = 1;
  // Model parallelism (strategy tp/sp/pp/cp/ep): the layout, and with any of them the mesh and
  // its groups. Data ranks are the data-parallel coordinates: the tp and cp ranks of one
  // replica read one batch (each cp rank keeps its positions of it).
  ParallelLayout layout_;
  std::unique_ptr<ModelParallel> mp_;
  // Model parallelism: the whole model's layout, which checkpoints use, and the buffer the
  // parameters and moments are gathered into for one.
  std::unique_ptr<model::ParamTable> full_table_;
  std::vector<float> full_state_;
  std::vector<float> full_grads_;   // --dump-grads under model parallelism
  std::vector<float> local_grads_;  // --dump-grads under ZeRO
  std::unique_ptr<parallel::PipelineRunner> pipeline_;  // pp > 1
  int data_rank_ = 0;
  int data_world_ = 1;
  struct CloseFile {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<FILE, CloseFile> log_;
  std::unique_ptr<StateKeeper> keeper_;
  std::unique_ptr<DistEnv> env_;  // a copy of the launcher's environment (multi-process)
  CommConfig comm_;
  bool comm_failed_ = false;  // a collective failed since the last (re)join
  Progress progress_;
  std::unique_ptr<StepProfiler> profiler_;  // --profile only
  std::unique_ptr<GradWatch> grad_watch_;   // --grad-norms / --halt-on-nan only
  std::vector<double> link_gbps_;           // the last --link-probe-every measurement
};

}  // namespace cann::train
