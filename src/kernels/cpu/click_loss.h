// The losses of recommendation models: binary cross-entropy on a click logit (DLRM's ranking
// loss) and the softmax over in-batch candidates with a temperature that trains two-tower
// retrieval models (Yi et al. 2019), with extra sampled negatives when the caller appends them.
// ReLU, the activation of their MLPs, lives here too.
#pragma once

namespace cann::kernels {

// logits and labels (0 or 1) are (B); returns mean_b of -y log s(z) - (1-y) log(1-s(z)),
// computed as max(z,0) - z y + log(1 + exp(-|z|)) so no logit overflows.
double bce_with_logits_forward(const float* logits, const float* labels, int B);
// dlogits (B) is overwritten with dloss * (sigmoid(z) - y) / B.
void bce_with_logits_backward(float* dlogits, const float* logits, const float* labels, int B,
                              float dloss);

// u is (B,C) (queries), v is (NV,C) with NV >= B (candidates: the batch's own items, then any
// sampled negatives); the positive of query b is candidate b. scores = u v^T / temperature
// (B,NV). probs (B,NV) is overwritten with softmax(scores) per row, for the backward pass.
// Returns mean_b of logsumexp_j scores[b,j] - scores[b,b].
double in_batch_softmax_forward(float* probs, const float* u, const float* v, int B, int NV, int C,
                                float temperature);
// du (B,C) is overwritten, dv (NV,C) accumulates. probs is the forward's; it is overwritten with
// the gradient of the scores (scratch).
void in_batch_softmax_backward(float* du, float* dv, float* probs, const float* u, const float* v,
                               int B, int NV, int C, float temperature, float dloss);

// y = max(x, 0), n elements (y may be x).
void relu_forward(float* y, const float* x, long n);
// dx = dy where y > 0, else 0 (dx may be dy).
void relu_backward(float* dx, const float* dy, const float* y, long n);

}  // namespace cann::kernels
