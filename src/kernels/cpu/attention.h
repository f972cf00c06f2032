// Multi-head scaled dot-product attention with the softmax fused in, causal (GPT) or
// bidirectional (BERT), with grouped-query attention when kv_heads < heads.
#pragma once

namespace cann::kernels {

// qkv is (B,T,QKV) with QKV = (NH + 2*KVH)*HS, each token laid out [q heads | k heads | v heads];
// query head h reads kv head h / (NH/KVH). out is (B,T,C) with C = NH*HS. att is (B,NH,T,T):
// the softmax probabilities, saved for backward (entries above the diagonal are 0 when causal).
struct AttentionShape {
  int B, T, NH, KVH, HS;
  bool causal;
  int C() const { return NH * HS; }
  int QKV() const { return (NH + 2 * KVH) * HS; }
};

// out may be null: then only att is computed.
void attention_forward(float* out, float* att, const float* qkv, const AttentionShape& s);
// att alone, for selective recomputation: the same GEMMs and softmax as attention_forward, so
// the probabilities come out bitwise equal to the ones it saved.
void attention_probs_forward(float* att, const float* qkv, const AttentionShape& s);
// dqkv (B,T,QKV) is overwritten; dout is (B,T,C).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s);

}  // namespace cann::kernels
