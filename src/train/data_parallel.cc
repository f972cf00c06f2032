// The data-parallel engine: a gradient reducer composed with an optimizer stage, and the
// checkpoint form of the stage's state (see data_parallel.h).
#include "train/data_parallel.h"

#include <nlohmann/json.hpp>

#include "ckpt/replicas.h"
#include "core/log.h"

namespace cann::train {

StatusOr<std::unique_ptr<DataParallelEngine>> DataParallelEngine::create(
    model::Model& model, comm::Group& group, const optim::AdamWConfig& adam,
    const DataParallelConfig& config, int total_steps) {
  std::unique_ptr<DataParallelEngine> e(new DataParallelEngine(model, group, config));
  const std::vector<plan::Bucket> buckets = parallel::stage_buckets(model, config, config.buckets);
  if (buckets.empty())
    return InvalidArgument("zero=3: model '" + model.spec().name +
                           "' has a layer whose tensors are not contiguous in the flat buffer, "
                           "which stage 3 gathers by layer; hint: use zero=2");
  e->reducer_ = std::make_unique<parallel::GradReducer>(buckets, group);
  CANN_ASSIGN_OR_RETURN(
      e->stage_, parallel::make_optimizer_stage(model, group, buckets, adam, config, total_steps));
  if (e->stage_->reduces_every_micro_step()) e->reducer_->set_max_queued(1);
  return e;
}

DataParallelEngine::~DataParallelEngine() = default;

Status DataParallelEngine::backward(float grad_scale, bool last, parallel::StepComm* stats) {
  if (!last && !stage_->reduces_every_micro_step()) {
    model_.backward(grad_scale);
    return OkStatus();
  }
  parallel::StepComm micro;
  CANN_RETURN_IF_ERROR(backward_and_reduce(grad_scale, &micro));
  stats->comm_time_s += micro.comm_time_s;
  stats->comm_exposed_s += micro.comm_exposed_s;
  stats->comm_bytes += micro.comm_bytes;
  return OkStatus();
}

Status DataParallelEngine::backward_and_reduce(float grad_scale, parallel::StepComm* stats) {
  begin_reduction();
  model_.backward(grad_scale, [this](int layer) { layer_done(layer); });
  return finish_reduction(stats);
}

void DataParallelEngine::begin_reduction() {
  reducer_->begin_step(model_.grads(), stage_->reduction());
  // Backward reports finer readiness only in the passes that report their layers (the last
  // micro-step's; each chunk's last under a pipeline), so the hook can stay until finish.
  model_.set_grad_ready_hook([this](size_t offset) { reducer_->grads_final_from(offset); });
}

void DataParallelEngine::layer_done(int layer) {
  reducer_->layer_done(layer);
}

Status DataParallelEngine::finish_reduction(parallel::StepComm* stats) {
  model_.set_grad_ready_hook({});
  return reducer_->finish(stats);
}

void DataParallelEngine::zero_grads() {
  // Under stages 2 and 3 every bucket was zeroed and released when its reduction took it.
  if (!stage_->reduces_every_micro_step()) model_.zero_grads();
}

StatusOr<OptimizerSnapshot> DataParallelEngine::snapshot() {
  CANN_ASSIGN_OR_RETURN(const parallel::StageState st, stage_->state());
  OptimizerSnapshot s;
  s.params = st.params;
  s.m = st.m;
  s.v = st.v;
  s.step = st.step;
  // Every rank's copy of each buffer it holds alone, rank after rank (an all-gather, so any
  // rank could write the checkpoint).
  const std::vector<parallel::RankBuffer> mine = stage_->rank_buffers();
  gathered_.resize(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    std::vector<float>& all = gathered_[i];
    all.resize(mine[i].data.size() * static_cast<size_t>(group_.size()));
    CANN_RETURN_IF_ERROR(group_
                             .allgather(all.data(), mine[i].data.data(), mine[i].data.size(),
                                        comm::DataType::kFloat32)
                             ->wait());
    s.extra_sections.push_back({mine[i].name, all.data(), all.size() * sizeof(float)});
  }
  s.extra_meta_json = extra_meta(stage_->meta_json());
  return s;
}

// The same text for the same stage metadata: a snapshot every step serializes it once.
const std::string& DataParallelEngine::extra_meta(const std::string& stage_meta) {
  if (extra_meta_.empty() || stage_meta != extra_meta_of_) {
    nlohmann::json extra = {{"zero", config_.zero},
                            {"compress", plan::compression_name(config_.compress)},
                            {"world_size", group_.size()}};
    if (!stage_meta.empty()) extra.update(nlohmann::json::parse("{" + stage_meta + "}"));
    extra_meta_ = extra.dump();
    extra_meta_of_ = stage_meta;
  }
  return extra_meta_;
}

StatusOr<OptimizerSnapshot> DataParallelEngine::snapshot_own() {
  const std::vector<parallel::OwnBuffer> own = stage_->own_buffers();
  if (own.empty() || stage_->keeps_rank_buffers()) return snapshot();
  OptimizerSnapshot s;
  s.own_part = true;
  // ZeRO: this rank's moment and parameter pieces (stage 3: its parameter shard; stages 1 and
  // 2: its pieces of the whole parameters it holds, OptimizerStage::own_buffers).
  s.params = nullptr;
  for (const parallel::OwnBuffer& b : own)
    s.extra_sections.push_back({b.name, b.data, b.floats * sizeof(float)});
  nlohmann::json extra = {{"zero", config_.zero},
                          {"compress", plan::compression_name(config_.compress)},
                          {"world_size", group_.size()},
                          {"own_part", true}};
  s.extra_meta_json = extra.dump();
  s.step = stage_->own_step();
  return s;
}

namespace {

// A checkpoint section as floats; null when missing or, with `floats` > 0, of another size.
const float* section_floats(const ckpt::LoadedCheckpoint& ck, const std::string& name,
                            size_t* floats) {
  const ckpt::Section* s = ck.find(name);
  if (s == nullptr || (*floats > 0 && s->data.size() != *floats * sizeof(float))) return nullptr;
  *floats = s->data.size() / sizeof(float);
  return reinterpret_cast<const float*>(s->data.data());
}

}  // namespace

Status DataParallelEngine::restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) {
  const nlohmann::json own = nlohmann::json::parse(checkpoint_optimizer_extra(ck));
  if (own.value("own_part", false)) {
    // This rank's own snapshot (the caller checked its mark): the shards as they were.
    int step = 0;
    // The whole parameters where the snapshot has them (stages 1 and 2 before they kept only
    // their pieces), else the stage loads its pieces and after_restore gathers the rest.
    CANN_RETURN_IF_ERROR(restore_training_checkpoint(ck, model_, nullptr, nullptr, &step, state,
                                                     nullptr, ck.find("params") != nullptr));
    return stage_->load_own_buffers(
        [&ck](const std::string& name, size_t floats) {
          return section_floats(ck, name, &floats);
        },
        step, ck.path);
  }
  const size_t n = model_.num_floats();
  std::vector<float> m(n), v(n);
  int step = 0;
  // A model-parallel rank's own snapshot is in its own layout; a checkpoint holds the whole model.
  const bool whole = config_.shards.full != nullptr && !ckpt::rank_snapshot_mark(ck.meta_json);
  CANN_RETURN_IF_ERROR(restore_training_checkpoint(ck, model_, m.data(), v.data(), &step, state,
                                                   whole ? &config_.shards : nullptr));
  const nlohmann::json extra = nlohmann::json::parse(checkpoint_optimizer_extra(ck));
  CANN_RETURN_IF_ERROR(stage_->load_state(m.data(), v.data(), step));
  // Per-rank buffers belong to the world size and the compression they were saved with.
  const int saved_world = extra.value("world_size", 0);
  const std::string saved_compress = extra.value("compress", std::string("none"));
  const std::string compress = plan::compression_name(config_.compress);
  if (saved_compress != compress) {
    if (stage_->keeps_rank_buffers())
      log_warning(ck.path + ": saved with --compress " + saved_compress +
                  "; the error-feedback buffers start from zero");
    if (!stage_->resumes_without_rank_buffers())
      return FailedPrecondition(ck.path + ": resuming --compress " + compress +
                                " past its warmup needs the frozen variance of a run that used "
                                "it; hint: resume with the original --compress " +
                                saved_compress);
    return OkStatus();
  }
  if (saved_world != group_.size()) {
    // Another world size: what the error feedback holds back is carried over, resharded.
    const auto find_all = [&ck](const std::string& name, size_t* floats) {
      *floats = 0;  // any size: the stage checks it against the old world
      return section_floats(ck, name, floats);
    };
    if (!stage_->keeps_rank_buffers() || saved_world < 1) return OkStatus();
    if (stage_->reshard_rank_buffers(find_all, saved_world)) {
      if (group_.rank() == 0)
        log_info(ck.path + ": error-feedback buffers of " + std::to_string(saved_world) +
                 " ranks resharded onto " + std::to_string(group_.size()));
    } else {
      log_warning(ck.path + ": saved by " + std::to_string(saved_world) + " ranks, resumed by " +
                  std::to_string(group_.size()) +
                  " and its error-feedback buffers do not fit this run's buckets; they are not "
                  "carried over");
    }
    return OkStatus();
  }
  const size_t r = static_cast<size_t>(group_.rank()), world = static_cast<size_t>(group_.size());
  return stage_->load_rank_buffers(
      [&ck, r, world](const std::string& name, size_t floats) -> const float* {
        size_t all = floats * world;
        const float* p = section_floats(ck, name, &all);
        return p == nullptr ? nullptr : p + r * floats;
      },
      ck.path);
}

std::string DataParallelEngine::describe() const {
  return "zero=" + std::to_string(config_.zero) + ", " +
         std::to_string(reducer_->buckets().size()) + " gradient buckets, compress " +
         plan::compression_name(config_.compress) + stage_->describe();
}

}  // namespace cann::train
