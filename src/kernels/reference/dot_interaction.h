// Naive reference for kernels/cpu/dot_interaction.
#pragma once

namespace cann::ref {

template <typename F>
void dot_interaction_forward(F* z, const F* x, int B, int N, int C) {
  const int W = C + N * (N - 1) / 2;
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) z[b * W + c] = x[b * N * C + c];
    int p = C;
    for (int i = 1; i < N; ++i)
      for (int j = 0; j < i; ++j) {
        F dot = 0;
        for (int c = 0; c < C; ++c) dot += x[(b * N + i) * C + c] * x[(b * N + j) * C + c];
        z[b * W + p++] = dot;
      }
  }
}

template <typename F>
void dot_interaction_backward(F* dx, const F* dz, const F* x, int B, int N, int C) {
  const int W = C + N * (N - 1) / 2;
  for (int i = 0; i < B * N * C; ++i) dx[i] = 0;
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c) dx[b * N * C + c] = dz[b * W + c];
    int p = C;
    for (int i = 1; i < N; ++i)
      for (int j = 0; j < i; ++j, ++p)
        for (int c = 0; c < C; ++c) {
          dx[(b * N + i) * C + c] += dz[b * W + p] * x[(b * N + j) * C + c];
          dx[(b * N + j) * C + c] += dz[b * W + p] * x[(b * N + i) * C + c];
        }
  }
}

}  // namespace cann::ref
