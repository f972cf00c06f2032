// Click losses and ReLU; see click_loss.h. The in-batch softmax's two GEMMs (scores, and the
// gradients of both towers) go through the linear layer's GEMMs.
#include "kernels/cpu/click_loss.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/linear.h"

namespace cann::kernels {

double bce_with_logits_forward(const float* logits, const float* labels, int B) {
  double sum = 0.0;
  for (int b = 0; b < B; ++b) {
    const double z = logits[b];
    sum += std::max(z, 0.0) - z * labels[b] + std::log1p(std::exp(-std::abs(z)));
  }
  return B > 0 ? sum / B : 0.0;
}

void bce_with_logits_backward(float* dlogits, const float* logits, const float* labels, int B,
                              float dloss) {
  const float scale = dloss / static_cast<float>(B);
  for (int b = 0; b < B; ++b) {
    const float s = 1.0f / (1.0f + std::exp(-logits[b]));
    dlogits[b] = scale * (s - labels[b]);
  }
}

double in_batch_softmax_forward(float* probs, const float* u, const float* v, int B, int NV, int C,
                                float temperature) {
  linear_forward(probs, u, v, nullptr, B, C, NV);
  const float inv_t = 1.0f / temperature;
  double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
  for (int b = 0; b < B; ++b) {
    float* row = probs + static_cast<int64_t>(b) * NV;
    float m = -INFINITY;
    for (int j = 0; j < NV; ++j) m = std::max(m, row[j] * inv_t);
    double sum = 0.0;
    for (int j = 0; j < NV; ++j) {
      row[j] = std::exp(row[j] * inv_t - m);
      sum += row[j];
    }
    // log p(positive) = log(row[b] / sum), with row[b] = exp(score_bb - m).
    loss += std::log(sum) - std::log(static_cast<double>(row[b]));
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < NV; ++j) row[j] *= inv;
  }
  return B > 0 ? loss / B : 0.0;
}

void in_batch_softmax_backward(float* du, float* dv, float* probs, const float* u, const float* v,
                               int B, int NV, int C, float temperature, float dloss) {
  // d loss / d scores[b,j] = (p[b,j] - [j == b]) / B; scores = u v^T / t.
  const float scale = dloss / (static_cast<float>(B) * temperature);
  for (int b = 0; b < B; ++b) {
    float* row = probs + static_cast<int64_t>(b) * NV;
    row[b] -= 1.0f;
    for (int j = 0; j < NV; ++j) row[j] *= scale;
  }
  linear_backward(du, dv, nullptr, probs, u, v, B, C, NV);
}

void relu_forward(float* y, const float* x, long n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (long i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(float* dx, const float* dy, const float* y, long n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (long i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace cann::kernels
