// 1-bit Adam's two stages.
#include "parallel/onebit_adam.h"

#include <cmath>

#include "kernels/cpu/grad_norm.h"

namespace cann::parallel {

namespace {

// Top-k's compressed stage: the bucket's gradients averaged through the compressor, then the
// momentum updated with them.
class SparseMomentum : public BucketReduction {
 public:
  SparseMomentum(BucketReduction& compressor, float* m, float beta1)
      : compressor_(compressor), m_(m), beta1_(beta1) {}
  Status reduce(const Bucket& bucket, size_t index, float* grads) override {
    CANN_RETURN_IF_ERROR(compressor_.reduce(bucket, index, grads));
    float* m = m_ + bucket.begin;
    const float* g = grads + bucket.begin;
    for (size_t i = 0; i < bucket.size(); ++i) m[i] = beta1_ * m[i] + (1.0f - beta1_) * g[i];
    return OkStatus();
  }

 private:
  BucketReduction& compressor_;
  float* m_;
  float beta1_;
};

}  // namespace

OneBitAdam::OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config,
                       comm::Group& group, const std::vector<Bucket>& buckets, int warmup_steps,
                       BucketReduction* gradient_compressor)
    : table_(table), group_(group), adam_(table, config), warmup_steps_(warmup_steps) {
  full_ = std::make_unique<FullReduction>(group, /*bf16=*/false);
  if (gradient_compressor != nullptr) {
    sparse_momentum_ =
        std::make_unique<SparseMomentum>(*gradient_compressor, adam_.m(), config.beta1);
    compressed_ = sparse_momentum_.get();
  } else {
    momentum_ = std::make_unique<OneBitMomentum>(group, buckets, adam_.m(), config.beta1);
    compressed_ = momentum_.get();
  }
}

StatusOr<double> OneBitAdam::step(float* params, const float* grads, float lr) {
  if (!compressing()) {
    const double norm = adam_.step(params, grads, lr);
    if (compressing()) {
      // The switch: freeze the variance, bias-corrected with the last warmup step's count.
      const float bc2 =
          1.0f - std::pow(adam_.config().beta2, static_cast<float>(adam_.step_count()));
      kernels::scale_inplace(adam_.v(), adam_.size(), 1.0f / bc2);
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
    const float decay = 1.0f - lr * (t.weight_decay ? c.weight_decay : 0.0f);
    float* p = params + t.offset;
    const float* mt = m + t.offset;
    const float* vt = v + t.offset;
    const long n = static_cast<long>(t.numel);
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
    for (long i = 0; i < n; ++i)
      p[i] = p[i] * decay - lr * (mt[i] / bc1) / (std::sqrt(vt[i]) + c.eps);
  }
  return std::sqrt(static_cast<double>(sq));
}

}  // namespace cann::parallel
