// Naive reference for kernels/cpu/linear: triple loops, templated on the scalar type so tests
// run it in double precision against finite differences and against the sgemm version.
#pragma once

namespace cann::ref {

// x (N,C), w (OC,C), b (OC) or null, y (N,OC)
template <typename F>
void linear_forward(F* y, const F* x, const F* w, const F* b, int N, int C, int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      F acc = b ? b[o] : F(0);
      for (int c = 0; c < C; ++c) acc += x[n * C + c] * w[o * C + c];
      y[n * OC + o] = acc;
    }
}

// dx overwritten; dw, db accumulate
template <typename F>
void linear_backward(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, int N, int C,
                     int OC) {
  for (int n = 0; n < N; ++n) {
    if (dx)
      for (int c = 0; c < C; ++c) {
        F acc = 0;
        for (int o = 0; o < OC; ++o) acc += dy[n * OC + o] * w[o * C + c];
        dx[n * C + c] = acc;
      }
    for (int o = 0; o < OC; ++o) {
      if (db) db[o] += dy[n * OC + o];
      if (dw)
        for (int c = 0; c < C; ++c) dw[o * C + c] += dy[n * OC + o] * x[n * C + c];
    }
  }
}

}  // namespace cann::ref
