// Softmax cross-entropy, one row per iteration. Subtracting the row max keeps exp in range.
// The backward recomputes the row's log-sum-exp instead of storing (N,V) probabilities: one
// extra pass over a row that is already in cache.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {
namespace {

// Returns log(sum_j exp(row[j] - mx)) and the max via mx.
float row_logsumexp(const float* row, int V, float* mx_out) {
  float mx = row[0];
  for (int v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; ++v) sum += fast_exp(row[v] - mx);
  *mx_out = mx;
  return std::log(sum);
}

}  // namespace

void softmax_crossentropy_forward(float* losses, const float* logits, const int* targets, int N,
                                  int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float* row = logits + static_cast<size_t>(n) * V;
    float mx;
    const float lse = row_logsumexp(row, V, &mx);
    losses[n] = lse - (row[targets[n]] - mx);
  }
}

void softmax_crossentropy_backward(float* dlogits, const float* logits, const int* targets,
                                   float grad_scale, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* drow = dlogits + static_cast<size_t>(n) * V;
    if (targets[n] < 0) {
      std::memset(drow, 0, sizeof(float) * V);
      continue;
    }
    const float* row = logits + static_cast<size_t>(n) * V;
    float mx;
    const float lse = row_logsumexp(row, V, &mx);
    const float shift = mx + lse;
#pragma omp simd
    for (int v = 0; v < V; ++v) drow[v] = fast_exp(row[v] - shift) * grad_scale;
    drow[targets[n]] -= grad_scale;
  }
}

}  // namespace cann::kernels
