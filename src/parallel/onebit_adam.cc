// 1-bit Adam's two stages.
#include "parallel/onebit_adam.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/grad_norm.h"

namespace cann::parallel {

// Top-k's compressed stage: each rank's own momentum, sent through the top-k all-reduce with
// error feedback; the sparse average becomes the step's momentum.
class SparseMomentum : public BucketReduction {
 public:
  SparseMomentum(TopKReduction& topk, float* m, size_t n, float beta1)
      : topk_(topk), m_(m), u_(n, 0.0f), beta1_(beta1) {}
  Status reduce(const plan::Bucket& bucket, size_t index, float* grads) override {
    float* g = grads + bucket.begin;
    float* u = u_.data() + bucket.begin;
    for (size_t i = 0; i < bucket.size(); ++i) g[i] = u[i] = beta1_ * u[i] + (1.0f - beta1_) * g[i];
    CANN_RETURN_IF_ERROR(topk_.reduce(bucket, index, grads));
    std::copy(g, g + bucket.size(), m_ + bucket.begin);
    return OkStatus();
  }
  std::vector<float>& local() { return u_; }

 private:
  TopKReduction& topk_;
  float* m_;
  std::vector<float> u_;
  float beta1_;
};

OneBitAdam::OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config,
                       comm::Group& group, const std::vector<plan::Bucket>& buckets,
                       int warmup_steps, bool warmup_bf16, TopKReduction* topk, double topk_ratio)
    : table_(table),
      group_(group),
      adam_(table, config),
      warmup_steps_(warmup_steps),
      topk_(topk),
      topk_ratio_(topk_ratio) {
  full_ = std::make_unique<FullReduction>(group, warmup_bf16);
  if (topk != nullptr) {
    sparse_momentum_ =
        std::make_unique<SparseMomentum>(*topk, adam_.m(), table.total_floats(), config.beta1);
    compressed_ = sparse_momentum_.get();
  } else {
    momentum_ = std::make_unique<OneBitMomentum>(group, buckets, adam_.m(), config.beta1);
    compressed_ = momentum_.get();
  }
}

OneBitAdam::~OneBitAdam() = default;

double OneBitAdam::topk_density(int j) const {
  const double start = 0.25;
  if (topk_ratio_ >= start) return topk_ratio_;
  return std::max(topk_ratio_,
                  start * std::pow(4.0, -static_cast<double>(j) / std::max(1, warmup_steps_)));
}

BucketReduction* OneBitAdam::reduction() {
  if (!compressing()) return full_.get();
  if (topk_ != nullptr) topk_->set_ratio(topk_density(adam_.step_count() - warmup_steps_));
  return compressed_;
}

std::vector<float>& OneBitAdam::local_momentum() {
  return sparse_momentum_->local();
}

StatusOr<double> OneBitAdam::step(float* params, const float* grads, float lr) {
  if (!compressing()) {
    const double norm = adam_.step(params, grads, lr);
    if (compressing()) {
      // The switch: freeze the variance, bias-corrected with the last warmup step's count.
      const float bc2 =
          1.0f - std::pow(adam_.config().beta2, static_cast<float>(adam_.step_count()));
      kernels::scale_inplace(adam_.v(), adam_.size(), 1.0f / bc2);
      // Each rank's momentum starts from the averaged one.
      if (sparse_momentum_)
        std::copy(adam_.m(), adam_.m() + adam_.size(), local_momentum().begin());
    }
    return norm;
  }
  float sq = static_cast<float>(kernels::sum_of_squares(grads, table_.total_floats()));
  CANN_RETURN_IF_ERROR(
      group_.allreduce(&sq, 1, comm::DataType::kFloat32, comm::ReduceOp::kAvg)->wait());
  adam_.set_step_count(adam_.step_count() + 1);
  const auto& c = adam_.config();
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(adam_.step_count()));
  const float* m = adam_.m();
  const float* v = adam_.v();
  for (const model::TensorInfo& t : table_.tensors()) {
    if (!t.trained) continue;
    const float decay = 1.0f - lr * (t.weight_decay ? c.weight_decay : 0.0f);
    kernels::adam_apply(params + t.offset, m + t.offset, v + t.offset, t.numel, lr / bc1, c.eps,
                        decay);
  }
  return std::sqrt(static_cast<double>(sq));
}

}  // namespace cann::parallel
