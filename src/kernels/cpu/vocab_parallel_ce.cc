// Vocabulary-parallel cross-entropy, one row per iteration (see the header for the algebra).
#include "kernels/cpu/vocab_parallel_ce.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/vec_math.h"

namespace cann::kernels {

void vocab_ce_local_max(float* row_max, const float* logits, int N, int Vl, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<size_t>(n) * Vl;
    float mx = -std::numeric_limits<float>::infinity();
    for (int v = 0; v < valid; ++v) mx = row[v] > mx ? row[v] : mx;
    row_max[n] = mx;
  }
}

void vocab_ce_local_sums(float* sums, const float* logits, const float* row_max, const int* targets,
                         int N, int Vl, int valid, int v_begin) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* out = sums + 2 * static_cast<size_t>(n);
    if (targets[n] < 0) {
      out[0] = out[1] = 0.0f;
      continue;
    }
    const float* row = logits + static_cast<size_t>(n) * Vl;
    const float mx = row_max[n];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < valid; ++v) sum += fast_exp(row[v] - mx);
    const int t = targets[n] - v_begin;
    out[0] = sum;
    out[1] = t >= 0 && t < valid ? row[t] : 0.0f;
  }
}

void vocab_ce_losses(float* losses, float* shift, const float* row_max, const float* sums,
                     const int* targets, int N) {
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      losses[n] = 0.0f;
      shift[n] = 0.0f;
      continue;
    }
    const float lse = std::log(sums[2 * n]);
    losses[n] = lse + row_max[n] - sums[2 * n + 1];
    shift[n] = row_max[n] + lse;
  }
}

void vocab_ce_backward(float* dlogits, const float* logits, const float* shift, const int* targets,
                       float scale, int N, int Vl, int valid, int v_begin) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* drow = dlogits + static_cast<size_t>(n) * Vl;
    if (targets[n] < 0) {
      std::memset(drow, 0, sizeof(float) * Vl);
      continue;
    }
    const float* row = logits + static_cast<size_t>(n) * Vl;
    const float sh = shift[n];
#pragma omp simd
    for (int v = 0; v < valid; ++v) drow[v] = fast_exp(row[v] - sh) * scale;
    for (int v = valid; v < Vl; ++v) drow[v] = 0.0f;
    const int t = targets[n] - v_begin;
    if (t >= 0 && t < valid) drow[t] -= scale;
  }
}

}  // namespace cann::kernels
