// Naive reference for kernels/cpu/embedding.
#pragma once

namespace cann::ref {

template <typename F>
void embedding_forward(F* out, const int* tokens, const F* wte, const F* wpe, int B, int T, int C) {
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) out[bt * C + c] = wte[tokens[bt] * C + c] + wpe[(bt % T) * C + c];
}

template <typename F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int* tokens, int B, int T, int C) {
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) {
      dwte[tokens[bt] * C + c] += dout[bt * C + c];
      dwpe[(bt % T) * C + c] += dout[bt * C + c];
    }
}

}  // namespace cann::ref
