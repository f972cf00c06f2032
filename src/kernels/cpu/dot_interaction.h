// DLRM's feature interaction (Naumov et al. 2019): the bottom MLP's output and every sparse
// feature's pooled embedding, all of width C, meet through their pairwise dot products, which
// the top MLP reads together with the bottom MLP's output itself.
#pragma once

namespace cann::kernels {

// Width of one example's interaction output for N vectors of width C: C + N(N-1)/2.
inline int dot_interaction_width(int N, int C) {
  return C + N * (N - 1) / 2;
}

// x is (B,N,C), x[b,0,:] the bottom MLP's output; z is (B, C + N(N-1)/2): z[b,:C] = x[b,0,:],
// then <x[b,i,:], x[b,j,:]> for i = 1..N-1, j = 0..i-1 in that order (the strictly lower
// triangle row by row, as DLRM's reference implementation orders it; no self products).
void dot_interaction_forward(float* z, const float* x, int B, int N, int C);
// dz is (B, C + N(N-1)/2); dx (B,N,C) is overwritten.
void dot_interaction_backward(float* dx, const float* dz, const float* x, int B, int N, int C);

}  // namespace cann::kernels
