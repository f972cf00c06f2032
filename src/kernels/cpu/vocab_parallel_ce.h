// Cross-entropy over a vocabulary split across tensor-parallel ranks (Megatron's
// vocabulary-parallel cross-entropy, Shoeybi et al. 2019): each rank holds the logits of its
// slice [v_begin, v_begin + valid) of the vocabulary; the loss needs only three numbers per
// row from the other ranks, never their logits:
//   1. local row max                       -> max over ranks   (global max m)
//   2. local sum of exp(logit - m), and the target's logit on the rank that owns the target
//                                          -> sum over ranks   (S and z_target)
//   3. loss = log S + m - z_target; dlogit = (exp(logit - m - log S) - onehot) * scale.
// Columns valid..Vl-1 of a shard are vocabulary padding: they are never scored.
#pragma once

namespace cann::kernels {

// logits is (N,Vl); row_max (N) gets the max over the row's valid columns.
void vocab_ce_local_max(float* row_max, const float* logits, int N, int Vl, int valid);
// sums is (N,2): [sum_j exp(logit_j - row_max), logit of the target if this rank owns it else 0].
// Rows with target < 0 get zeros.
void vocab_ce_local_sums(float* sums, const float* logits, const float* row_max, const int* targets,
                         int N, int Vl, int valid, int v_begin);
// From the reduced row_max and sums: losses (N) = log S + m - z (0 where not scored), and
// shift (N) = m + log S, which the backward needs.
void vocab_ce_losses(float* losses, float* shift, const float* row_max, const float* sums,
                     const int* targets, int N);
// dlogits (N,Vl), may alias logits: scale * (softmax - onehot) on scored rows, 0 elsewhere
// and on padding columns.
void vocab_ce_backward(float* dlogits, const float* logits, const float* shift, const int* targets,
                       float scale, int N, int Vl, int valid, int v_begin);

}  // namespace cann::kernels
