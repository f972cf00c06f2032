// Data-parallel optimizer plumbing.
#include "train/data_parallel.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/log.h"
#include "core/pages.h"
#include "parallel/onebit_adam.h"
#include "parallel/reductions.h"
#include "parallel/zero.h"
#include "parallel/zero_params.h"
#include "plan/buckets.h"

namespace cann::train {

StatusOr<std::unique_ptr<DataParallelEngine>> DataParallelEngine::create(
    model::Model& model, comm::Group& group, const optim::AdamWConfig& adam,
    const DataParallelConfig& config, int total_steps) {
  std::unique_ptr<DataParallelEngine> e(new DataParallelEngine(model, group, config));
  const bool two_stage = config.compress.two_stage();
  // Stage 3 gathers parameters a layer at a time, so its buckets are whole layers. Without
  // ZeRO the buckets are cut where backward reports gradients final; stages 1 and 2 keep cuts
  // by size, which their shards and the planner's memory prediction of them follow.
  const auto buckets =
      config.zero == 3 ? plan::plan_layer_buckets(model.table())
                       : plan::plan_buckets(
                             model.table(), static_cast<size_t>(config.buckets.first_bytes),
                             static_cast<size_t>(config.buckets.bytes),
                             config.zero == 0 ? model.grad_ready_offsets() : std::vector<size_t>{});
  if (buckets.empty())
    return InvalidArgument("zero=3: model '" + model.spec().name +
                           "' has a layer whose tensors are not contiguous in the flat buffer, "
                           "which stage 3 gathers by layer; hint: use zero=2");
  e->reducer_ = std::make_unique<parallel::GradReducer>(buckets, group);
  if (config.zero >= 1) {
    e->zero_ =
        std::make_unique<parallel::ZeroOptimizer>(model.table(), adam, group, buckets, config.zero);
    if (config.norm_counted)
      e->zero_->set_model_parallel_norm(config.norm_counted, config.norm_across);
    if (config.zero >= 2) {
      e->reducer_->set_max_queued(1);
      zero_and_release(model.grads(), model.num_floats() * sizeof(float));
    }
    if (config.zero == 3) {
      std::vector<int> ranks(static_cast<size_t>(group.size()));
      for (int r = 0; r < group.size(); ++r) ranks[static_cast<size_t>(r)] = r;
      CANN_ASSIGN_OR_RETURN(e->param_group_, group.new_subgroup(ranks, "zero3_params"));
      e->param_group_->set_name("zero3");
      std::vector<int> blocks;
      for (int l = 0; l < model.spec().num_hidden_layers; ++l) blocks.push_back(l);
      e->gatherer_ = std::make_unique<parallel::LayerGatherer>(
          buckets, e->zero_->pieces(), *e->param_group_, model.params(), e->zero_->param_shard(),
          blocks);
      parallel::LayerGatherer* g = e->gatherer_.get();
      const int L = model.spec().num_hidden_layers;
      model.set_param_hook([g, L](model::Model::ParamUse use, int l) {
        using U = model::Model::ParamUse;
        switch (use) {
          case U::kForwardBegin: g->begin_forward(L > 0 ? 0 : -1); break;
          case U::kBeforeForward: g->before(l, l + 1 < L ? l + 1 : -1); break;
          case U::kBeforeBackward: g->before(l, l - 1); break;
          case U::kAfterForward:
          case U::kAfterBackward: g->after(l); break;
        }
      });
    }
  } else if (two_stage) {
    // Default: 15% of the run, but at least one variance window of Adam (1 / (1 - beta2) = 20
    // steps at beta2 = 0.95): a variance frozen after a handful of steps is mostly the first
    // gradients' noise, and the compressed stage then diverges.
    const int window = static_cast<int>(std::lround(1.0 / (1.0 - adam.beta2)));
    const int warmup = config.onebit_warmup >= 0 ? config.onebit_warmup
                                                 : std::max(window, total_steps * 15 / 100);
    if (warmup < window)
      log_warning("--onebit-warmup " + std::to_string(warmup) +
                  " is shorter than Adam's variance window (" + std::to_string(window) +
                  " steps): the frozen variance is noisy and 1-bit Adam may diverge");
    e->config_.onebit_warmup = warmup;
    double ratio = 0.0;
    if (config.compress.kind == plan::Compression::Kind::kTopK) {
      ratio = config.compress.topk_ratio;
      e->topk_ = std::make_unique<parallel::TopKReduction>(group, buckets, ratio);
    }
    e->onebit_ = std::make_unique<parallel::OneBitAdam>(
        model.table(), adam, group, buckets, warmup, e->topk_.get(), ratio);
  } else {
    e->adam_ = std::make_unique<optim::AdamW>(model.table(), adam);
    if (config.grad_sum_of_squares) e->adam_->set_sum_of_squares(config.grad_sum_of_squares);
    if (config.ep > 1) {
      e->expert_aware_ = std::make_unique<parallel::ExpertAwareReduction>(
          model.table(), group, *config.expert_dp_group, config.ep);
    } else {
      e->full_ = std::make_unique<parallel::FullReduction>(
          group, config.compress.kind == plan::Compression::Kind::kBf16);
    }
  }
  return e;
}

DataParallelEngine::DataParallelEngine(model::Model& model, comm::Group& group,
                                       DataParallelConfig config)
    : model_(model), group_(group), config_(std::move(config)) {}


parallel::BucketReduction* DataParallelEngine::reduction() {
  if (zero_) return zero_->reduction();
  if (onebit_) return onebit_->reduction();
  if (expert_aware_) return expert_aware_.get();
  return full_.get();
}

Status DataParallelEngine::backward(float grad_scale, bool last, parallel::StepComm* stats) {
  if (!last && config_.zero < 2) {
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
  reducer_->begin_step(model_.grads(), reduction());
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

DataParallelEngine::~DataParallelEngine() {
  if (gatherer_) model_.set_param_hook({});
}

void DataParallelEngine::zero_grads() {
  // Under stages 2 and 3 every bucket was zeroed and released when its reduction took it.
  if (config_.zero < 2) model_.zero_grads();
}

Status DataParallelEngine::adopt_params() {
  if (!gatherer_) return OkStatus();
  zero_->load_params(model_.params());
  gatherer_->invalidate();
  return gatherer_->status();
}

Status DataParallelEngine::materialize_params() {
  return gatherer_ ? gatherer_->gather_all() : OkStatus();
}

Status DataParallelEngine::param_status() const {
  return gatherer_ ? gatherer_->status() : OkStatus();
}

StatusOr<double> DataParallelEngine::step(float lr) {
  if (gatherer_) {
    CANN_RETURN_IF_ERROR(gatherer_->status());
    auto norm = zero_->step(model_.params(), lr);
    gatherer_->invalidate();  // every gathered layer is stale now
    return norm;
  }
  if (zero_) return zero_->step(model_.params(), lr);
  if (onebit_) return onebit_->step(model_.params(), model_.grads(), lr);
  return adam_->step(model_.params(), model_.grads(), lr);
}

Status DataParallelEngine::with_grad_range(size_t begin, size_t count,
                                           const std::function<Status(float*)>& fn) {
  if (zero_) return zero_->with_grad_range(begin, count, fn);
  return fn(model_.grads() + begin);
}

Status DataParallelEngine::gather_grads(float* out) {
  if (zero_) return zero_->gather_grads(out);
  std::copy(model_.grads(), model_.grads() + model_.num_floats(), out);
  return OkStatus();
}

// Every rank's copy of a per-rank buffer, rank after rank (an all-gather, so any rank could
// write the checkpoint).
Status DataParallelEngine::gather_rank_buffers(const std::vector<float>& mine,
                                               std::vector<float>* all) {
  all->resize(mine.size() * static_cast<size_t>(group_.size()));
  return group_.allgather(all->data(), mine.data(), mine.size(), comm::DataType::kFloat32)->wait();
}

StatusOr<OptimizerSnapshot> DataParallelEngine::snapshot() {
  OptimizerSnapshot s;
  nlohmann::json extra = {{"zero", config_.zero},
                          {"compress", plan::compression_name(config_.compress)},
                          {"world_size", group_.size()}};
  const size_t n = model_.num_floats();
  if (zero_) {
    snap_m_.resize(n);
    snap_v_.resize(n);
    CANN_RETURN_IF_ERROR(zero_->gather_state(snap_m_.data(), snap_v_.data()));
    s.m = snap_m_.data();
    s.v = snap_v_.data();
    s.step = zero_->step_count();
    if (gatherer_) {
      snap_p_.resize(n);
      CANN_RETURN_IF_ERROR(zero_->gather_params(snap_p_.data()));
      s.params = snap_p_.data();
    }
  } else {
    optim::AdamW& a = onebit_ ? onebit_->adam() : *adam_;
    s.m = a.m();
    s.v = a.v();
    s.step = a.step_count();
  }
  if (onebit_ && onebit_->one_bit()) {
    std::vector<float> worker(n), server(onebit_->momentum().server_error_floats());
    onebit_->momentum().export_errors(worker.data(), server.data());
    CANN_RETURN_IF_ERROR(gather_rank_buffers(worker, &snap_a_));
    CANN_RETURN_IF_ERROR(gather_rank_buffers(server, &snap_b_));
    s.extra_sections = {{"onebit_worker_error", snap_a_.data(), snap_a_.size() * sizeof(float)},
                        {"onebit_server_error", snap_b_.data(), snap_b_.size() * sizeof(float)}};
    extra["onebit_warmup"] = onebit_->warmup_steps();
  }
  if (topk_) {
    std::vector<float> err(n);
    topk_->export_error(err.data());
    CANN_RETURN_IF_ERROR(gather_rank_buffers(err, &snap_a_));
    CANN_RETURN_IF_ERROR(gather_rank_buffers(onebit_->local_momentum(), &snap_b_));
    s.extra_sections = {{"topk_error", snap_a_.data(), snap_a_.size() * sizeof(float)},
                        {"topk_local_momentum", snap_b_.data(), snap_b_.size() * sizeof(float)}};
  }
  s.extra_meta_json = extra.dump();
  return s;
}

Status DataParallelEngine::restore(const ckpt::LoadedCheckpoint& ck, ResumeState* state) {
  const size_t n = model_.num_floats();
  std::vector<float> m(n), v(n);
  int step = 0;
  CANN_RETURN_IF_ERROR(restore_training_checkpoint(ck, model_, m.data(), v.data(), &step, state,
                                                   config_.shards.full ? &config_.shards : nullptr));
  const nlohmann::json extra = nlohmann::json::parse(checkpoint_optimizer_extra(ck));
  if (zero_) {
    zero_->scatter_state(m.data(), v.data());
    zero_->set_step_count(step);
    CANN_RETURN_IF_ERROR(adopt_params());
  } else {
    optim::AdamW& a = onebit_ ? onebit_->adam() : *adam_;
    std::memcpy(a.m(), m.data(), n * sizeof(float));
    std::memcpy(a.v(), v.data(), n * sizeof(float));
    a.set_step_count(step);
  }
  // Per-rank error buffers belong to the world size they were saved with.
  const int saved_world = extra.value("world_size", 0);
  const std::string saved_compress = extra.value("compress", std::string("none"));
  const std::string compress = plan::compression_name(config_.compress);
  if (saved_compress != compress) {
    if (onebit_ || topk_)
      log_warning(ck.path + ": saved with --compress " + saved_compress +
                  "; the error-feedback buffers start from zero");
    if (onebit_ && onebit_->compressing())
      return FailedPrecondition(ck.path + ": resuming --compress " + compress +
                                " past its warmup needs the frozen variance of a run that used "
                                "it; hint: resume with the original --compress " +
                                saved_compress);
    return OkStatus();
  }
  if (saved_world != group_.size()) {
    if (onebit_ || topk_)
      log_warning(ck.path + ": saved by " + std::to_string(saved_world) + " ranks, resumed by " +
                  std::to_string(group_.size()) + "; the error-feedback buffers start from zero");
    return OkStatus();
  }
  const size_t r = static_cast<size_t>(group_.rank());
  if (onebit_ && onebit_->one_bit()) {
    const ckpt::Section* w = ck.find("onebit_worker_error");
    const ckpt::Section* sv = ck.find("onebit_server_error");
    const size_t server = onebit_->momentum().server_error_floats();
    if (w == nullptr || sv == nullptr || w->data.size() != n * group_.size() * sizeof(float) ||
        sv->data.size() != server * group_.size() * sizeof(float))
      return DataLoss(ck.path + ": 1-bit Adam error buffers are missing or of the wrong size");
    onebit_->momentum().import_errors(reinterpret_cast<const float*>(w->data.data()) + r * n,
                                      reinterpret_cast<const float*>(sv->data.data()) + r * server);
  }
  if (topk_) {
    const ckpt::Section* e = ck.find("topk_error");
    if (e == nullptr || e->data.size() != n * group_.size() * sizeof(float))
      return DataLoss(ck.path + ": top-k error buffers are missing or of the wrong size");
    topk_->import_error(reinterpret_cast<const float*>(e->data.data()) + r * n);
    const ckpt::Section* u = ck.find("topk_local_momentum");
    if (u != nullptr && u->data.size() == n * group_.size() * sizeof(float)) {
      const float* mine = reinterpret_cast<const float*>(u->data.data()) + r * n;
      std::copy(mine, mine + n, onebit_->local_momentum().begin());
    } else if (onebit_->compressing()) {
      log_warning(ck.path + ": no per-rank top-k momenta (saved by an older build); each rank's "
                  "starts from the averaged momentum");
      std::memcpy(onebit_->local_momentum().data(), onebit_->adam().m(), n * sizeof(float));
    }
  }
  return OkStatus();
}

std::string DataParallelEngine::describe() const {
  std::string s = "zero=" + std::to_string(config_.zero) + ", " +
                  std::to_string(reducer_->buckets().size()) + " gradient buckets, compress " +
                  plan::compression_name(config_.compress);
  if (onebit_) s += " after " + std::to_string(onebit_->warmup_steps()) + " fp32 warmup steps";
  return s;
}

size_t DataParallelEngine::gradient_bytes() const {
  const size_t n = model_.num_floats() * sizeof(float);
  if (!zero_) return n;
  const size_t shard = zero_->shard_floats() * sizeof(float);
  if (config_.zero == 1) return n + shard;
  // Stages 2 and 3: the shard, the bucket backward is filling and at most one waiting for the
  // communication thread (GradReducer::set_max_queued).
  size_t first = 0, second = 0;
  for (const plan::Bucket& b : reducer_->buckets()) {
    if (b.size() > first) {
      second = first;
      first = b.size();
    } else if (b.size() > second) {
      second = b.size();
    }
  }
  return shard + (first + second) * sizeof(float);
}

size_t DataParallelEngine::parameter_bytes() const {
  const size_t n = model_.num_floats() * sizeof(float);
  if (!gatherer_) return n;
  // The shard, the layers kept all step and two blocks (gathers write in place).
  return (zero_->shard_floats() + gatherer_->resident_floats_bound()) * sizeof(float);
}

size_t DataParallelEngine::optimizer_state_bytes() const {
  const size_t n = model_.num_floats() * sizeof(float);
  if (zero_) return (2 * zero_->shard_floats() + zero_->staging_floats()) * sizeof(float);
  size_t bytes = 2 * n;
  if (onebit_ && onebit_->one_bit())
    bytes += n + onebit_->momentum().server_error_floats() * sizeof(float);
  if (topk_) bytes += 2 * n;  // error feedback and the rank's own momentum
  return bytes;
}

}  // namespace cann::train
