// Softmax + cross-entropy over the vocabulary, fused: the logits are read once for the loss
// and overwritten with their own gradient, so the (N,V) probabilities never exist separately.
#pragma once

namespace cann::kernels {

// logits is (N,V); targets (N) in [0,V), or negative for positions that are not scored (BERT's
// unmasked tokens); losses (N) gets -log softmax(logits)[target], 0 where not scored.
void softmax_crossentropy_forward(float* losses, const float* logits, const int* targets, int N,
                                  int V);
// dlogits (N,V) is overwritten with grad_scale * (softmax(logits) - onehot(target)) on scored
// rows and 0 elsewhere. dlogits may alias logits (the fused, in-place form).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const int* targets,
                                   float grad_scale, int N, int V);

}  // namespace cann::kernels
