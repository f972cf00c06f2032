// The three optimizer stages of a data-parallel group (see optimizer_stage.h).
#include "parallel/optimizer_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/compressed_allreduce.h"
#include "core/log.h"
#include "core/pages.h"
#include "parallel/onebit_adam.h"
#include "parallel/reductions.h"
#include "parallel/zero.h"
#include "parallel/zero_params.h"

namespace cann::parallel {
namespace {

// The stages that keep the whole gradient and an AdamW whose moments are the full state.
class FullStateStage : public OptimizerStage {
 public:
  explicit FullStateStage(model::Model& model) : model_(model) {}

  Status with_grad_range(size_t begin, size_t, const std::function<Status(float*)>& fn) override {
    return fn(model_.grads() + begin);
  }
  Status gather_grads(float* out) override {
    std::copy(model_.grads(), model_.grads() + model_.num_floats(), out);
    return OkStatus();
  }
  void add_to_params(size_t begin, const float* delta, size_t count) override {
    for (size_t i = 0; i < count; ++i) model_.params()[begin + i] += delta[i];
  }
  StatusOr<StageState> state() override {
    optim::AdamW& a = adam();
    return StageState{nullptr, a.m(), a.v(), a.step_count()};
  }
  Status load_state(const float* m, const float* v, int step) override {
    optim::AdamW& a = adam();
    const size_t n = model_.num_floats();
    std::memcpy(a.m(), m, n * sizeof(float));
    std::memcpy(a.v(), v, n * sizeof(float));
    a.set_step_count(step);
    return OkStatus();
  }
  size_t optimizer_state_bytes() const override { return 2 * full_bytes(); }
  size_t gradient_bytes() const override { return full_bytes(); }
  size_t parameter_bytes() const override { return full_bytes(); }

 protected:
  virtual optim::AdamW& adam() = 0;
  size_t full_bytes() const { return model_.num_floats() * sizeof(float); }

  model::Model& model_;
};

// AdamW on fully averaged gradients; the whole state on every rank.
class ReplicatedStage : public FullStateStage {
 public:
  ReplicatedStage(model::Model& model, comm::Group& group, const optim::AdamWConfig& adam,
                  const OptimizerStageConfig& config)
      : FullStateStage(model), adam_(model.table(), adam) {
    if (config.grad_sum_of_squares) adam_.set_sum_of_squares(config.grad_sum_of_squares);
    if (config.ep > 1)
      reduction_ = std::make_unique<ExpertAwareReduction>(model.table(), group,
                                                          *config.expert_dp_group, config.ep);
    else
      reduction_ = std::make_unique<FullReduction>(
          group, config.compress.kind == plan::Compression::Kind::kBf16);
  }

  BucketReduction* reduction() override { return reduction_.get(); }
  StatusOr<double> step(float lr) override { return optim::step_model(adam_, model_, &into_, lr); }
  void add_to_params(size_t begin, const float* delta, size_t count) override {
    if (into_.sums != nullptr) into_.sums->valid = false;
    FullStateStage::add_to_params(begin, delta, count);
  }
  bool placeable() const override { return true; }
  void place_state(const optim::UpdateTarget& to) override {
    optim::place_model_state(adam_, model_, &into_, to);
  }
  void update_into(const optim::UpdateTarget& to) override { into_ = to; }
  std::vector<float*> moments() override { return {adam_.m(), adam_.v()}; }

 private:
  optim::AdamW& adam() override { return adam_; }

  optim::AdamW adam_;
  std::unique_ptr<BucketReduction> reduction_;
  optim::UpdateTarget into_;  // the next step's output; params null: in place
};

// 1-bit Adam, or top-k momenta, after a warmup on full (bf16 or fp32) gradients.
class CompressedStage : public FullStateStage {
 public:
  CompressedStage(model::Model& model, comm::Group& group, const std::vector<plan::Bucket>& buckets,
                  const optim::AdamWConfig& adam, const OptimizerStageConfig& config,
                  int total_steps)
      : FullStateStage(model), group_(group) {
    // Default: 15% of the run, but at least one variance window of Adam (1 / (1 - beta2) = 20
    // steps at beta2 = 0.95): a variance frozen after a handful of steps is mostly the first
    // gradients' noise, and the compressed stage then diverges.
    const int window = static_cast<int>(std::lround(1.0 / (1.0 - adam.beta2)));
    const int warmup =
        config.onebit_warmup >= 0 ? config.onebit_warmup : std::max(window, total_steps * 15 / 100);
    if (warmup < window)
      log_warning("--onebit-warmup " + std::to_string(warmup) +
                  " is shorter than Adam's variance window (" + std::to_string(window) +
                  " steps): the frozen variance is noisy and 1-bit Adam may diverge");
    double ratio = 0.0;
    if (config.compress.kind == plan::Compression::Kind::kTopK) {
      ratio = config.compress.topk_ratio;
      topk_ = std::make_unique<TopKReduction>(group, buckets, ratio);
    }
    onebit_ = std::make_unique<OneBitAdam>(model.table(), adam, group, buckets, warmup,
                                           config.onebit_warmup_bf16, topk_.get(), ratio);
  }

  BucketReduction* reduction() override { return onebit_->reduction(); }
  StatusOr<double> step(float lr) override {
    return onebit_->step(model_.params(), model_.grads(), lr);
  }
  bool keeps_rank_buffers() const override { return true; }
  bool resumes_without_rank_buffers() const override { return !onebit_->compressing(); }
  std::vector<RankBuffer> rank_buffers() const override {
    const size_t n = model_.num_floats();
    std::vector<RankBuffer> out;
    if (onebit_->one_bit()) {
      RankBuffer worker{"onebit_worker_error", std::vector<float>(n)};
      RankBuffer server{"onebit_server_error",
                        std::vector<float>(onebit_->momentum().server_error_floats())};
      onebit_->momentum().export_errors(worker.data.data(), server.data.data());
      out.push_back(std::move(worker));
      out.push_back(std::move(server));
    }
    if (topk_) {
      RankBuffer err{"topk_error", std::vector<float>(n)};
      topk_->export_error(err.data.data());
      out.push_back(std::move(err));
      out.push_back({"topk_local_momentum", onebit_->local_momentum()});
    }
    return out;
  }
  Status load_rank_buffers(const RankBufferLookup& find, const std::string& path) override {
    const size_t n = model_.num_floats();
    if (onebit_->one_bit()) {
      const size_t server = onebit_->momentum().server_error_floats();
      const float* w = find("onebit_worker_error", n);
      const float* sv = find("onebit_server_error", server);
      if (w == nullptr || sv == nullptr)
        return DataLoss(path + ": 1-bit Adam error buffers are missing or of the wrong size");
      onebit_->momentum().import_errors(w, sv);
    }
    if (topk_) {
      const float* e = find("topk_error", n);
      if (e == nullptr)
        return DataLoss(path + ": top-k error buffers are missing or of the wrong size");
      topk_->import_error(e);
      if (const float* mine = find("topk_local_momentum", n); mine != nullptr) {
        std::copy(mine, mine + n, onebit_->local_momentum().begin());
      } else if (onebit_->compressing()) {
        log_warning(path +
                    ": no per-rank top-k momenta (saved by an older build); each rank's "
                    "starts from the averaged momentum");
        std::memcpy(onebit_->local_momentum().data(), onebit_->adam().m(), n * sizeof(float));
      }
    }
    return OkStatus();
  }
  bool reshard_rank_buffers(
      const std::function<const float*(const std::string& name, size_t* floats)>& find_all,
      int old_world) override {
    const size_t n = model_.num_floats(), copies = static_cast<size_t>(old_world);
    size_t floats = 0;
    if (onebit_->one_bit()) {
      const float* w = find_all("onebit_worker_error", &floats);
      if (w == nullptr || floats != copies * n) return false;
      const float* sv = find_all("onebit_server_error", &floats);
      if (sv == nullptr || !onebit_->momentum().import_errors_resharded(
                               w, sv, floats, old_world, group_.size(), group_.rank()))
        return false;
    }
    if (topk_) {
      const float* e = find_all("topk_error", &floats);
      if (e == nullptr || floats != copies * n) return false;
      topk_->import_error_resharded(e, old_world);
      // Each rank's own momentum: the old ranks' mean, the averaged momentum they share.
      if (const float* m = find_all("topk_local_momentum", &floats); m && floats == copies * n)
        comm::mean_over_ranks(n, old_world, m, onebit_->local_momentum().data());
    }
    return true;
  }
  std::string meta_json() const override {
    return onebit_->one_bit() ? "\"onebit_warmup\":" + std::to_string(onebit_->warmup_steps()) : "";
  }
  size_t optimizer_state_bytes() const override {
    const size_t n = full_bytes();
    size_t bytes = 2 * n;
    if (onebit_->one_bit()) bytes += n + onebit_->momentum().server_error_floats() * sizeof(float);
    if (topk_) bytes += 2 * n;  // error feedback and the rank's own momentum
    return bytes;
  }
  std::string describe() const override {
    return " after " + std::to_string(onebit_->warmup_steps()) + " warmup steps on " +
           (onebit_->warmup_bf16() ? "bf16" : "fp32") + " gradients";
  }

 private:
  optim::AdamW& adam() override { return onebit_->adam(); }

  comm::Group& group_;
  std::unique_ptr<TopKReduction> topk_;
  std::unique_ptr<OneBitAdam> onebit_;
};

// ZeRO stages 1-3.
// The snapshot section of a ZeRO rank's own parameter piece of bucket i.
std::string piece_name(size_t i) {
  return "zero_param_piece_" + std::to_string(i);
}

class ZeroStage : public OptimizerStage {
 public:
  static StatusOr<std::unique_ptr<ZeroStage>> create(model::Model& model, comm::Group& group,
                                                     const std::vector<plan::Bucket>& buckets,
                                                     const optim::AdamWConfig& adam,
                                                     const OptimizerStageConfig& config) {
    std::unique_ptr<ZeroStage> z(new ZeroStage(model));
    z->zero_ = std::make_unique<ZeroOptimizer>(model.table(), adam, group, buckets, config.zero);
    if (config.norm_counted)
      z->zero_->set_model_parallel_norm(config.norm_counted, config.norm_across);
    if (config.zero >= 2) zero_and_release(model.grads(), model.num_floats() * sizeof(float));
    if (config.zero == 3) {
      std::vector<int> ranks(static_cast<size_t>(group.size()));
      for (int r = 0; r < group.size(); ++r) ranks[static_cast<size_t>(r)] = r;
      CANN_ASSIGN_OR_RETURN(z->param_group_, group.new_subgroup(ranks, "zero3_params"));
      z->param_group_->set_name("zero3");
      std::vector<int> blocks;
      for (int l = 0; l < model.spec().num_hidden_layers; ++l) blocks.push_back(l);
      z->gatherer_ =
          std::make_unique<LayerGatherer>(buckets, z->zero_->pieces(), *z->param_group_,
                                          model.params(), z->zero_->param_shard(), blocks);
      LayerGatherer* g = z->gatherer_.get();
      const int L = model.spec().num_hidden_layers;
      model.set_param_hook([g, L](model::Model::ParamUse use, int l) {
        using U = model::Model::ParamUse;
        switch (use) {
          case U::kForwardBegin:
            g->begin_forward(L > 0 ? 0 : -1);
            break;
          case U::kBeforeForward:
            g->before(l, l + 1 < L ? l + 1 : -1);
            break;
          case U::kBeforeBackward:
            g->before(l, l - 1);
            break;
          case U::kAfterForward:
          case U::kAfterBackward:
            g->after(l);
            break;
        }
      });
    }
    return z;
  }
  ~ZeroStage() override {
    if (gatherer_) model_.set_param_hook({});
  }

  BucketReduction* reduction() override { return zero_->reduction(); }
  bool reduces_every_micro_step() const override { return zero_->stage() >= 2; }
  Status adopt_params() override {
    if (!gatherer_) return OkStatus();
    zero_->load_params(model_.params());
    gatherer_->invalidate();
    return gatherer_->status();
  }
  Status materialize_params() override { return gatherer_ ? gatherer_->gather_all() : OkStatus(); }
  Status param_status() const override { return gatherer_ ? gatherer_->status() : OkStatus(); }
  StatusOr<double> step(float lr) override {
    if (!gatherer_) return zero_->step(model_.params(), lr);
    CANN_RETURN_IF_ERROR(gatherer_->status());
    auto norm = zero_->step(model_.params(), lr);
    gatherer_->invalidate();  // every gathered layer is stale now
    return norm;
  }
  Status with_grad_range(size_t begin, size_t count,
                         const std::function<Status(float*)>& fn) override {
    return zero_->with_grad_range(begin, count, fn);
  }
  Status gather_grads(float* out) override { return zero_->gather_grads(out); }
  // Stages 1 and 2 hold every parameter in the model's buffer after the step's all-gather;
  // stage 3 gathers layers from its shard, which is where the change must go.
  void add_to_params(size_t begin, const float* delta, size_t count) override {
    if (!gatherer_) {
      for (size_t i = 0; i < count; ++i) model_.params()[begin + i] += delta[i];
      return;
    }
    zero_->add_to_param_shard(begin, delta, count);
  }
  StatusOr<StageState> state() override {
    const size_t n = model_.num_floats();
    m_.resize(n);
    v_.resize(n);
    CANN_RETURN_IF_ERROR(zero_->gather_state(m_.data(), v_.data()));
    StageState s{nullptr, m_.data(), v_.data(), zero_->step_count()};
    if (gatherer_) {
      p_.resize(n);
      CANN_RETURN_IF_ERROR(zero_->gather_params(p_.data()));
      s.params = p_.data();
    }
    return s;
  }
  Status load_state(const float* m, const float* v, int step) override {
    zero_->scatter_state(m, v);
    zero_->set_step_count(step);
    return adopt_params();
  }
  int own_step() const override { return zero_->step_count(); }
  std::vector<OwnBuffer> own_buffers() const override {
    const size_t n = zero_->shard_floats();
    std::vector<OwnBuffer> out = {{"zero_m_shard", zero_->m_shard(), n},
                                  {"zero_v_shard", zero_->v_shard(), n}};
    if (gatherer_) out.push_back({"zero_param_shard", zero_->param_shard(), n});
    // Stages 1 and 2: the parameters are whole on every rank after the step's all-gather, and
    // each rank's own pieces of them, the ones its step updated, are all a restore needs
    // (after_restore gathers the rest): 4 bytes a parameter over the group, not 4 on each rank.
    if (!gatherer_) {
      const std::vector<ShardPiece>& pieces = zero_->pieces();
      for (size_t i = 0; i < pieces.size(); ++i)
        if (pieces[i].len > 0)
          out.push_back({piece_name(i), model_.params() + pieces[i].flat_begin, pieces[i].len});
    }
    return out;
  }
  Status load_own_buffers(const RankBufferLookup& find, int step,
                          const std::string& path) override {
    const size_t n = zero_->shard_floats();
    const float* m = find("zero_m_shard", n);
    const float* v = find("zero_v_shard", n);
    const float* p = gatherer_ ? find("zero_param_shard", n) : nullptr;
    if (m == nullptr || v == nullptr || (gatherer_ && p == nullptr))
      return DataLoss(path + ": this rank's ZeRO shards are missing or of the wrong size");
    zero_->load_shards(m, v, p);
    zero_->set_step_count(step);
    if (gatherer_) gatherer_->invalidate();
    // Stages 1 and 2: this rank's parameter pieces, where the snapshot has them (one written
    // before they were kept holds the whole parameters, loaded by the caller).
    if (!gatherer_) {
      const std::vector<ShardPiece>& pieces = zero_->pieces();
      size_t found = 0, wanted = 0;
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].len == 0) continue;
        ++wanted;
        const float* piece = find(piece_name(i), pieces[i].len);
        if (piece == nullptr) continue;
        ++found;
        std::memcpy(model_.params() + pieces[i].flat_begin, piece, pieces[i].len * sizeof(float));
      }
      if (found != 0 && found != wanted)
        return DataLoss(path + ": " + std::to_string(wanted - found) + " of this rank's " +
                        std::to_string(wanted) + " ZeRO parameter pieces are missing");
    }
    return OkStatus();
  }
  Status after_restore() override {
    return gatherer_ ? OkStatus() : zero_->allgather_params(model_.params());
  }
  size_t optimizer_state_bytes() const override {
    return (2 * zero_->shard_floats() + zero_->staging_floats()) * sizeof(float);
  }
  size_t gradient_bytes() const override {
    const size_t shard = zero_->shard_floats() * sizeof(float);
    if (zero_->stage() == 1) return model_.num_floats() * sizeof(float) + shard;
    // Stages 2 and 3: the shard, the bucket backward is filling and at most one waiting for
    // the communication thread (GradReducer::set_max_queued).
    size_t first = 0, second = 0;
    for (const plan::Bucket& b : zero_->buckets()) {
      if (b.size() > first) {
        second = first;
        first = b.size();
      } else if (b.size() > second) {
        second = b.size();
      }
    }
    return shard + (first + second) * sizeof(float);
  }
  size_t parameter_bytes() const override {
    if (!gatherer_) return model_.num_floats() * sizeof(float);
    // The shard, the layers kept all step and two blocks (gathers write in place).
    return (zero_->shard_floats() + gatherer_->resident_floats_bound()) * sizeof(float);
  }

 private:
  explicit ZeroStage(model::Model& model) : model_(model) {}

  model::Model& model_;
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<comm::Group> param_group_;  // stage 3's gathers
  std::unique_ptr<LayerGatherer> gatherer_;
  std::vector<float> m_, v_, p_;  // state() staging
};

}  // namespace

std::vector<plan::Bucket> stage_buckets(const model::Model& model,
                                        const OptimizerStageConfig& config,
                                        const plan::EngineBuckets& sizes) {
  if (config.zero == 3) return plan::plan_layer_buckets(model.table());
  return plan::plan_buckets(model.table(), static_cast<size_t>(sizes.first_bytes),
                            static_cast<size_t>(sizes.bytes),
                            config.zero == 0 ? model.grad_ready_offsets() : std::vector<size_t>{});
}

StatusOr<std::unique_ptr<OptimizerStage>> make_optimizer_stage(
    model::Model& model, comm::Group& group, const std::vector<plan::Bucket>& buckets,
    const optim::AdamWConfig& adam, const OptimizerStageConfig& config, int total_steps) {
  if (config.zero >= 1) {
    CANN_ASSIGN_OR_RETURN(std::unique_ptr<ZeroStage> z,
                          ZeroStage::create(model, group, buckets, adam, config));
    return std::unique_ptr<OptimizerStage>(std::move(z));
  }
  if (config.compress.two_stage())
    return std::unique_ptr<OptimizerStage>(
        std::make_unique<CompressedStage>(model, group, buckets, adam, config, total_steps));
  return std::unique_ptr<OptimizerStage>(
      std::make_unique<ReplicatedStage>(model, group, adam, config));
}

}  // namespace cann::parallel
