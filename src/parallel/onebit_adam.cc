// 1-bit Adam's two stages.
#include "parallel/onebit_adam.h"

#include <cmath>

#include "kernels/cpu/grad_norm.h"

namespace cann::parallel {

OneBitAdam::OneBitAdam(const model::ParamTable& table, optim::AdamWConfig config,
                       comm::Group& group, const std::vector<Bucket>& buckets, int warmup_steps)
    : table_(table), group_(group), adam_(table, config), warmup_steps_(warmup_steps) {
  full_ = std::make_unique<FullReduction>(group, /*bf16=*/false);
  momentum_ = std::make_unique<OneBitMomentum>(group, buckets, adam_.m(), config.beta1);
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
