// Two user activations for the custom-op tests, registered once per process:
//   squared_relu (kElementwise): y = max(x, 0)^2 (So et al. 2021, Primer);
//   rms_silu (kFullRow): y_i = silu(x_i) / r with r = sqrt(mean_j x_j^2 + 1e-5) over the row,
//     so every output depends on the whole row of hidden units.
// Backward of rms_silu, from y_i = s_i r^-1 and d(r^-1)/dx_k = -x_k / (F r^3):
//   dx_k = silu'(x_k) dy_k / r - x_k / (F r^3) * sum_i dy_i s_i.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "model/custom_op.h"

namespace cann::test {

inline float silu_of(float x) {
  return x / (1.0f + std::exp(-x));
}
inline float silu_grad_of(float x) {
  const float s = 1.0f / (1.0f + std::exp(-x));
  return s * (1.0f + x * (1.0f - s));
}

inline void register_test_activations() {
  static std::once_flag once;
  std::call_once(once, [] {
    model::ActivationOp sq;
    sq.name = "squared_relu";
    sq.rule = model::DistributionRule::kElementwise;
    sq.forward = [](float* y, const float* x, int N, int F) {
      for (long i = 0; i < static_cast<long>(N) * F; ++i) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
    };
    sq.backward = [](float* dx, const float* x, const float* dy, int N, int F) {
      for (long i = 0; i < static_cast<long>(N) * F; ++i)
        dx[i] = x[i] > 0 ? 2 * x[i] * dy[i] : 0.0f;
    };
    ASSERT_TRUE(model::register_activation(sq).ok());
    model::ActivationOp rms;
    rms.name = "rms_silu";
    rms.rule = model::DistributionRule::kFullRow;
    rms.forward = [](float* y, const float* x, int N, int F) {
      for (int n = 0; n < N; ++n) {
        const float* xr = x + static_cast<long>(n) * F;
        double ms = 0;
        for (int j = 0; j < F; ++j) ms += double(xr[j]) * xr[j];
        const float inv_r = static_cast<float>(1.0 / std::sqrt(ms / F + 1e-5));
        for (int j = 0; j < F; ++j) y[static_cast<long>(n) * F + j] = silu_of(xr[j]) * inv_r;
      }
    };
    rms.backward = [](float* dx, const float* x, const float* dy, int N, int F) {
      for (int n = 0; n < N; ++n) {
        const float* xr = x + static_cast<long>(n) * F;
        const float* dyr = dy + static_cast<long>(n) * F;
        double ms = 0, dot = 0;
        for (int j = 0; j < F; ++j) {
          ms += double(xr[j]) * xr[j];
          dot += double(dyr[j]) * silu_of(xr[j]);
        }
        const double r = std::sqrt(ms / F + 1e-5);
        for (int k = 0; k < F; ++k)
          dx[static_cast<long>(n) * F + k] =
              static_cast<float>(silu_grad_of(xr[k]) * dyr[k] / r - xr[k] / (F * r * r * r) * dot);
      }
    };
    ASSERT_TRUE(model::register_activation(rms).ok());
  });
}

}  // namespace cann::test
